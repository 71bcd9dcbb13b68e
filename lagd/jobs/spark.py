"""The Spark side of the jobs: a SparkSession with the JDBC driver, and partitioned history reads.

Kept apart from the job logic so the jobs read like queries. Everything that can be missing
on a machine (Java, the PostgreSQL JDBC jar) is checked before the JVM starts, so the
operator gets one line naming what to install instead of a Java stack trace.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg2  # type: ignore[import-untyped]

from lagd.core.config import ConfigError, Settings, load
from lagd.jobs import jvmlog
from lagd.runtime import logs

log = logs.get(__name__)

Checked = TypeVar("Checked")

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


# Properties whose value is a list: spark-conf adds to lagd's (the JDBC jar) instead of replacing it.
_LIST_PROPERTIES = {"spark.jars": ",", "spark.driver.extraClassPath": ":", "spark.executor.extraClassPath": ":"}


def spark_properties(
    master: str,
    jar: str,
    shuffle_partitions: int = 4,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    executor_cores: int = 0,
    executor_memory: str = "",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every Spark property a job's session gets: lagd's own, then jobs.executor-*, then jobs.spark-conf.

    With a local master the driver is the only JVM and nothing else has to reach it, so it
    listens on loopback only; on a cluster the executors connect back to the driver, so its
    address is Spark's choice (the host's name, SPARK_LOCAL_IP, or spark.driver.host in spark-conf).
    """
    props = {
        "spark.jars": jar,
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": driver_memory or DEFAULT_DRIVER_MEMORY,
    }
    if master.startswith("local"):
        props["spark.driver.bindAddress"] = "127.0.0.1"
        props["spark.driver.host"] = "127.0.0.1"
    if executor_cores:
        props["spark.executor.cores"] = str(executor_cores)
    if executor_memory:
        props["spark.executor.memory"] = executor_memory
    for name, value in (extra or {}).items():
        sep = _LIST_PROPERTIES.get(name)
        props[name] = f"{props[name]}{sep}{value}" if sep and props.get(name) else value
    return props


