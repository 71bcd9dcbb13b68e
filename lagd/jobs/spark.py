"""The Spark side of the jobs: a SparkSession with the JDBC driver, and partitioned history reads.

Kept apart from the job logic so the jobs read like queries. Everything that can be missing
on a machine (Java, the PostgreSQL JDBC jar) is checked before the JVM starts, so the
operator gets one line naming what to install instead of a Java stack trace.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lagd import logs

log = logs.get(__name__)

DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"
DEFAULT_DRIVER_MEMORY = "2g"  # jobs.driver-memory's default


class JobError(RuntimeError):
    """A job cannot run; `str()` says what to install or which setting to change."""


def find_java(java_home: str = "") -> str:
    """The Java home to use: the jobs.java-home setting, else JAVA_HOME, else `java` on PATH."""
    for source, home in (("jobs.java-home", java_home), ("JAVA_HOME", os.environ.get("JAVA_HOME", ""))):
        if home:
            if (Path(home) / "bin" / "java").is_file():
                return home
            raise JobError(
                f"{source} is {home!r} but {home}/bin/java does not exist: point it at a Java 17+ "
                "installation or install one (apt-get install default-jre-headless)"
            )
    java = shutil.which("java")
    if java is None:
        raise JobError(
            "no Java found for Spark: apt-get install default-jre-headless, or set jobs.java-home to a Java 17+ home"
        )
    return str(Path(java).resolve().parent.parent)


def find_jdbc_jar(jdbc_jar: str = DEFAULT_JDBC_JAR) -> str:
    """The PostgreSQL JDBC driver jar named by jobs.jdbc-jar, checked to exist."""
    path = Path(jdbc_jar or DEFAULT_JDBC_JAR)
    if not path.is_file():
        raise JobError(
            f"PostgreSQL JDBC driver not found at {path}: apt-get install libpostgresql-jdbc-java, "
            "or set jobs.jdbc-jar to the driver's jar file"
        )
    return str(path)


def build_session(
    master: str = "local[2]",
    app_name: str = "lagd",
    shuffle_partitions: int = 4,
    jdbc_jar: str = DEFAULT_JDBC_JAR,
    java_home: str = "",
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
) -> Any:
    """A SparkSession (or the running one) with the JDBC driver on its classpath and quiet logs.

    An empty `master` leaves the choice to spark-submit (its --master) or Spark's default.
    `driver_memory` is jobs.driver-memory (LAGD_JOBS_DRIVER_MEMORY).
    """
    home = find_java(java_home)
    jar = find_jdbc_jar(jdbc_jar)
    os.environ["JAVA_HOME"] = home
    # Executors must run the same Python as the driver (the venv with lagd in it).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master) if master else SparkSession.builder  # "": spark-submit's
    session = (
        builder.appName(app_name)
        .config("spark.jars", jar)
        .config("spark.driver.extraClassPath", jar)
        .config("spark.executor.extraClassPath", jar)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", driver_memory or DEFAULT_DRIVER_MEMORY)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    log.debug("spark session", master=master, java_home=home, jdbc_jar=jar)
    return session


def jdbc_options(database_url: str) -> tuple[str, dict[str, str]]:
    """Turn postgresql://user:pw@host:port/db?... into a JDBC URL and connection properties.

    The password goes into the properties, never into the URL (which may be logged). A
    Unix-socket URL (host=/path, as some embedded servers give) cannot be reached by the
    JDBC driver without extra jars: that is a JobError asking for a TCP URL.
    """
    text = database_url.replace("postgresql+asyncpg://", "postgresql://").replace(
        "postgresql+psycopg2://", "postgresql://"
    )
    text = text.replace("postgres://", "postgresql://", 1) if text.startswith("postgres://") else text
    parts = urlsplit(text)
    if parts.scheme != "postgresql":
        raise JobError(f"storage.database-url must start with postgresql://, got scheme {parts.scheme!r}")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = parts.hostname or query.pop("host", "") or "localhost"
    if host.startswith("/"):
        raise JobError(
            f"storage.database-url names a Unix socket ({host}); the JDBC driver needs TCP: "
            "use postgresql://user@127.0.0.1:5432/db"
        )
    port = parts.port or int(query.pop("port", "5432"))
    database = unquote(parts.path.lstrip("/")) or "postgres"
    props: dict[str, str] = {"driver": "org.postgresql.Driver"}
    user = unquote(parts.username) if parts.username else query.pop("user", "")
    password = unquote(parts.password) if parts.password else query.pop("password", "")
    if user:
        props["user"] = user
    if password:
        props["password"] = password
    if "sslmode" in query:
        props["sslmode"] = query["sslmode"]
    host_part = f"[{host}]" if ":" in host else host
    return f"jdbc:postgresql://{host_part}:{port}/{database}", props


def read_range(
    spark: Any,
    database_url: str,
    table: str,
    columns: list[str],
    start_ms: int,
    end_ms: int,
    partitions: int,
    where: str = "",
) -> Any:
    """Rows of a history table with start_ms <= ts < end_ms, read by `partitions` parallel queries on ts."""
    url, props = jdbc_options(database_url)
    cols = ", ".join(f'"{c}"' for c in columns)
    extra = f" AND ({where})" if where else ""
    query = f'(SELECT {cols} FROM {table} WHERE ts >= {int(start_ms)} AND ts < {int(end_ms)}{extra}) AS "r"'
    return spark.read.jdbc(
        url,
        query,
        column="ts",
        lowerBound=int(start_ms),
        upperBound=max(int(end_ms), int(start_ms) + 1),
        numPartitions=max(1, partitions),
        properties={**props, "fetchsize": "10000"},
    )


def write_table(df: Any, database_url: str, table: str) -> None:
    """Append a DataFrame to an existing table over JDBC (batched inserts)."""
    url, props = jdbc_options(database_url)
    df.write.jdbc(url, table, mode="append", properties={**props, "batchsize": "5000", "reWriteBatchedInserts": "true"})
