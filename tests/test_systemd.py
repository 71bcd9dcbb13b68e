"""The systemd units are valid (systemd-analyze verify) and hardened as documented."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "systemd"
LAGD_BIN = Path(sys.executable).parent / "lagd"


def _units() -> list[Path]:
    return sorted(p for p in UNITS.iterdir() if p.suffix in (".service", ".timer"))


def _parse(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_every_service_is_hardened() -> None:
    services = [p for p in _units() if p.suffix == ".service"]
    assert any(p.name == "lagd.service" for p in services)
    for path in services:
        svc = _parse(path)["Service"]
        for key, value in {
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "PrivateTmp": "yes",
            "ProtectHome": "yes",
            "User": "lagd",
        }.items():
            assert svc.get(key) == value, f"{path.name}: {key} should be {value}"


def test_lagd_service_is_a_notify_service_with_watchdog() -> None:
    svc = _parse(UNITS / "lagd.service")["Service"]
    assert svc["Type"] == "notify"
    assert svc["Restart"] == "on-failure"
    assert svc["WatchdogSec"].rstrip("s").isdigit()
    assert svc["EnvironmentFile"].lstrip("-").startswith("/etc/lagd/")


def test_job_units_leave_the_spark_address_to_lagd_and_the_environment_file() -> None:
    # SPARK_LOCAL_IP=127.0.0.1 in a unit kept a cluster's executors from reaching the driver;
    # lagd pins a local master's driver to loopback itself (tests/test_jobs_settings.py).
    for name in ("lagd-trends.service", "lagd-mirrors.service"):
        svc = _parse(UNITS / name)["Service"]
        assert "SPARK_LOCAL_IP" not in svc.get("Environment", ""), name
        assert svc["EnvironmentFile"] == "-/etc/lagd/lagd.env", name  # where an operator sets it


def test_timers_name_existing_services() -> None:
    for timer in (p for p in _units() if p.suffix == ".timer"):
        unit = _parse(timer)["Timer"].get("Unit", timer.stem + ".service")
        assert (UNITS / unit).exists(), f"{timer.name} starts {unit}, which is not in systemd/"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed on this machine")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # The units name /usr/bin/lagd; point them at this checkout's lagd so verify can check the command.
    assert LAGD_BIN.exists()
    for path in _units():
        (tmp_path / path.name).write_text(path.read_text().replace("/usr/bin/lagd", str(LAGD_BIN)))
    result = subprocess.run(
        ["systemd-analyze", "verify", *[str(tmp_path / p.name) for p in _units()]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours = [line for line in (result.stdout + result.stderr).splitlines() if any(p.name in line for p in _units())]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr
