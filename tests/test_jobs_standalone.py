"""The trends job on a real Spark standalone cluster: a master and a worker of pyspark's own,
started here on 127.0.0.1, and `lagd jobs trends` run as an operator runs it, with the master,
executor and spark-conf settings from the file. The rollups must be the exact ones of the local
tests, the master must have run the job as an application with the executor settings, and
every line the job wrote must be JSON, as its [log] settings ask."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lagd.embedded import services as embedded
from lagd.jobs.spark import find_java
from tests.postgres import query
from tests.test_jobs_mirror_trends import assert_stop_and_catch_up
from tests.test_jobs_mirror_trends import history as mirror_history
from tests.test_jobs_mirrors import _insert
from tests.test_jobs_trends import EXPECTED_TRENDS, T0, S, _same, _trends
from tests.test_jobs_trends import history as history  # the fixture: a small history with known rollups

pytestmark = pytest.mark.slow

READY_TIMEOUT = 60.0  # seconds for the master to answer and the worker to register
# A guard against a hung job, not a measure of its speed: on two busy cores the mirror-trends job took
# over 120 s in 2 of 8 runs (2026-12-03); a job's time is bench/bench_trends.py's to measure.
JOB_TIMEOUT = 600.0


def _spark_class(main: str, args: list[str], workdir: Path, name: str, env: dict[str, str]) -> embedded.Process:
    """One of pyspark's JVM daemons (Master, Worker) in the foreground, in a process group of its own."""
    import pyspark

    home = Path(pyspark.__file__).parent
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(home / "bin" / "spark-class"), main, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=workdir,
            env={**env, "SPARK_HOME": str(home)},
        )
    return embedded.Process(proc=proc, log=log)


def _json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/json/", timeout=5) as resp:
        state: dict[str, Any] = json.load(resp)
    return state


@dataclass
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI, whose /json/ describes workers and applications
    worker_ui: str  # the worker's, whose /json/ describes the executors it ran

    def state(self) -> dict[str, Any]:
        return _json(self.ui)


def _wait_alive(cluster: Standalone, procs: list[embedded.Process]) -> None:
    """Until the master answers with one ALIVE worker; fails at once when a daemon exits."""
    deadline = time.monotonic() + READY_TIMEOUT
    last = "no answer"
    while time.monotonic() < deadline:
        for p in procs:
            if p.proc.poll() is not None:
                raise AssertionError(f"{p.log.name} exited with {p.proc.returncode}:\n{p.log_tail()}")
        try:
            state = cluster.state()
            if state.get("aliveworkers") == 1:
                return
            last = f"aliveworkers={state.get('aliveworkers')}"
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.1)  # a polling interval, bounded by the deadline
    tails = "\n".join(p.log_tail() for p in procs)
    raise AssertionError(f"standalone cluster not ready after {READY_TIMEOUT:.0f}s ({last}):\n{tails}")


