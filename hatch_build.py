"""Build hook: compile lagd's optional C code (the rules code, lagd/evaluate/_trend.c; the
offsets topic's usual record read, lagd/ingest/_commits.c, and applied, lagd/state/_apply.c; a
group's partitions as Burrow's JSON, lagd/http/_json.c)
where a C compiler is found. Without one the wheel is pure Python and lagd runs the same code in
Python, slower (README, "The two commands"); the build says so and goes on. Only the standard
library and the compiler Python itself was built with are used, so no build dependency is added.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (
    Path("lagd/evaluate/_trend.c"),
    Path("lagd/ingest/_commits.c"),
    Path("lagd/state/_apply.c"),
    Path("lagd/http/_json.c"),
)
# Exactly the floating-point operations the Python does, in its order: no fused multiply-adds,
# no reassociation (tests/test_trend_c.py compares both on random windows).
FLAGS = ["-O2", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-std=c11", "-Wall"]


def link_command() -> list[str]:
    """How to compile and link an extension here, as setuptools does: $LDSHARED; else how Python
    itself links them (sysconfig's LDSHARED: on macOS -bundle -undefined dynamic_lookup), with
    $CC in place of the compiler Python was built with when set; else cc -shared."""
    if os.environ.get("LDSHARED"):
        return shlex.split(os.environ["LDSHARED"])
    ldshared = shlex.split(str(sysconfig.get_config_var("LDSHARED") or ""))
    python_cc = shlex.split(str(sysconfig.get_config_var("CC") or ""))
    if os.environ.get("CC"):
        cc = shlex.split(os.environ["CC"])
        if ldshared and python_cc and ldshared[: len(python_cc)] == python_cc:
            return [*cc, *ldshared[len(python_cc) :]]
        return [*cc, "-shared"]
    if ldshared and shutil.which(ldshared[0]):
        return ldshared
    return ["cc", "-shared"]  # Python was built with a compiler not installed here


class CompileExtensions(BuildHookInterface):  # type: ignore[misc]
    """Compiles each extension in place (an editable install imports it from the source tree)
    and ships it in a standard wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        suffix = str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        targets = [source.with_name(source.stem + suffix) for source in SOURCES]
        for target in targets:
            (root / target).unlink(missing_ok=True)  # never leave an older build behind
        if os.environ.get("LAGD_NO_EXTENSIONS"):
            self.app.display_info("LAGD_NO_EXTENSIONS is set: building lagd without its compiled code")
            return
        link = link_command()
        if not link or shutil.which(link[0]) is None:
            self.app.display_warning(
                f"no C compiler ({link[0] if link else 'cc'}) found: lagd runs its rules code and reads records "
                "in Python, which gives the same verdicts but judges groups several times slower and catches "
                'up on a backlog slower (README, "The two commands"); for the compiled code install gcc '
                "and python3-dev (apt-get install gcc python3-dev), then reinstall lagd "
                "(pip install --no-cache-dir, so that pip does not reuse the pure-Python wheel)"
            )
            return
        built = [
            target for source, target in zip(SOURCES, targets, strict=True) if self._compile(root, link, source, target)
        ]
        if built:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["artifacts"].extend(str(target) for target in built)

    def _compile(self, root: Path, link: list[str], source: Path, target: Path) -> bool:
        """Compile one source into its extension beside it; False (and a warning) where that fails."""
        digest = hashlib.sha1(
            (root / source).read_bytes()
        ).hexdigest()  # lagd.runtime.compiled refuses another source's build
        command = [
            *link,
            # the packager's flags, then lagd's, which hold where they disagree
            *shlex.split(os.environ.get("CFLAGS", "")),
            *shlex.split(os.environ.get("LDFLAGS", "")),
            *FLAGS,
            f'-DLAGD_SOURCE_SHA1="{digest}"',
            f"-I{sysconfig.get_paths()['include']}",
            str(root / source),
            "-o",
            str(root / target),
            "-lm",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            self.app.display_warning(
                f"compiling {source} failed (lagd runs the Python it stands in for instead): "
                f"{' '.join(command)}\n{done.stderr.strip()}\n"
                "If Python's headers are missing: apt-get install python3-dev. The compiled code needs a "
                "64-bit GCC or Clang (__int128); elsewhere the Python runs."
            )
            return False
        return True
