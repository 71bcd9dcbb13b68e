"""`make demo` installs what lagd needs to run the demo, not the developer tools nor PySpark;
`make test` installs everything."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV_TOOLS = {"pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "schemathesis", "ruff", "mypy"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_demo_installs_no_developer_tools_and_no_spark() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    demo = _names(project["dependencies"]) | _names(extras["demo"])
    assert not demo & DEV_TOOLS and "pyspark" not in demo
    assert "pyspark" in _names(extras["jobs"])
    assert _names(extras["dev"]) >= DEV_TOOLS and "lagd[demo,jobs]" in extras["dev"]
    makefile = (ROOT / "Makefile").read_text()
    run_stamp = makefile[makefile.index("$(RUN_STAMP): ") :].split("\n\n")[0]
    assert "-e '.[demo]'" in run_stamp and "--quiet" not in run_stamp
    assert re.search(r"^demo: \$\(RUN_STAMP\)$", makefile, re.M)
    assert re.search(r"^pytest: venv", makefile, re.M) and "-e '.[dev]'" in makefile
