"""The end-to-end probe (lagd.ingest.probe) on /metrics and the status page: per broker its status,
produce-ack and end-to-end latency, probes sent, failed and lost."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from lagd.evaluate.probe import BROKER_STATUSES
from lagd.ingest.probe import Probes

_FAMILIES = (
    ("lagd_probe_broker_status", "gauge", "1 for the broker's current probe status, 0 for the others"),
    ("lagd_probe_ack_seconds", "gauge", "Produce-ack latency of the newest acknowledged probe (acks=all)"),
    ("lagd_probe_end_to_end_seconds", "gauge", "Sent to read back, of the newest probe read back"),
    ("lagd_probe_sent", "gauge", "Probes sent to the broker's canary partition in the trailing window"),
    ("lagd_probe_failed", "gauge", "Of them, writes that failed or were not acknowledged within probe-timeout"),
    ("lagd_probe_lost", "gauge", "Of them, acknowledged but not read back within probe-timeout"),
)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def probe_series(out: list[str], probes: Probes) -> None:
    """Every probed broker's series (nothing while no cluster is probed)."""
    rows = [(c, b, v) for c, brokers in sorted(probes.verdicts.items()) for b, v in sorted(brokers.items())]
    if not rows:
        return
    samples: dict[str, list[str]] = {name: [] for name, _, _ in _FAMILIES}
    for cluster, broker, v in rows:
        labels = f'cluster="{_esc(cluster)}",broker="{broker}"'
        for s in BROKER_STATUSES:
            samples["lagd_probe_broker_status"].append(f'{labels},status="{s}"}} {1 if v.status == s else 0}')
        for name, value in (
            ("lagd_probe_ack_seconds", v.ack_s),
            ("lagd_probe_end_to_end_seconds", v.e2e_s),
            ("lagd_probe_sent", v.sent),
            ("lagd_probe_failed", v.failed),
            ("lagd_probe_lost", v.lost),
        ):
            if value is not None:
                samples[name].append(f"{labels}}} {value}")
    for name, kind, help_text in _FAMILIES:
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        out.extend(f"{name}{{{line}\n" for line in samples[name])


def render_probes(probes: Probes, badge: Callable[[str], str]) -> str:
    """The status page's table of probed brokers (empty while no cluster is probed)."""
    if not probes.verdicts and not probes.problems:
        return ""
    rows = []
    for cluster, brokers in sorted(probes.verdicts.items()):
        for broker, v in sorted(brokers.items()):
            ack = "-" if v.ack_s is None else f"{v.ack_s:.3f}"
            e2e = "-" if v.e2e_s is None else f"{v.e2e_s:.3f}"
            rows.append(
                f'<tr class="probe is-{v.status.lower()}"><td>{escape(cluster)}</td><td class=n>{broker}</td>'
                f"<td>{badge(v.status)}</td>"
                f"<td>{escape(v.reason)}</td><td class=n>{ack}</td><td class=n>{e2e}</td>"
                f"<td class=n>{v.sent}</td><td class=n>{v.failed}</td><td class=n>{v.lost}</td></tr>"
            )
    problems = "".join(
        f'<p class="warn">probe of {escape(c)}: {escape(p)}</p>' for c, p in sorted(probes.problems.items())
    )
    return (
        "<h2>brokers (end-to-end probe)</h2>" + problems + "<table><tr><th>cluster</th><th>broker</th>"
        "<th>status</th><th>why</th><th>ack (s)</th><th>end-to-end (s)</th><th>sent</th><th>failed</th>"
        "<th>lost</th></tr>" + "".join(rows) + "</table>"
    )