def build_session(
    master: str = "local[2]",
    app_name: str = "lagd",
    shuffle_partitions: int = 4,
    jdbc_jar: str = DEFAULT_JDBC_JAR,
    java_home: str = "",
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    executor_cores: int = 0,
    executor_memory: str = "",
    spark_conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession (or the running one) with the JDBC driver on its classpath and quiet logs.

    An empty `master` leaves the choice to spark-submit (its --master) or Spark's default.
    The properties are `spark_properties`' (jobs.driver-memory, jobs.executor-*, jobs.spark-conf).
    """
    home = find_java(java_home)
    jar = find_jdbc_jar(jdbc_jar)
    os.environ["JAVA_HOME"] = home
    # Executors must run the same Python as the driver (the venv with lagd in it).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):  # on loopback anyway (spark.driver.bindAddress): no warning about the host's name
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master) if master else SparkSession.builder  # "": spark-submit's
    builder = builder.appName(app_name)
    props = spark_properties(
        master, jar, shuffle_partitions, driver_memory, executor_cores, executor_memory, spark_conf
    )
    with jvmlog.driver_logging() as java_option:  # the driver JVM logs in lagd's [log] format and level
        given = props.get("spark.driver.extraJavaOptions", "")
        props["spark.driver.extraJavaOptions"] = f"{java_option} {given}".strip()
        for name, value in props.items():
            builder = builder.config(name, value)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(jvmlog.spark_level())
    # Names only: a spark-conf value may hold a credential (an object store's key).
    log.debug("spark session", master=master, java_home=home, jdbc_jar=jar, properties=sorted(props))
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


# What to do next, by what the failure and its causes say (regular expressions over the
# lowercased text, not the stack frames); the first match wins.
_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"password authentication failed|no pg_hba\.conf entry|invalidauthorizationspecification",
        "check the user and password in storage.database-url (and pg_hba.conf on the database server)",
    ),
    (r'role "[^"]*" does not exist', "check the user in storage.database-url: PostgreSQL has no such role"),
    (
        r'database "[^"]*" does not exist',
        "create the database named in storage.database-url (createdb), then run `lagd db upgrade`",
    ),
    (
        r"does not exist|undefinedtable|undefinedcolumn",
        "the database lacks lagd's tables or columns: run `lagd db upgrade` with this configuration",
    ),
    (
        r"permission denied|insufficientprivilege",
        "grant the storage.database-url user access to lagd's tables, or use the user `lagd db upgrade` ran as",
    ),
    (
        r"connection refused|could(n't| not) connect|connection attempt failed|unknownhostexception"
        r"|could not translate host name|timeout expired|connectexception",
        "check storage.database-url and that PostgreSQL is running and reachable from here "
        "(and from the Spark executors)",
    ),
    (
        r"outofmemoryerror|java heap space|gc overhead limit",
        "give the Spark driver more memory, or run a shorter range with --from/--to",
    ),
    (
        r"classnotfoundexception: org\.postgresql|no suitable driver",
        "the PostgreSQL JDBC driver is not on Spark's classpath: set jobs.jdbc-jar (with spark-submit, also --jars)",
    ),
)


def _java_causes(exc: BaseException) -> list[str]:
    """'Class: message' of a Spark/Py4J error's Java exception and each of its causes, outermost first."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    out: list[str] = []
    try:
        while java is not None and len(out) < 20:
            out.append(f"{java.getClass().getSimpleName()}: {java.getMessage()}")
            java = java.getCause()
    except Exception:  # the JVM may be gone: keep what was read
        pass
    return out


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a Py4J error asks the JVM for its text, and the JVM may be gone
        return ""


def explain(exc: BaseException) -> tuple[str, str | None]:
    """One line saying why a job failed and one saying what to do next (None: the reason says it)."""
    if isinstance(exc, JobError):
        return (_text(exc).splitlines() or ["job error"])[0], None  # a JobError names its own remedy
    causes = _java_causes(exc)
    deepest = causes[-1] if causes else f"{type(exc).__name__}: {_text(exc)}"
    reason = next((line.strip() for line in deepest.splitlines() if line.strip()), type(exc).__name__)
    reason = reason.removeprefix("ERROR: ")
    if ": ERROR: " in reason:
        reason = reason.replace(": ERROR: ", ": ", 1)
    haystack = " ".join([type(exc).__name__, *(causes or [_text(exc)])]).lower()  # messages, not stack frames
    for pattern, hint in _HINTS:
        if re.search(pattern, haystack):
            return reason, hint
    if isinstance(exc, psycopg2.Error):
        return (
            reason,
            "PostgreSQL refused the job's statement: see the server's log; after a lagd upgrade run `lagd db upgrade`",
        )
    return reason, 'Spark failed: run again with log.level = "debug" for the full Java trace'


def job_errors() -> tuple[type[BaseException], ...]:
    """The failures a job reports in two lines instead of a trace (anything else is a bug: traced)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    return (JobError, psycopg2.Error, Py4JError, PySparkException)


def say(line: str) -> None:
    """A job's progress line for the operator: on stderr, or a JSON event when log.format is JSON
    (so every line of a journal of JSON lines parses)."""
    if logs.is_json():
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


def report_failure(job: str, exc: BaseException) -> int:
    """Say why `job` failed and what to do next, on stderr or as one JSON event (the trace goes to
    the debug log); 1."""
    reason, hint = explain(exc)
    log.debug("job failure trace", job=job, exc_info=exc)
    if logs.is_json():
        log.error("job failed", job=job, reason=reason, **({"next": hint} if hint else {}))
        return 1
    print(f"lagd: {job} job failed: {reason}", file=sys.stderr)
    if hint:
        print(f"lagd: {hint}", file=sys.stderr)
    return 1


def stop_session(spark: Any) -> None:
    """Stop the SparkSession; a JVM that already died is not worth a trace."""
    try:
        spark.stop()
    except Exception as exc:
        log.debug("spark stop failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def session_for(settings: Settings, app_name: str, master: str | None = None) -> Any:
    """A job's SparkSession from the jobs settings (`master` from --master overrides)."""
    return build_session(
        master=settings.jobs.spark_master if master is None else master,
        app_name=app_name,
        shuffle_partitions=max(2, settings.jobs.jdbc_partitions),
        jdbc_jar=settings.jobs.jdbc_jar,
        java_home=settings.jobs.java_home,
        driver_memory=settings.jobs.driver_memory,
        executor_cores=settings.jobs.executor_cores,
        executor_memory=settings.jobs.executor_memory,
        spark_conf=settings.jobs.spark_conf,
    )


def run_job(
    settings: Settings,
    job: str,
    master: str | None,
    check: Callable[[], Checked],
    run: Callable[[Any, Checked], object],
) -> int:
    """`lagd jobs <job>` on a SparkSession named lagd-<job>: `check` (the range asked for) runs before
    the JVM starts, so a wrong argument costs no Spark start-up. 0 when done; 1 with what failed and
    what to do next when the check, Spark or the database fails (anything else is a bug: traced)."""
    errors = job_errors()
    try:
        checked = check()
        spark = session_for(settings, f"lagd-{job}", master)
    except errors as exc:
        return report_failure(job, exc)
    try:
        run(spark, checked)
    except errors as exc:
        return report_failure(job, exc)
    finally:
        stop_session(spark)
    return 0


def submit_entry(
    job: str,
    main: Callable[[Settings, argparse.Namespace], int],
    argv: Sequence[str] | None,
    from_help: str,
    to_help: str,
) -> int:
    """A job module's entry for spark-submit (`spark-submit lagd/jobs/<module>.py --config FILE`):
    the same arguments and exit codes as `lagd jobs <job>`."""
    parser = argparse.ArgumentParser(prog=f"lagd-{job}", description=f"lagd {job} job (spark-submit entry)")
    parser.add_argument("--config", "-c", default="/etc/lagd/lagd.toml")
    parser.add_argument("--from", dest="start", default=None, help=from_help)
    parser.add_argument("--to", dest="end", default=None, help=to_help)
    parser.add_argument("--master", default="", help="Spark master (default: the one spark-submit was given)")
    args = parser.parse_args(argv)
    try:
        settings = load(args.config)
    except ConfigError as exc:
        print(f"lagd: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log.level, settings.log.format)
    return main(settings, args)
