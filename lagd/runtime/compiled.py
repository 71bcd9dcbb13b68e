"""Whether a compiled part of lagd may run: built, from the source beside it, and not turned off.

Two kinds (hatch_build.py builds both). Hand-written C (`lagd.evaluate._trend`, `lagd.ingest._commits`,
`lagd.state._apply`) stands in for Python that answers the same, only slower: `load` gives it or None.
Typed Python compiled by Cython in pure-Python mode (`lagd.http.burrow_json`, built as
`lagd.http._burrow_json_c`) is one source run two ways: `pick` gives the compiled build of a module or
the module itself. `LAGD_NO_EXTENSIONS=1` in the environment runs the Python instead (to compare them,
or to rule the compiled code out when something looks wrong). A build of another source than the
`.c` or `.py` file beside it (left behind after the source changed: an editable install not rebuilt)
is not used.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import TypeVar, cast

M = TypeVar("M", bound=ModuleType)

NO_EXTENSIONS = "LAGD_NO_EXTENSIONS"  # set (to anything but empty): run the Python


def status(module: str, source: Path) -> str:
    """ "compiled", or why the Python runs: "turned off", "not built" or "stale"."""
    if os.environ.get(NO_EXTENSIONS):
        return "turned off"
    try:
        built = importlib.import_module(module)
    except ImportError:
        return "not built"
    built_from = getattr(built, "SOURCE_SHA1", None)  # None: built before builds carried it
    try:
        if built_from is None or (source.exists() and hashlib.sha1(source.read_bytes()).hexdigest() != built_from):
            return "stale"
    except OSError:
        return "stale"  # the source beside it cannot be read: the build cannot be told current
    return "compiled"


def load(module: str, source: Path) -> ModuleType | None:
    """The compiled module, or None where the Python runs (see `status`)."""
    if status(module, source) != "compiled":
        return None
    return importlib.import_module(module)


def compiled_name(module: str) -> str:
    """The name hatch_build.py gives a Python module compiled by Cython: pkg.name -> pkg._name_c (a
    name of its own, so that importing pkg.name always gives the Python)."""
    package, _, name = module.rpartition(".")
    return f"{package}._{name}_c" if package else f"_{name}_c"


def pick(python: M) -> M:
    """`python` compiled by Cython (`compiled_name`) where it may run (see `status`), else `python`
    itself: the same source, so the same functions by the same names."""
    built = load(compiled_name(python.__name__), Path(str(python.__file__)))
    return cast(M, built) if built is not None else python
