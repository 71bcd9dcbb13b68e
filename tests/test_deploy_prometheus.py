"""The shipped Prometheus rules and Grafana dashboard, checked by the real promtool (Debian
`prometheus`): the rules parse, their unit tests pass, every dashboard query is valid PromQL,
and every metric they name is one lagd exports (or one the recording rules make)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "lagd.json"
METRICS_SOURCE = ROOT / "lagd" / "http" / "metrics.py"

# Grafana's variables, replaced by what they stand for before promtool sees an expression.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe is not None, "promtool is not installed: run scripts/system-deps.sh (apt-get install prometheus)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=RULES)


def rule_files() -> list[Path]:
    return sorted(p for p in RULES.glob("*.yml") if not p.name.endswith(".test.yml"))


def test_rules_pass_promtool_check_rules() -> None:
    files = rule_files()
    assert [p.name for p in files] == ["lagd-alerts.yml", "lagd-recording.yml"]
    done = promtool("check", "rules", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_pass_their_promtool_unit_tests() -> None:
    done = promtool("test", "rules", "lagd-rules.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def dashboard_exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every label_values() variable query."""
    out: list[tuple[str, str]] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for p in items:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p['title']!r} target {t['refId']}", t["expr"]))
            panels(p.get("panels", []))

    panels(dash["panels"])
    for var in dash["templating"]["list"]:
        query = var.get("query")
        text = query.get("query", "") if isinstance(query, dict) else ""
        m = re.fullmatch(r"label_values\((.*),\s*\w+\)", text)
        if m:  # label_values(SELECTOR, label): the selector is PromQL
            out.append((f"variable {var['name']!r}", m.group(1)))
    return out


def concrete(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)  # $cluster, ${group}: any value


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool cannot check a bare query offline, so each becomes a recording rule of its own."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = dashboard_exprs(dash)
    assert len(exprs) >= 20
    lines = ["groups:", "  - name: lagd-dashboard-queries", "    rules:"]
    for n, (_, expr) in enumerate(exprs):
        lines += [f"      - record: dashboard:query_{n}", f"        expr: {json.dumps(concrete(expr))}"]
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text("\n".join(lines) + "\n")
    done = promtool("check", "rules", str(rules))
    where = "\n".join(f"query_{n}: {w}: {e}" for n, (w, e) in enumerate(exprs))
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{where}"
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def exported_metrics() -> set[str]:
    return set(re.findall(r'"((?:lagd|burrow)_[a-z_]+)"', METRICS_SOURCE.read_text()))


def recorded_metrics() -> set[str]:
    return {m for p in rule_files() for m in re.findall(r"record: ([a-z_:]+)", p.read_text())}


METRIC = re.compile(r"\b((?:lagd|burrow|kafka)_[a-z_]+)\b")


@pytest.mark.parametrize("source", ["lagd-alerts.yml", "lagd-recording.yml", "grafana"])
def test_every_metric_named_is_one_lagd_exports(source: str) -> None:
    text = DASHBOARD.read_text() if source == "grafana" else (RULES / source).read_text()
    exprs = re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', text) if source == "grafana" else re.findall(r"expr: (.*)", text)
    named = {m for e in exprs for m in METRIC.findall(e)}
    assert named, source
    unknown = named - exported_metrics() - recorded_metrics()
    assert not unknown, f"{source} names metrics lagd does not export: {sorted(unknown)}"


def test_the_dashboard_reads_as_on_call_needs_it() -> None:
    """No import input it never uses; status numbers shown as their names; every stat panel
    coloured by thresholds; the alerts it counts are the consumer groups', not lagd's own."""
    dash = json.loads(DASHBOARD.read_text())
    assert "__inputs" not in dash and "DS_PROMETHEUS" not in DASHBOARD.read_text()
    for panel in dash["panels"]:
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        exprs = [t["expr"] for t in panel.get("targets", [])]
        if panel["type"] == "stat":
            assert defaults.get("thresholds", {}).get("steps"), panel["title"]
        if any(e.startswith("burrow_kafka_consumer_status") for e in exprs):  # the raw status index
            names = {m["options"][k]["text"] for m in defaults.get("mappings", []) for k in m["options"]}
            assert {"OK", "WARN", "ERR", "NOTFOUND"} <= names, panel["title"]
        for e in exprs:
            if "ALERTS{" in e:
                assert "Lagd" not in e and 'alertname=~"KafkaConsumerGroup.*"' in e, (panel["title"], e)
