"""The `lagd` command line: --version, check-config's two spellings, and file problems named as such."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lagd import __version__

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "lagd.example.toml"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lagd", *args], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )


def test_version_flag() -> None:
    for flag in ("--version", "-V"):
        r = run_cli(flag)
        assert r.returncode == 0 and r.stdout.strip() == f"lagd {__version__}", r


def test_check_config_takes_the_file_either_way() -> None:
    for args in (
        ("check-config", str(EXAMPLE)),
        ("check-config", "--config", str(EXAMPLE)),
        ("check-config", "-c", str(EXAMPLE)),
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and r.stdout.startswith(f"{EXAMPLE}: OK"), (args, r.stderr)


def test_check_config_and_run_refuse_two_different_files(tmp_path: Path) -> None:
    for command in ("check-config", "run"):
        r = run_cli(command, str(EXAMPLE), "--config", str(tmp_path / "other.toml"))
        assert r.returncode == 2 and f"lagd: {command} got two files" in r.stderr and "pass one" in r.stderr


def test_a_bad_path_is_a_file_problem_not_a_config_key(tmp_path: Path) -> None:
    absent = tmp_path / "absent.toml"
    for args in (
        ("check-config", str(absent)),
        ("check-config", "--config", str(absent)),
        ("run", "--config", str(absent)),
        ("run", str(absent)),  # `lagd run FILE` as well as `--config FILE` (the quick-start trial typed it so)
    ):
        r = run_cli(*args)
        line = r.stderr.strip()
        assert r.returncode == 2 and len(line.splitlines()) == 1, (args, r.stderr)
        assert (
            line
            == f"lagd: cannot read {absent}: No such file or directory; pass the path of a TOML settings file (see config/lagd.example.toml)"
        )
    r = run_cli("check-config", str(tmp_path))
    assert r.returncode == 2 and f"cannot read {tmp_path}: Is a directory" in r.stderr and "config key" not in r.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("[clusters.a\n")
    r = run_cli("check-config", str(broken))
    assert (
        r.returncode == 2 and r.stderr.startswith(f"lagd: {broken} is not valid TOML") and "config key" not in r.stderr
    )


def test_the_daemons_libraries_are_loaded_frozen_so_no_collection_traverses_them() -> None:
    """`lagd run` loads the daemon with the collector off, then freezes what loading made: the
    young generation it leaves is empty (else the first young collection traverses a few hundred
    thousand objects, a 50 ms pause before the first record) and the collector is on again."""
    script = (
        "import gc\n"
        "from lagd.cli import load_daemon\n"
        "run = load_daemon()\n"
        "print(gc.isenabled(), gc.get_count()[0], gc.get_freeze_count(), run.__module__)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    enabled, young, frozen, module = r.stdout.split()
    assert (enabled, module) == ("True", "lagd.daemon")
    assert int(young) < 1_000
    assert int(frozen) > 100_000
