"""Burrow's JSON bodies as lagd writes them (lagd.http.burrow_json, the one source, compiled by Cython
where built) are exactly what json.dumps writes of the dicts (lagd.http.burrow_v3.group_status), byte
for byte, on random groups; and the source runs as plain Python without Cython installed (the
stand-in lagd.runtime.cython_shim). Run compiled and with LAGD_NO_EXTENSIONS=1 (make pytest-python).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

from lagd.http import burrow_json, burrow_v3
from tests.test_burrow_json_c import random_group

# What a fresh interpreter without Cython writes of a few random groups, run as plain Python.
WITHOUT_CYTHON = """
import sys
sys.modules["cython"] = None  # importing it raises ModuleNotFoundError, as where it is not installed
from lagd.http import burrow_json
from tests.test_burrow_json_c import random_group
import random
rnd = random.Random(5)
print(burrow_json.cython.__name__)
print(burrow_json.group_status_json(random_group(rnd), False))
"""


def test_bodies_are_what_json_dumps_writes_of_the_dicts() -> None:
    rnd = random.Random(29)
    compared = 0
    for _ in range(300):
        v = random_group(rnd)
        if any(not math.isfinite(float(p.complete)) for p in v.partitions) or not math.isfinite(v.complete):
            continue  # json.dumps writes NaN and Infinity, lagd Python's repr (nan, inf): neither is JSON
        for only_bad in (False, True):
            expected = json.dumps(burrow_v3.group_status(v, only_bad))
            assert burrow_v3.WRITER.group_status_json(v, only_bad) == expected
            assert burrow_json.group_status_json(v, only_bad) == expected
            compared += 1
    assert compared > 200


def test_the_source_runs_without_cython_installed() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_CYTHON], capture_output=True, text=True, check=True)
    shim, body = done.stdout.splitlines()
    assert shim == "lagd.runtime.cython_shim"
    assert body == burrow_v3.WRITER.group_status_json(random_group(random.Random(5)), False)