@pytest.fixture(scope="module")
def standalone() -> Iterator[Standalone]:
    """A Spark master and one worker (2 cores, 1 GiB) on 127.0.0.1, stopped after the module."""
    workdir = Path(tempfile.mkdtemp(prefix="lagd-spark-standalone-"))
    env = {
        **os.environ,
        "JAVA_HOME": find_java(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(workdir),
        "SPARK_LOG_DIR": str(workdir),
        "SPARK_NO_DAEMONIZE": "1",
    }
    port, ui, worker_port, worker_ui = (embedded.free_low_port() for _ in range(4))
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", f"http://127.0.0.1:{worker_ui}")
    procs = [
        _spark_class(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
            workdir,
            "master",
            env,
        )
    ]
    try:
        procs.append(
            _spark_class(
                "org.apache.spark.deploy.worker.Worker",
                [
                    *("--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(worker_ui)),
                    *("--cores", "2", "--memory", "1g", "--work-dir", str(workdir / "work"), cluster.url),
                ],
                workdir,
                "worker",
                env,
            )
        )
        _wait_alive(cluster, procs)
        yield cluster
    finally:
        for p in reversed(procs):
            p.stop(timeout=15)
        shutil.rmtree(workdir, ignore_errors=True)


def _config(path: Path, standalone: Standalone, database_url: str, clusters: str = "[clusters.c]") -> Path:
    """lagd.toml for a job on the standalone cluster: two executors of one core and 512 MiB."""
    config = path / "lagd.toml"
    config.write_text(
        f"""
        {clusters}
        bootstrap-servers = ["127.0.0.1:9092"]
        [storage]
        database-url = "{database_url}"
        [notify]
        enabled = false
        [log]
        format = "json"
        [jobs]
        spark-master = "{standalone.url}"
        driver-memory = "512m"
        executor-cores = 1
        executor-memory = "512m"
        jdbc-partitions = 2
        [jobs.spark-conf]
        "spark.cores.max" = "2"                  # all the worker has: two executors of one core
        "spark.driver.host" = "127.0.0.1"        # the executors reach the driver here
        "spark.driver.bindAddress" = "127.0.0.1"
        """.replace("\n        ", "\n")
    )
    return config


def test_trends_job_on_a_standalone_cluster(standalone: Standalone, history: str, tmp_path: Path) -> None:
    config = _config(tmp_path, standalone, history)
    command = [sys.executable, "-m", "lagd", "jobs", "trends", "--config", str(config)]
    result = subprocess.run(
        [*command, "--from", str(T0), "--to", str(T0 + 3600 * S)],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    # [log] format = "json": every line is one JSON object, the Spark driver JVM's included
    events = [json.loads(line) for line in result.stderr.splitlines()]
    assert "trends done" in [e["event"] for e in events]
    # T0 lies ahead of the machine's clock: no status second has passed yet, but every commit counts.
    _same(_trends(history), EXPECTED_TRENDS)
    assert query(history, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'lagd_stage_%'")[0][0] == 0

    apps = [a for a in standalone.state()["completedapps"] if a["name"] == "lagd-trends"]
    assert len(apps) == 1, standalone.state()
    app = apps[0]
    assert app["state"] == "FINISHED"
    assert app["cores"] == 2  # spark.cores.max from [jobs.spark-conf]
    assert app["memoryperexecutor"] == 512  # jobs.executor-memory, in MiB
    executors = [e for e in _json(standalone.worker_ui)["finishedexecutors"] if e["appid"] == app["id"]]
    # jobs.executor-cores = 1: the application's 2 cores came as two executors (without it, one
    # executor takes both), each of jobs.executor-memory
    assert [e["memory"] for e in executors] == [512, 512], executors


PAST_T0 = 1_764_000_000_000  # 2025-11-24T16:00Z: the hour lies before now (a future one has no buckets yet)


def test_mirror_trends_job_on_a_standalone_cluster(standalone: Standalone, database_url: str, tmp_path: Path) -> None:
    """`lagd jobs mirror-trends` as an operator runs it, on the cluster: the local tests' exact rows."""
    _insert(database_url, mirror_history(PAST_T0))
    mirror = '[mirrors.dr]\nsource = "src"\ntarget = "dst"\ntopics = "^(orders|unmirrored)$"\nrename = "prefix"\nprefix = "src."\n'
    clusters = mirror + '[clusters.dst]\nbootstrap-servers = ["127.0.0.1:9093"]\n[clusters.src]'
    config = _config(tmp_path, standalone, database_url, clusters)
    command = [sys.executable, "-m", "lagd", "jobs", "mirror-trends", "--config", str(config)]
    result = subprocess.run(
        [*command, "--from", str(PAST_T0), "--to", str(PAST_T0 + 3600 * S)],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]
    said = [e["event"] for e in events]
    assert "mirror trends done" in said
    assert any(e.startswith("mirror-trends: 2025-11-24T16:00Z .. 2025-11-24T17:00Z done (1/1): 122 rows") for e in said)
    assert_stop_and_catch_up(database_url, PAST_T0)
    apps = [a for a in standalone.state()["completedapps"] if a["name"] == "lagd-mirror-trends"]
    assert [a["state"] for a in apps] == ["FINISHED"], standalone.state()
