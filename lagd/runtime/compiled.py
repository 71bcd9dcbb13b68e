"""Whether a compiled part of lagd may run: built, from the source beside it, and not turned off.

Each compiled module (`lagd.evaluate._trend`, `lagd.ingest._commits`, `lagd.state._apply`,
`lagd.http._json`) stands in for Python that answers the same, only slower. `LAGD_NO_EXTENSIONS=1`
in the environment runs the Python instead (to compare them, or to rule the compiled code out
when something looks wrong). A build of
another source than the `.c` file beside it (left behind after the source changed: an editable
install not rebuilt) is not used.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from types import ModuleType

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
