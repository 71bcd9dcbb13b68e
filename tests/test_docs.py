"""README.md and docs/ hold together: every link and every pointer from the code base lands on a
file and a heading that exist, every docs file is reachable from the README, the README's key
table names real settings, and docs/hostile-input.md lists exactly the reasons lagd counts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from lagd.ingest import validate

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Where code, settings and deployment files point readers at the README or docs/.
POINTING = ["lagd", "tests", "bench", "config", "deploy", "systemd", "scripts", "Makefile", "hatch_build.py", ".ci"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # a '#' in a code block is no heading
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)]


def _pointing_files() -> list[Path]:
    files: list[Path] = []
    for name in POINTING:
        p = ROOT / name
        files.extend([p] if p.is_file() else [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts])
    return [f for f in files if f.suffix not in (".json", ".pyc", ".so") and f != Path(__file__)]


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_lands_on_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and anchor not in {_slug(h) for h in _headings(dest)}:
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, broken


def test_every_docs_file_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", README.read_text()))
    assert linked == {d.name for d in DOCS}


def test_pointers_in_the_code_base_name_docs_and_sections_that_exist() -> None:
    """`docs/X.md` must exist; `docs/X.md: Section` or `docs/X.md, Section` must name one of its
    headings; `README: "Section"` or `README, "Section"` must begin one of the README's."""
    readme_heads = _headings(README)
    bad, seen = [], 0
    for f in _pointing_files():
        text = f.read_text(errors="replace")
        text = re.sub(r"\s*\n\s*#?\s*", " ", text)  # pointers wrapped over comment or string lines
        text = text.replace('" "', "")  # Python's adjacent string literals, joined
        for m in re.finditer(r"docs/([\w-]+\.md)(?:[:,] \"?([A-Z][^\")\];.]*))?", text):
            seen += 1
            doc = ROOT / "docs" / m.group(1)
            if not doc.exists():
                bad.append(f"{f.relative_to(ROOT)}: {m.group(0)} (no such file)")
            elif m.group(2) and m.group(2).strip() not in _headings(doc):
                bad.append(f"{f.relative_to(ROOT)}: {m.group(0)} (no such heading in {m.group(1)})")
        for m in re.finditer(r"README[:,] \"([^\"]+)\"", text):
            seen += 1
            if not any(h.startswith(m.group(1)) for h in readme_heads):
                bad.append(f"{f.relative_to(ROOT)}: {m.group(0)} (no such README heading)")
    assert seen >= 5 and not bad, bad  # seen: the pointers known today are found at all


def _table_first_column(text: str, header: str) -> list[str]:
    """The backticked names in the first column of the table whose header row starts `header`."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    names: list[str] = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        names.extend(re.findall(r"`([^`]+)`", ln.split("|")[1]))
    return names


def test_hostile_input_lists_exactly_the_reasons_lagd_counts() -> None:
    text = (ROOT / "docs" / "hostile-input.md").read_text()
    rejected = _table_first_column(text, "| reason | the record |")
    assert sorted(rejected) == sorted(validate.REASONS)
    decode_errors = _table_first_column(text, "| reason | what was counted |")
    assert sorted(decode_errors) == sorted((*validate.DECODE_REASONS, *validate.DECODE_ERRORS_ONLY))
    # and the code counts no decode error the lists do not hold, and every one they hold apart
    counted = {
        m
        for f in (ROOT / "lagd" / "ingest").glob("*.py")
        for m in re.findall(r"count_error\(\"(\w+)\"\)", f.read_text())
    }
    assert counted <= set(decode_errors) and set(validate.DECODE_ERRORS_ONLY) <= counted


def test_the_readme_key_table_names_settings_of_the_example_config() -> None:
    example = tomllib.loads((ROOT / "config" / "lagd.example.toml").read_text())
    keys = _table_first_column(README.read_text(), "| key | default |")
    assert len(keys) >= 15
    missing, section = [], ""
    for key in keys:
        if "." in key:
            *path, leaf = key.replace("clusters.NAME", "clusters.local").split(".")
            section = ".".join(path)
        else:
            leaf = key  # `groups-deny` after `clusters.NAME.groups-allow`: the same section
        node = example
        for part in section.split("."):
            node = node[part]
        if leaf not in node:
            missing.append(key)
    assert not missing, missing
