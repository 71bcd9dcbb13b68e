"""The systemd units are valid (systemd-analyze verify) and hardened as documented."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
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
    for name in ("lagd-trends.service", "lagd-mirrors.service", "lagd-mirror-trends.service"):
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


ROOT = UNITS.parent
AS_USER = """
import os, pwd, sys
import lagd.cli, lagd.core.config, lagd.jobs.spark
user = pwd.getpwnam(sys.argv[1])
os.initgroups(user.pw_name, user.pw_gid)
os.setgid(user.pw_gid)
os.setuid(user.pw_uid)
sys.exit(lagd.cli.main(sys.argv[2:]))
"""


def _install_steps() -> list[str]:
    """The shell lines of the README's "Deployment with systemd" block, in order."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Deployment with systemd", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [ln.split("  #", 1)[0].strip() for ln in block.splitlines() if ln.strip()]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd")
def test_the_readme_install_steps_give_a_config_the_service_user_can_check() -> None:
    """The README's steps as written, as root, then the service's ExecStartPre check as the
    service's user. Kept off the machine's own /etc: the user is one of this test's own and
    /etc/lagd, /var/lib/lagd live under a private root; the venv, pip, systemctl and cp lines
    are not run (no systemd here, and lagd is installed already)."""
    steps = _install_steps()
    assert any("-g lagd" in s and "lagd.toml" in s for s in steps)  # the fix itself, as written
    user = f"lagdt{uuid.uuid4().hex[:6]}"
    base = Path(tempfile.mkdtemp(prefix="lagd-install-"))
    base.chmod(0o755)  # a real root is traversable by everyone; so is this one
    # The test's Python may live where the user cannot reach it (under /root): `runuser -u U --
    # lagd ...` becomes a Python started as root that drops to U as runuser does (its groups,
    # gid, uid) before lagd reads anything, with lagd's modules loaded beforehand.
    lagd = f"{sys.executable} -c {shlex.quote(AS_USER)} {user}"
    ran: list[str] = []
    try:
        for step in steps:
            if not step.startswith(("useradd", "install")) and "runuser" not in step:
                continue
            line = step.replace("/etc/lagd", f"{base}/etc/lagd").replace("/var/lib/lagd", f"{base}/var/lib/lagd")
            line = re.sub(r"(-[ogu] )lagd\b", rf"\g<1>{user}", line)
            line = re.sub(r" lagd$", f" {user}", line)  # useradd's last word: the user
            line = line.replace(f"runuser -u {user} -- lagd ", f"{lagd} ")
            if line.startswith("install -d"):
                (base / "etc").mkdir(exist_ok=True)
            r = subprocess.run(line, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"{step!r} ran as {line!r}: {r.stderr or r.stdout}"
            ran.append(step)
            if "runuser" in step:
                assert ": OK" in r.stdout, r.stdout
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    assert [s.split()[0] for s in ran] == ["useradd", "install", "install", "install", "(set"], ran
