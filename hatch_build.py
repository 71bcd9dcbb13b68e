"""Build hook: compile lagd's optional compiled code where a C compiler is found. Two kinds:

- Hand-written C (SOURCES: the rules code, lagd/evaluate/_trend.c; the offsets topic's usual record
  read, lagd/ingest/_commits.c; the store's binary COPY encoders, lagd/state/_apply.c), each standing
  in for Python that answers the same.
- Typed Python compiled by Cython in pure-Python mode (CYTHON_SOURCES: a group's status as Burrow's
  JSON, lagd/http/burrow_json.py; the usual commit applied and changed windows drained,
  lagd/state/apply.py, with its augmenting declarations lagd/state/apply.pxd). The `.py` is the one source: it runs as it is, and where Cython
  (a build dependency, pyproject.toml) and a C compiler are here, `pkg/name.py` is also compiled
  into the extension module `pkg._name_c` beside it. lagd.runtime.compiled.pick chooses the compiled
  one unless LAGD_NO_EXTENSIONS=1 is set or it was built from another source (stale). To compile
  another module: write it as burrow_json.py is (`import cython` with lagd.runtime.cython_shim as
  the fallback, `cython.*` annotations), add it here, and import it through compiled.pick.

Without a compiler, or without Cython (a build without build isolation), the wheel holds the Python
alone and lagd runs it, slower (README, "The two commands"); the build says so and goes on.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (
    Path("lagd/evaluate/_trend.c"),
    Path("lagd/ingest/_commits.c"),
    Path("lagd/state/_apply.c"),
)
# Compiled by Cython (pure-Python mode) into `pkg._name_c` (lagd.runtime.compiled.compiled_name).
CYTHON_SOURCES = (Path("lagd/http/burrow_json.py"), Path("lagd/state/apply.py"))
# Builds of sources that are gone (lagd/http/_json.c, 2026-12-03: now burrow_json.py), removed from
# an editable install's tree so that nothing stale is left beside the sources.
RETIRED = (Path("lagd/http/_json"),)
# Exactly the floating-point operations the Python does, in its order: no fused multiply-adds,
# no reassociation (tests/test_trend_c.py compares both on random windows).
FLAGS = ["-O2", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-std=c11", "-Wall"]


def cython_target(source: Path, suffix: str) -> Path:
    """Where `pkg/name.py` compiled goes: `pkg/_name_c<suffix>` (lagd.runtime.compiled.compiled_name)."""
    return source.with_name(f"_{source.stem}_c{suffix}")


def cython_module(source: Path) -> str:
    """The compiled module's dotted name: lagd/http/burrow_json.py -> lagd.http._burrow_json_c."""
    return ".".join((*source.parent.parts, f"_{source.stem}_c"))


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
        cython_targets = [cython_target(source, suffix) for source in CYTHON_SOURCES]
        for target in [*targets, *cython_targets, *(retired.with_name(retired.name + suffix) for retired in RETIRED)]:
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
        built += [
            target
            for source, target in zip(CYTHON_SOURCES, cython_targets, strict=True)
            if self._cythonize(root, link, source, target)
        ]
        if built:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["artifacts"].extend(str(target) for target in built)

    def _cythonize(self, root: Path, link: list[str], source: Path, target: Path) -> bool:
        """Compile one typed Python module with Cython, then its C like the hand-written C; False
        (and a warning) where Cython is missing or fails: the Python runs then."""
        try:
            import Cython  # type: ignore[import-untyped]  # noqa: F401  (only whether it is here)
        except ImportError:
            self.app.display_warning(
                f"Cython is not installed in the build's environment: {source} runs as Python, the same "
                "JSON about twice as slowly (a build without isolation needs it: pip install 'cython>=3.1', "
                "then reinstall lagd with pip install --no-cache-dir)"
            )
            return False
        digest = hashlib.sha1((root / source).read_bytes()).hexdigest()
        with tempfile.TemporaryDirectory(prefix="lagd-cython-") as tmp:
            # What Cython compiles is the source with one line more, at the end: the SHA-1 of the
            # source it was built from (lagd.runtime.compiled refuses another source's build, as for
            # the C). At the source's own relative path, so a traceback through the compiled code
            # names the source's file and lines.
            copy = Path(tmp) / source
            copy.parent.mkdir(parents=True)
            copy.write_text(
                f'{(root / source).read_text(encoding="utf-8")}\nSOURCE_SHA1 = "{digest}"\n', encoding="utf-8"
            )
            declarations = (root / source).with_suffix(".pxd")  # an augmenting .pxd, where one is beside it
            if declarations.exists():
                # Cython finds it by the module's dotted name, inside packages (an __init__.py each)
                copy.with_name(f"{cython_module(source).rpartition('.')[2]}.pxd").write_bytes(declarations.read_bytes())
                for package in copy.relative_to(tmp).parents:
                    if package.parts:
                        (Path(tmp) / package / "__init__.py").touch()
            generated = copy.with_suffix(".c")
            command = [
                *(sys.executable, "-m", "cython", "-3", "--module-name", cython_module(source)),
                *(str(source), "-o", str(generated)),
            ]
            done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.app.display_warning(
                    f"Cython failed on {source} (lagd runs it as Python instead): {' '.join(command)}\n"
                    f"{done.stdout.strip()}\n{done.stderr.strip()}"
                )
                return False
            return self._compile(root, link, generated, target, digest)

    def _compile(self, root: Path, link: list[str], source: Path, target: Path, digest: str | None = None) -> bool:
        """Compile one C source into its extension beside it; False (and a warning) where that fails."""
        if digest is None:  # lagd.runtime.compiled refuses another source's build
            digest = hashlib.sha1((root / source).read_bytes()).hexdigest()
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
