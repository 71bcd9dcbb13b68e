"""scripts/system-deps.sh and the README agree on exactly which Debian packages it installs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "system-deps.sh"


def test_readme_lists_exactly_what_the_script_installs() -> None:
    installs = re.findall(r"\bwant ([a-z0-9][a-z0-9.+-]+) ", SCRIPT.read_text())
    assert "mosquitto-clients" in installs and len(installs) == len(set(installs))
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("the Debian packages no wheel provides") :]
    paragraph = paragraph[: paragraph.index("package lock")]
    listed = re.findall(r"`([a-z0-9][a-z0-9.+-]+)`", paragraph)
    listed = [p for p in listed if p not in ("apt-get", "mosquitto_sub")]
    assert sorted(listed) == sorted(installs)


def test_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
