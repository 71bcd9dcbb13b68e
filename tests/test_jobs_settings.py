"""The jobs' Spark settings: executor cores and memory, any spark.* property, where the driver listens.

check-config refuses what Spark would misread, naming the key and what to write instead; the
properties reach the SparkSession (here the local one; a standalone cluster: test_jobs_standalone).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lagd.core.config import ConfigError, parse
from lagd.jobs.spark import spark_properties

MINIMAL: dict[str, Any] = {"clusters": {"prod": {"bootstrap-servers": ["k1:9092"]}}}
JAR = "/usr/share/java/postgresql.jar"


def _jobs(text: str) -> Any:
    return parse({**MINIMAL, **tomllib.loads(text)}, env={}).jobs


def test_executor_settings_and_spark_conf_from_toml() -> None:
    jobs = _jobs(
        """
        [jobs]
        executor-cores = 2
        executor-memory = "3g"
        [jobs.spark-conf]
        "spark.cores.max" = "8"
        spark.executor.instances = 4          # unquoted: TOML nests it, lagd joins the name again
        "spark.dynamicAllocation.enabled" = false
        """
    )
    assert (jobs.executor_cores, jobs.executor_memory) == (2, "3g")
    assert jobs.spark_conf == {
        "spark.cores.max": "8",
        "spark.executor.instances": "4",
        "spark.dynamicAllocation.enabled": "false",
    }


def test_defaults_leave_spark_its_own() -> None:
    jobs = parse(MINIMAL, env={}).jobs
    assert (jobs.executor_cores, jobs.executor_memory, jobs.spark_conf) == (0, "", {})
    props = spark_properties("spark://m:7077", JAR)
    assert "spark.executor.cores" not in props and "spark.executor.memory" not in props


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("[jobs]\nexecutor-cores = -1", "jobs.executor-cores", "or 0 for Spark's default"),
        ("[jobs]\nexecutor-cores = '2'", "jobs.executor-cores", "expected an integer"),
        ('[jobs]\nexecutor-memory = "lots"', "jobs.executor-memory", "such as 4g or 512m"),
        (
            '[jobs.spark-conf]\n"executor.instances" = "4"',
            'jobs.spark-conf."executor.instances"',
            "start with 'spark.'",
        ),
        ('[jobs.spark-conf]\n"spark.master" = "yarn"', 'jobs.spark-conf."spark.master"', "set jobs.spark-master"),
        (
            '[jobs.spark-conf]\n"spark.executor.memory" = "4g"',
            'jobs.spark-conf."spark.executor.memory"',
            "set jobs.executor-memory",
        ),
        (
            '[jobs.spark-conf]\n"spark.driver.memory" = "4g"',
            'jobs.spark-conf."spark.driver.memory"',
            "set jobs.driver-memory",
        ),
        ('[jobs.spark-conf]\n"spark.files" = ["a", "b"]', 'jobs.spark-conf."spark.files"', 'a string such as "4"'),
        ('[jobs]\nspark-conf = "spark.x=1"', "jobs.spark-conf", 'with "spark.x.y" = "value" lines'),
        (
            '[clusters.dr]\nbootstrap-servers = ["k2:9092"]\n[mirrors.m]\nsource = "prod"\ntarget = "dr"\nmm1-group = "mm"',
            "mirrors.m.mm1-group",
            "judged as every consumer group of the source cluster",
        ),
    ],
)
def test_bad_jobs_settings_name_the_key_and_what_to_do(text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _jobs(text)
    assert err.value.key == key
    assert says in str(err.value)


def test_spark_conf_cannot_come_from_the_environment() -> None:
    with pytest.raises(ConfigError) as err:
        parse(MINIMAL, env={"LAGD_JOBS_SPARK_CONF": "spark.cores.max=8"})
    assert err.value.key == "jobs.spark-conf"
    assert "put the properties in a [jobs.spark-conf] table" in str(err.value)
    assert parse(MINIMAL, env={"LAGD_JOBS_EXECUTOR_MEMORY": "6g"}).jobs.executor_memory == "6g"


def test_properties_layer_settings_then_spark_conf() -> None:
    props = spark_properties(
        "spark://m:7077",
        JAR,
        shuffle_partitions=8,
        driver_memory="1g",
        executor_cores=2,
        executor_memory="3g",
        extra={
            "spark.sql.shuffle.partitions": "64",  # replaces lagd's default
            "spark.jars": "/opt/extra.jar",  # added to the JDBC jar, not put in its place
            "spark.executor.extraClassPath": "/opt/extra.jar",
            "spark.driver.host": "10.0.0.5",
        },
    )
    assert props["spark.executor.cores"] == "2" and props["spark.executor.memory"] == "3g"
    assert props["spark.driver.memory"] == "1g"
    assert props["spark.sql.shuffle.partitions"] == "64"
    assert props["spark.jars"] == f"{JAR},/opt/extra.jar"
    assert props["spark.executor.extraClassPath"] == f"{JAR}:/opt/extra.jar"
    assert props["spark.driver.extraClassPath"] == JAR
    # On a cluster the driver is reached by the executors: not pinned to loopback.
    assert "spark.driver.bindAddress" not in props and props["spark.driver.host"] == "10.0.0.5"


def test_a_local_driver_listens_on_loopback_only(spark: Any) -> None:
    for master in ("local[2]", "local[*]", "local"):
        props = spark_properties(master, JAR)
        assert (props["spark.driver.bindAddress"], props["spark.driver.host"]) == ("127.0.0.1", "127.0.0.1")
    for master in ("spark://m:7077", "yarn", "k8s://https://api:6443", ""):
        assert "spark.driver.bindAddress" not in spark_properties(master, JAR)
    # The session the tests share was built by build_session with local[2]: its driver is on loopback.
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.driver.host") == "127.0.0.1"


@pytest.mark.parametrize("module", ["trends", "mirrors", "mirror_trends"])
def test_a_jobs_spark_submit_entry_takes_the_cli_arguments_and_names_a_bad_config(module: str, tmp_path: Path) -> None:
    """`spark-submit lagd/jobs/<module>.py`: the arguments of `lagd jobs`, and a config it cannot read
    refused with exit code 2 and what to pass instead, before any Spark starts."""
    script = Path(__file__).resolve().parent.parent / "lagd" / "jobs" / f"{module}.py"
    usage = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0, usage.stderr
    assert all(flag in usage.stdout for flag in ("--config", "--from", "--to", "--master")), usage.stdout
    missing = tmp_path / "absent.toml"
    refused = subprocess.run(
        [sys.executable, str(script), "--config", str(missing)], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert f"cannot read {missing}" in refused.stderr and "TOML settings file" in refused.stderr, refused.stderr
