"""What the tests of lagd's compiled code share: whether this machine can build it, and what a
fresh process with LAGD_NO_EXTENSIONS=1 binds (lagd.runtime.compiled)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from array import array
from pathlib import Path
from typing import Any

from lagd.core.model import PartitionStatus
from lagd.evaluate import PartitionVerdict
from lagd.state.windows import NO_LAG


def can_compile() -> bool:
    """Is there what hatch_build.py needs: a compiler (hatch_build.link_command's, in its order)
    and Python's headers? Where there is, the build must have compiled every extension: otherwise
    the compiled-code tests would pass on the Python alone and say nothing about the C."""
    ldshared = str(sysconfig.get_config_var("LDSHARED") or "")
    if not (ldshared and shutil.which(shlex.split(ldshared)[0])):
        ldshared = "cc"
    link = os.environ.get("LDSHARED") or os.environ.get("CC") or ldshared
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(shlex.split(link)[0]) is not None and headers.exists()


REINSTALL = "reinstall lagd (.venv/bin/pip install --no-deps -e .) and read the build's warning"


def printed_without_extensions(code: str) -> str:
    """What `code` prints in a fresh interpreter with LAGD_NO_EXTENSIONS=1 (stripped)."""
    env = {**os.environ, "LAGD_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def verdict(**changes: Any) -> PartitionVerdict:
    """A lagging partition's verdict with a full window of two entries, `changes` applied: what
    the compiled writers and readers of verdicts (lagd.http.burrow_json compiled, _trend.c's snapshot) are fed."""
    fields: dict[str, Any] = dict(
        topic="orders",
        partition=3,
        status=PartitionStatus.WARN,
        entries=array("q", [10, 1, 1000, 1001, 5, 20, 2, 2000, 2001, NO_LAG]),
        current_lag=7,
        complete=1.0,
        owner="host-1",
        client_id="client-1",
        lag_seconds=1.5,
        lag_seconds_estimated=False,
        why="",
        since=None,
    )
    fields.update(changes)
    return PartitionVerdict(**fields)
