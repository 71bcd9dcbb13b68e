"""The pure parts of the catch-up bench's Kafka variant: the fill's marker check reads real
Kafka keys as lagd's decoder does, the marker groups, and the summary of Burrow's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_catchup import Run, burrow_log_summary, judge_kafka
from bench.kafka_fill import OFFSETS_PARTITIONS, _commit_key, _homes, group_name
from lagd.embedded.kafka import start_kafka
from lagd.embedded.services import ServiceError
from lagd.ingest.codec import OffsetCommit, decode
from lagd.sim.encode import offsets_partition_for

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["kafka-4.4.0-offsets-records.json", "kafka-3.9.1-offsets-records.json"])
def test_commit_keys_read_as_lagds_decoder_reads_them(name: str) -> None:
    """Records Kafka itself wrote: a commit's key gives lagd's group, topic and partition; any other key None."""
    records = json.loads((DATA / name).read_text())["records"]
    commits = 0
    for rec in records:
        key = bytes.fromhex(rec["key"])
        value = bytes.fromhex(rec["value"]) if rec["value"] is not None else None
        decoded = decode(key, value)
        got = _commit_key(key)
        if isinstance(decoded, OffsetCommit):
            commits += 1
            assert got == (decoded.group, decoded.topic, decoded.partition)
        elif key[:2] not in (b"\x00\x00", b"\x00\x01"):
            assert got is None
    assert commits > 0


def test_each_offsets_partition_with_a_group_gets_its_first_group_as_marker() -> None:
    homes = _homes(2000)
    assert len(homes) == OFFSETS_PARTITIONS  # 2,000 groups reach every partition
    for partition, g in homes.items():
        assert offsets_partition_for(group_name(g), OFFSETS_PARTITIONS) == partition
        assert all(offsets_partition_for(group_name(h), OFFSETS_PARTITIONS) != partition for h in range(g))
    assert len(_homes(3)) <= 3


def test_burrows_log_is_counted_by_message_and_reason_over_its_rotated_files(tmp_path: Path) -> None:
    def line(ts: float, msg: str, **more: object) -> str:
        return json.dumps({"level": "warn", "ts": ts, "msg": msg, **more}) + "\n"

    reject = {"reason": "value version", "version": 4, "offset_topic": "__consumer_offsets"}
    (tmp_path / "burrow-2026-12-03T06-34-56.164.log").write_text(
        line(10.0, "failed to decode", offset_partition=0, offset_offset=0, **reject)
        + line(11.0, "failed to decode", offset_partition=0, offset_offset=1, **reject)
    )
    (tmp_path / "burrow.log").write_text(
        line(13.5, "failed to decode", offset_partition=1, offset_offset=0, **reject)
        + line(14.0, "unknown consumer", consumer="group-00001")
        + "not json\n"
    )
    assert burrow_log_summary(tmp_path) == [
        "3 x level=warn, msg=failed to decode, reason=value version, version=4",
        "1 x level=warn, msg=unknown consumer",
        "1 x not json",
        "its lines name 3 distinct offsets-topic records, the first to the last 3.5 s apart",
    ]
    assert burrow_log_summary(tmp_path, top=1)[1] == "... and 2 other kinds of line"
    assert burrow_log_summary(tmp_path / "none") == []


def test_client_ports_must_name_one_port_per_node() -> None:
    with pytest.raises(ServiceError, match="give one per node"):
        start_kafka(nodes=1, client_ports=[20001, 20002])


def test_the_kafka_summary_gives_lagds_medians_and_ratios_only_where_burrow_caught_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def run(name: str, seconds: float, cpu: float, rss: float, completed: bool = True) -> Run:
        return Run(name, seconds=seconds, cpu_s=cpu, peak_rss_mb=rss, completed=completed, last_note="0/2 listed")

    rounds = [
        {"lagd": run("lagd", 10, 4, 100), "burrow": run("burrow", 20, 10, 200)},
        {"lagd": run("lagd", 20, 5, 100), "burrow": run("burrow", 30, 20, 100)},
        {"lagd": run("lagd", 5, 2, 100)},
    ]
    judge_kafka(rounds, 1000, "[K]")
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "[K] lagd, median of 3 rounds: 100 records/s, 250 records per CPU-second (rounds: 100, 50, 200 records/s)"
    )
    assert out[1] == "[K] round 1: ratios lagd/Burrow: records/s 2.00x, records per CPU-second 2.50x, peak RSS 0.50x"
    assert out[2] == "[K] round 2: ratios lagd/Burrow: records/s 1.50x, records per CPU-second 4.00x, peak RSS 1.00x"
    assert (
        out[3]
        == "[K] ratios lagd/Burrow, median of 2 rounds: records/s 1.75x, records per CPU-second 3.25x, peak RSS 0.75x"
    )
    rounds[0]["burrow"] = run("burrow", 180, 10, 300, completed=False)
    judge_kafka(rounds, 1000, "[K]")
    out = capsys.readouterr().out.splitlines()
    assert "[K] round 1: burrow did not catch up (0/2 listed)" in out
    assert not any("round 1: ratios" in line for line in out)
