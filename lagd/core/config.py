"""Settings: one TOML file plus `LAGD_*` environment overrides, validated up front.

Every key has a default that serves most users except a cluster's `bootstrap-servers`.
A bad file raises `ConfigError` naming the key, the value and what was expected; the CLI
turns that into one line on stderr and exit status 2, so nothing starts half-configured.

Environment overrides: `LAGD_<SECTION>_<KEY>` (dashes become underscores, upper case), e.g.
`LAGD_STORAGE_DATABASE_URL`, `LAGD_NOTIFY_PASSWORD`; for a cluster or mirror,
`LAGD_CLUSTERS_<NAME>_<KEY>`, e.g. `LAGD_CLUSTERS_PROD_SASL_PASSWORD`. Lists are
comma-separated. An override may also create a cluster that the file does not name.
"""

from __future__ import annotations

import dataclasses
import difflib
import hmac
import os
import re
import tomllib
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from lagd.core.ruleset import rule_set
from lagd.evaluate.native import NO_EXTENSIONS


class ConfigError(ValueError):
    """A configuration problem; `str()` is one line naming the key and what to do."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"config key '{key}': {reason}")
        self.key = key
        self.reason = reason


class ConfigFileError(ConfigError):
    """The settings file as a whole cannot be used (unreadable, not TOML): `str()` names the file."""

    def __init__(self, path: str, message: str) -> None:
        ValueError.__init__(self, message)
        self.key = path
        self.reason = message


MASK = "***"


class Secret:
    """A secret setting (password, token, database URL) that never shows itself.

    Deliberately not a `str`: str(), repr(), f-strings, %-formatting and structlog all see
    the mask, json.dumps refuses it, and string operations fail loudly instead of leaking.
    The value is only reachable through `reveal()`, at the one place that hands it to a
    client library. Truthiness tells whether it is set.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str = "") -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret takes a str, not {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The real value: pass it straight to the library that needs it, never to a log."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __str__(self) -> str:
        return MASK if self._value else ""

    def __repr__(self) -> str:
        return f"Secret({str(self)!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Secret is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


def _key(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class ClusterSettings:
    """One Kafka cluster lagd watches."""

    name: str = ""
    bootstrap_servers: list[str] = field(default_factory=list)
    client_id: str = "lagd"
    # "topic" streams __consumer_offsets; "admin" polls committed offsets (OffsetFetch);
    # "auto" streams the topic where lagd can read it and polls where it cannot (lagd.ingest.source).
    offsets_source: Literal["auto", "topic", "admin"] = "auto"
    offsets_topic: str = "__consumer_offsets"
    offset_refresh: float = 10.0
    topic_refresh: float = 60.0
    # Log-start offsets (ListOffsets EARLIEST, batched like the log ends) are asked every this
    # many seconds (at least every offset-refresh round), and the topics' cleanup.policy every
    # topic-refresh; they feed the records-lost and at-risk verdicts (lagd.evaluate.retention).
    log_start_refresh: float = 30.0
    # Where lag in seconds is only a bound (a committed offset older than every kept log-end
    # sample), the log-end sampler reads the first unconsumed record's timestamp, at most this
    # many partitions per round (lagd.ingest.record_ts); 0 turns it off.
    record_timestamp_fetches: int = 50
    # WARN "at risk" when a consumer falls off the log within this many seconds at current rates.
    retention_horizon: float = 4 * 3600.0
    groups_allow: str = ".*"
    groups_deny: str = r"^(console-consumer-|python-kafka-consumer-|quick-).*"
    topics_deny: str = r"^__.*"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str = ""
    sasl_password: Secret = Secret("")
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_key_password: Secret = Secret("")
    tls_check_hostname: bool = True
    request_timeout: float = 30.0
    # Edge checks of offsets-topic records (lagd.ingest.validate): what fails is counted and skipped.
    max_group_name: int = 1024  # bytes (UTF-8); Postgres cannot index much longer names
    max_commit_age: float = 0.0  # seconds; 0 = storage.expire-group (an older group is forgotten anyway)
    max_commit_ahead: float = 86_400.0  # seconds a commit time may lie ahead of lagd's clock
    # The end-to-end probe (lagd.ingest.probe, opt-in): a canary topic with one partition pinned to
    # each broker, produced to and consumed from every probe-interval; a probe not acknowledged
    # (or not read back) within probe-timeout counts as failed (lost).
    probe: bool = False
    probe_topic: str = "__lagd_probe"
    probe_interval: float = 10.0
    probe_timeout: float = 5.0
    probe_slow_after: float = 1.0  # seconds of produce-ack or end-to-end latency that make a broker SLOW


@dataclass(frozen=True)
class StorageSettings:
    """Postgres and the sliding windows kept in it."""

    database_url: Secret = Secret("postgresql+asyncpg://lagd@127.0.0.1:5432/lagd")
    intervals: int = 10
    min_distance: float = 0.0
    expire_group: float = 7 * 24 * 3600.0
    history_retention_days: int = 14
    flush_interval: float = 1.0
    flush_max_changes: int = 20_000
    buffer_max_changes: int = 2_000_000
    lag_samples: int = 360


@dataclass(frozen=True)
class EvaluatorSettings:
    """How partitions are judged: lagd's rules (default) or Burrow's exactly."""

    rules: Literal["lagd", "burrow"] = "lagd"
    allowed_lag: int = 0
    allowed_lag_seconds: float = 5.0
    minimum_complete: float = 0.0
    cache_ttl: float = 5.0
    # lagd rules only: how much evidence a verdict needs and how long silence may last
    window_step: float = 15.0
    min_history: float = 60.0
    stop_after: float = 60.0
    # STOP limit per group from its history of pauses (lagd.state.pauses): its longest pause of
    # the last pause-memory seconds times pause-margin, within [stop-after, pause-ceiling]; with
    # no pause yet pause-default, until watched pause-learn seconds without one (then stop-after).
    pause_ceiling: float = 0.0  # 0: twice stop-after (120 s)
    pause_default: float = 0.0  # 0: pause-ceiling
    pause_margin: float = 1.5
    pause_memory: float = 7 * 24 * 3600.0
    pause_learn: float = 3600.0
    pause_min: float = 20.0  # a shorter group silence is not a pause


@dataclass(frozen=True)
class HttpSettings:
    """The status endpoint."""

    listen: str = "127.0.0.1:8000"
    auth_token: Secret = Secret("")
    auth_reads: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""
    cors_origin: str = ""
    # /metrics' per-partition series: "partition" always, "group" never, "auto" while the state
    # holds at most metrics-partition-limit group-partitions (4 series each: past 100,000 a scrape
    # is over 400,000 series and 45 MB, and at a million 4M series, 440 MB, longer to serve than
    # Prometheus' default 10 s scrape timeout)
    metrics_detail: Literal["auto", "partition", "group"] = "auto"
    metrics_partition_limit: int = 100_000
    # Bounds against slow or hostile clients (aiohttp's own defaults wait an hour).
    idle_timeout: float = 15.0  # seconds without a complete request head: idle keep-alive or slow headers
    request_timeout: float = 30.0  # seconds to read a request's body and answer it
    max_request_bytes: int = 65_536  # largest request body
    status_cache_bytes: int = 64 * 1024 * 1024  # Burrow status bodies kept for evaluator.cache-ttl


@dataclass(frozen=True)
class NotifySettings:
    """Incidents, and their delivery over MQTT (one sink among others, switched by `mqtt_enabled`)."""

    # Incidents at all: the engine, the outbox, MQTT and every [sinks.*]. False turns them all off.
    enabled: bool = True
    # MQTT alone: false keeps incidents and the [sinks.*] going without a broker.
    mqtt_enabled: bool = True
    mqtt_url: str = "mqtt://127.0.0.1:1883"
    username: str = ""
    password: Secret = Secret("")
    tls_ca_file: str = ""
    topic_prefix: str = "lagd"
    client_id: str = "lagd"
    severity: Literal["WARN", "ERR"] = "WARN"
    correlation_window: float = 120.0
    # A group bad on a partition a failing broker led joins the broker's incident this long after
    # its last join (a group that stopped with the broker is STOP only after its silence limit).
    cause_window: float = 300.0
    hold_time: float = 300.0
    update_interval: float = 30.0
    publish_interval: float = 1.0
    # Linked from Slack and PagerDuty messages; empty: http://<http.listen>/ (0.0.0.0 shown as 127.0.0.1)
    status_page_url: str = ""


SinkKind = Literal["webhook", "slack", "pagerduty", "alertmanager"]
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


@dataclass(frozen=True)
class SinkSettings:
    """One notification sink beside MQTT: incidents delivered over HTTP from its own outbox position."""

    name: str = ""
    kind: SinkKind = "webhook"
    # webhook: the receiver (a $field template); slack: the incoming-webhook URL;
    # pagerduty: the Events API v2 endpoint; alertmanager: the base URL (http://host:9093)
    url: str = ""
    headers: list[str] = field(default_factory=list)  # "Name: value" lines added to every request
    hmac_secret: Secret = Secret("")  # webhook: signs the body (HMAC-SHA256) when set
    signature_header: str = "X-Lagd-Signature"  # webhook: carries "sha256=<hex of the HMAC>"
    body_template: str = ""  # webhook: $field template of the body; empty: the event's JSON
    routing_key: Secret = Secret("")  # pagerduty: the integration's routing key
    timeout: float = 10.0  # seconds per request
    retry_initial: float = 1.0  # seconds before the first retry; doubles, with jitter
    retry_max: float = 300.0  # longest wait between retries
    dead_letter_after: float = 3600.0  # seconds an event is retried before it goes to dead_letters
    alert_ttl: float = 300.0  # alertmanager: endsAt this far ahead; re-posted every third of it


@dataclass(frozen=True)
class MirrorSettings:
    """A replication flow to watch: topics of `source` copied to `target`."""

    name: str = ""
    source: str = ""
    target: str = ""
    topics: str = ".*"
    # "identity" keeps names; "prefix" prepends `prefix` (MirrorMaker 2: "<alias>.").
    rename: Literal["identity", "prefix"] = "identity"
    prefix: str = ""
    allowed_loss: float = 0.001
    window: float = 600.0
    # MirrorMaker 2: the source cluster's alias, whose `<alias>.heartbeats` and
    # `<alias>.checkpoints.internal` lagd reads on the target (lagd.ingest.mirror_flows); empty:
    # the prefix without its dot when rename = "prefix", else none is read.
    mm2_alias: str = ""
    # The target's alias in mm2.properties, naming the offset-syncs topic MM2 keeps on the source
    # (`mm2-offset-syncs.<alias>.internal`); empty: the one such topic the source has.
    mm2_target_alias: str = ""
    # A flow whose newest replicated heartbeat is older than this is STALLED; above lag-after
    # throughout the trailing half of `window`, LAGGING (MM2 emits one a second by default).
    heartbeat_stall_after: float = 30.0
    heartbeat_lag_after: float = 10.0
    # A source topic the mirror's `topics` covers that has been seen this long without its copy on
    # the target makes the flow INCOMPLETE. MM2 finds new topics every refresh.topics.interval.seconds
    # (600 s by default), so the default leaves it that and more.
    topic_missing_after: float = 900.0

    def covers(self, cluster: str, topic: str) -> bool:
        """A topic of `cluster` this mirror copies: on its source, matched by `topics` (a search, as
        lagd's other name regexes: anchor it with ^...$ for whole names), and not itself a copy made
        on the same cluster (`rename = "prefix"` with source = target)."""
        if cluster != self.source or re.search(self.topics, topic) is None:
            return False
        return not (self.rename == "prefix" and self.source == self.target and topic.startswith(self.prefix))

    def target_topic(self, topic: str) -> str:
        """The name a source topic has on the target: the same, or with the MirrorMaker 2 prefix."""
        return self.prefix + topic if self.rename == "prefix" else topic


@dataclass(frozen=True)
class JobsSettings:
    """PySpark jobs."""

    spark_master: str = "local[2]"
    java_home: str = ""
    jdbc_jar: str = "/usr/share/java/postgresql.jar"
    jdbc_partitions: int = 8
    trends_overlap: float = 300.0
    driver_memory: str = "2g"
    # Per executor on a cluster master (local[N] runs everything in the driver): 0 and "" keep Spark's defaults.
    executor_cores: int = 0
    executor_memory: str = ""
    # Any other Spark property ("spark.x.y" = "value"), applied after lagd's own (lagd.jobs.spark).
    spark_conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ScaleSettings:
    """Workers that share each cluster's offsets topic through Kafka's group protocol (lagd.scale).

    With the defaults one `lagd run` is one process that reads every offsets partition.
    """

    # The consumer group the workers of every cluster join; empty: "lagd" when workers > 1,
    # else no group at all (this instance reads every offsets partition on its own).
    group_id: str = ""
    workers: int = 1  # worker processes this `lagd run` starts; worker i listens on http.listen's port + i
    session_timeout: float = 10.0  # seconds without a heartbeat before a worker's partitions move
    # The host other instances reach this one's HTTP on; empty: the listen host (0.0.0.0 and :: as this host's name)
    advertise_host: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.group_id) or self.workers > 1

    @property
    def group(self) -> str:
        return self.group_id or "lagd"


@dataclass(frozen=True)
class LogSettings:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


@dataclass(frozen=True)
class Settings:
    clusters: dict[str, ClusterSettings] = field(default_factory=dict)
    storage: StorageSettings = field(default_factory=StorageSettings)
    evaluator: EvaluatorSettings = field(default_factory=EvaluatorSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    mirrors: dict[str, MirrorSettings] = field(default_factory=dict)
    sinks: dict[str, SinkSettings] = field(default_factory=dict)
    jobs: JobsSettings = field(default_factory=JobsSettings)
    log: LogSettings = field(default_factory=LogSettings)
    scale: ScaleSettings = field(default_factory=ScaleSettings)


_SECTIONS: dict[str, type] = {
    "storage": StorageSettings,
    "evaluator": EvaluatorSettings,
    "http": HttpSettings,
    "notify": NotifySettings,
    "jobs": JobsSettings,
    "log": LogSettings,
    "scale": ScaleSettings,
}
_NAMED: dict[str, type] = {"clusters": ClusterSettings, "mirrors": MirrorSettings, "sinks": SinkSettings}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _convert(key: str, value: Any, tp: Any) -> Any:
    """Check `value` against the field type `tp`; raise ConfigError naming `key`."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(key, f"got {value!r}, expected one of {', '.join(map(repr, choices))}")
        return value
    if tp is Secret:
        if not isinstance(value, str):
            raise ConfigError(key, f"got {type(value).__name__}, expected a string")
        return Secret(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"got {value!r}, expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"got {value!r}, expected an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"got {value!r}, expected a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"got {value!r}, expected a string")
        return value
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(key, f"got {value!r}, expected a list of strings")
        return list(value)
    if origin is dict:
        return _property_table(key, value)
    raise AssertionError(f"unsupported settings type {tp!r}")  # pragma: no cover


def _property_table(key: str, value: Any, prefix: str = "") -> dict[str, str]:
    """A table of "dotted.name" = value as strings; unquoted dotted names (nested tables) are joined."""
    if not isinstance(value, dict):
        raise ConfigError(key, f'got {value!r}, expected a table such as [{key}] with "spark.x.y" = "value" lines')
    out: dict[str, str] = {}
    for name, v in value.items():
        full = f"{prefix}{name}"
        if isinstance(v, dict):
            out.update(_property_table(key, v, full + "."))
        elif isinstance(v, bool):
            out[full] = "true" if v else "false"
        elif isinstance(v, str | int | float):
            out[full] = str(v)
        else:
            raise ConfigError(f'{key}."{full}"', f'got {v!r}, expected a string such as "4" or "true"')
    return out


# Keys lagd once took, with why they went and what to do instead (a bare "unknown key" would puzzle).
_REMOVED_KEYS: dict[tuple[type, str], str] = {
    (MirrorSettings, "mm1-group"): "mirror verdicts come from both clusters' log-end offsets, whatever "
    "replicates; a MirrorMaker 1 group is judged as every consumer group of the source cluster "
    "(/v3/kafka/SOURCE/consumer/GROUP): delete the key",
}


def _closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key an unknown one was likely meant to be: spelt alike but for dashes and
    underscores, else the closest spelling; None when none is close."""
    plain = key.replace("-", "").replace("_", "")
    close = [n for n in known if n.replace("-", "") == plain] or difflib.get_close_matches(key, list(known), 1, 0.8)
    return close[0] if close else None


def _unknown_hint(cls: type, key: str, known: Iterable[str]) -> str:
    """What an unknown key was likely meant to be: a known key spelt alike, or the same key of
    another section ("; did you mean ...?"), else ""."""
    close = _closest_key(key, known)
    if close is not None:
        return f"; did you mean '{close}'?"
    sections = {**_SECTIONS, **{f"{section}.NAME": other for section, other in _NAMED.items()}}
    elsewhere = [
        f"[{section}]"
        for section, other in sections.items()
        if other is not cls and any(_key(f.name) == key for f in dataclasses.fields(other) if f.name != "name")
    ]
    return f"; '{key}' is a setting of {' and '.join(elsewhere)}" if elsewhere else ""


def _build(cls: type, raw: Mapping[str, Any], where: str, extra: Mapping[str, Any] | None = None) -> Any:
    hints = typing.get_type_hints(cls)
    known = {_key(f.name): f for f in dataclasses.fields(cls) if f.name != "name"}
    kwargs: dict[str, Any] = dict(extra or {})
    for k, v in raw.items():
        full = f"{where}.{k}"
        f = known.get(k)
        if (cls, k) in _REMOVED_KEYS:
            raise ConfigError(full, f"no longer a setting: {_REMOVED_KEYS[(cls, k)]}")
        if f is None:
            raise ConfigError(
                full, f"unknown key{_unknown_hint(cls, k, known)} (see config/lagd.example.toml for every key)"
            )
        kwargs[f.name] = _convert(full, v, hints[f.name])
    return cls(**kwargs)


# host, host:port, [IPv6] or [IPv6]:port (the host may be empty: callers decide).
_NETLOC = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\s\[\]/@]*)(?::(?P<port>.*))?$")


def _masked(url: str) -> str:
    """`url` with any user-info replaced by the mask (safe to echo in an error)."""
    return re.sub(r"^([^/]*//)[^/@]*@", rf"\1{MASK}@", url)


def _port(key: str, shown: str, port: str, expected: str, lowest: int = 1) -> None:
    if not port.isdigit() or not lowest <= int(port) <= 65535:
        raise ConfigError(
            key, f"got {shown!r}: port {port!r} is not a number from {lowest} to 65535; expected {expected}"
        )


def _host_port(key: str, value: str, expected: str, *, lowest_port: int = 1, any_host: bool = False) -> None:
    """host:port or [IPv6]:port, the port from `lowest_port` to 65535; "" as host only if `any_host`."""
    m = _NETLOC.match(value)
    if m is None or m["port"] is None or not (m["host"] or any_host):
        raise ConfigError(key, f"got {value!r}, expected {expected}")
    _port(key, value, m["port"], expected, lowest_port)


def _url(key: str, value: str, schemes: tuple[str, ...], expected: str, userinfo_hint: str) -> None:
    """scheme://host[:port] with a known scheme, a host, a port in range and nothing else."""
    shown = _masked(value)
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        raise ConfigError(key, f"got {shown!r}, expected {expected}") from None
    if "@" in parts.netloc:
        raise ConfigError(key, f"got {shown!r}: credentials do not go in the URL; {userinfo_hint}")
    if parts.scheme not in schemes:
        raise ConfigError(
            key, f"got {shown!r}: scheme {parts.scheme!r} is not {' or '.join(schemes)}; expected {expected}"
        )
    m = _NETLOC.match(parts.netloc)
    if m is None or not m["host"] or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(key, f"got {shown!r}, expected {expected}")
    if m["port"] is not None:
        _port(key, shown, m["port"], expected)


def _database_url(key: str, url: str) -> None:
    """The Postgres URL's scheme and port. Never echoes any part of it: it may hold a password."""
    expected = "expected postgresql://user@host:5432/database (or postgresql+asyncpg://)"
    if not url.startswith(("postgresql://", "postgresql+asyncpg://", "postgres://")):
        raise ConfigError(key, f"not a Postgres URL; {expected}")
    try:
        netloc = urlsplit(url).netloc.rpartition("@")[2]
    except ValueError:
        raise ConfigError(key, f"not a valid URL; {expected}") from None
    if "," in netloc:  # several hosts: the driver parses them
        return
    m = _NETLOC.match(netloc)
    if m is None:
        raise ConfigError(key, f"the host part is not host or host:port; {expected}")
    port = m["port"]
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ConfigError(key, f"the port is not a number from 1 to 65535; {expected}")


def _readable_file(key: str, path: str, what: str) -> None:
    """A file named by a setting exists and this process can read it (checked before start)."""
    if not path:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(
            key,
            f"got {path!r}: cannot read it ({exc.strerror}); expected a readable {what} (check the path and its permissions)",
        ) from None


def _validate(s: Settings) -> None:
    def positive(key: str, v: float) -> None:
        if v <= 0:
            raise ConfigError(key, f"got {v!r}, expected a number greater than 0")

    if not s.clusters:
        raise ConfigError("clusters", "missing: define at least one [clusters.NAME] with bootstrap-servers")
    for name, c in s.clusters.items():
        where = f"clusters.{name}"
        if not c.bootstrap_servers:
            raise ConfigError(f"{where}.bootstrap-servers", 'missing: give a list like ["kafka1:9092"]')
        for server in c.bootstrap_servers:
            _host_port(f"{where}.bootstrap-servers", server, "host:port such as kafka1:9092 or [::1]:9092")
        positive(f"{where}.offset-refresh", c.offset_refresh)
        positive(f"{where}.topic-refresh", c.topic_refresh)
        positive(f"{where}.log-start-refresh", c.log_start_refresh)
        positive(f"{where}.retention-horizon", c.retention_horizon)
        if not 0 <= c.record_timestamp_fetches <= 100_000:
            raise ConfigError(
                f"{where}.record-timestamp-fetches",
                f"got {c.record_timestamp_fetches}, expected 0 (off) to 100000 record reads per round",
            )
        positive(f"{where}.request-timeout", c.request_timeout)
        if not 1 <= c.max_group_name <= 2048:
            raise ConfigError(
                f"{where}.max-group-name", f"got {c.max_group_name}, expected 1 to 2048 bytes (Postgres' index limit)"
            )
        if c.max_commit_age < 0:
            raise ConfigError(f"{where}.max-commit-age", f"got {c.max_commit_age}, expected 0 (= expire-group) or more")
        positive(f"{where}.max-commit-ahead", c.max_commit_ahead)
        _validate_probe(where, c)
        for key in ("groups_allow", "groups_deny", "topics_deny"):
            try:
                re.compile(getattr(c, key))
            except re.error as exc:
                raise ConfigError(f"{where}.{_key(key)}", f"not a valid regular expression: {exc}") from None
        if c.security_protocol.startswith("SASL") and not c.sasl_username:
            raise ConfigError(f"{where}.sasl-username", "missing: required when security-protocol is SASL_*")
        if bool(c.tls_cert_file) != bool(c.tls_key_file):
            raise ConfigError(
                f"{where}.tls-key-file", "tls-cert-file and tls-key-file go together: set both or neither"
            )
        _readable_file(f"{where}.tls-ca-file", c.tls_ca_file, "PEM CA bundle")
        _readable_file(f"{where}.tls-cert-file", c.tls_cert_file, "PEM client certificate")
        _readable_file(f"{where}.tls-key-file", c.tls_key_file, "PEM private key")
    st = s.storage
    _database_url("storage.database-url", st.database_url.reveal())
    if not 1 <= st.intervals <= 100:
        raise ConfigError("storage.intervals", f"got {st.intervals}, expected 1 to 100")
    if st.min_distance < 0:
        raise ConfigError("storage.min-distance", f"got {st.min_distance}, expected 0 or more seconds")
    positive("storage.expire-group", st.expire_group)
    positive("storage.flush-interval", st.flush_interval)
    positive("storage.flush-max-changes", st.flush_max_changes)
    positive("storage.buffer-max-changes", st.buffer_max_changes)
    positive("storage.history-retention-days", st.history_retention_days)
    positive("storage.lag-samples", st.lag_samples)
    if s.evaluator.allowed_lag < 0:
        raise ConfigError("evaluator.allowed-lag", f"got {s.evaluator.allowed_lag}, expected 0 or more")
    if not 0.0 <= s.evaluator.minimum_complete <= 1.0:
        raise ConfigError("evaluator.minimum-complete", f"got {s.evaluator.minimum_complete}, expected 0.0 to 1.0")
    if s.evaluator.allowed_lag_seconds < 0:
        raise ConfigError("evaluator.allowed-lag-seconds", f"got {s.evaluator.allowed_lag_seconds}, expected 0 or more")
    rules = rule_set(s.evaluator.rules)
    if st.intervals < rules.min_intervals:
        raise ConfigError(
            "storage.intervals",
            f'got {st.intervals}, expected {rules.min_intervals} or more with evaluator.rules = "{rules.name}" '
            "(the falling-behind trend needs that many commits to be significant)",
        )
    _validate_scale(s)
    for key in (
        "window_step",
        "min_history",
        "stop_after",
        "pause_ceiling",
        "pause_default",
        "pause_memory",
        "pause_learn",
    ):
        if getattr(s.evaluator, key) < 0:
            raise ConfigError(f"evaluator.{_key(key)}", f"got {getattr(s.evaluator, key)}, expected 0 or more seconds")
    if s.evaluator.pause_min < 10:
        raise ConfigError("evaluator.pause-min", f"got {s.evaluator.pause_min}, expected 10 or more seconds")
    if s.evaluator.pause_margin < 1:
        raise ConfigError("evaluator.pause-margin", f"got {s.evaluator.pause_margin}, expected 1.0 or more")
    # An empty host listens on every interface; port 0 picks a free port.
    _host_port("http.listen", s.http.listen, "host:port such as 127.0.0.1:8000", lowest_port=0, any_host=True)
    if bool(s.http.tls_cert_file) != bool(s.http.tls_key_file):
        raise ConfigError("http.tls-key-file", "tls-cert-file and tls-key-file go together: set both or neither")
    _readable_file("http.tls-cert-file", s.http.tls_cert_file, "PEM certificate")
    _readable_file("http.tls-key-file", s.http.tls_key_file, "PEM private key")
    positive("http.idle-timeout", s.http.idle_timeout)
    positive("http.request-timeout", s.http.request_timeout)
    positive("http.max-request-bytes", s.http.max_request_bytes)
    if s.http.metrics_partition_limit < 0:
        raise ConfigError(
            "http.metrics-partition-limit",
            f"got {s.http.metrics_partition_limit}, expected 0 or more group-partitions "
            '(or set metrics-detail = "partition" to keep every partition\'s series)',
        )
    if s.http.status_cache_bytes < 0:
        raise ConfigError("http.status-cache-bytes", f"got {s.http.status_cache_bytes}, expected 0 (no cache) or more")
    if s.http.auth_reads and not s.http.auth_token:
        raise ConfigError("http.auth-token", "missing: required when auth-reads is true")
    _url(
        "notify.mqtt-url",
        s.notify.mqtt_url,
        ("mqtt", "mqtts"),
        "mqtt://host:port or mqtts://host:port",
        "set notify.username and notify.password (LAGD_NOTIFY_PASSWORD) and give mqtt://host:port",
    )
    _readable_file("notify.tls-ca-file", s.notify.tls_ca_file, "PEM CA bundle")
    if not s.notify.topic_prefix or "#" in s.notify.topic_prefix or "+" in s.notify.topic_prefix:
        raise ConfigError("notify.topic-prefix", "expected a non-empty MQTT topic without wildcards")
    for key in ("correlation_window", "cause_window", "hold_time", "update_interval", "publish_interval"):
        positive(f"notify.{_key(key)}", getattr(s.notify, key))
    if s.notify.status_page_url:
        _http_url("notify.status-page-url", s.notify.status_page_url)
    if not s.notify.mqtt_enabled:
        _refuse_mqtt_keys(s.notify)
    if s.sinks and not s.notify.enabled:
        raise ConfigError(
            "notify.enabled",
            f"false turns incidents off, so the sinks {', '.join(sorted(s.sinks))} would never send: "
            "to run without an MQTT broker set notify.mqtt-enabled = false instead and remove enabled = false "
            "(incidents and the sinks stay on); to send nothing, remove the [sinks.*] tables",
        )
    if s.sinks and not s.notify.status_page_url and not public_listen(s.http.listen):
        raise ConfigError(
            "notify.status-page-url",
            f"missing: the sinks {', '.join(sorted(s.sinks))} link every alert to lagd's status page, and "
            f"http.listen {s.http.listen!r} is no address on-call can open; set it to the URL people reach "
            'lagd at, such as status-page-url = "https://lagd.example.com/"',
        )
    for name, sink in s.sinks.items():
        _validate_sink(f"sinks.{name}", sink)
    for name, m in s.mirrors.items():
        where = f"mirrors.{name}"
        for role in ("source", "target"):
            if getattr(m, role) not in s.clusters:
                raise ConfigError(
                    f"{where}.{role}", f"got {getattr(m, role)!r}, expected the name of a configured cluster"
                )
        if m.rename == "prefix" and not m.prefix:
            raise ConfigError(f"{where}.prefix", 'missing: required when rename = "prefix" (MirrorMaker 2: "<alias>.")')
        if not 0.0 <= m.allowed_loss < 1.0:
            raise ConfigError(f"{where}.allowed-loss", f"got {m.allowed_loss}, expected 0.0 to below 1.0")
        positive(f"{where}.window", m.window)
        positive(f"{where}.heartbeat-stall-after", m.heartbeat_stall_after)
        positive(f"{where}.heartbeat-lag-after", m.heartbeat_lag_after)
        positive(f"{where}.topic-missing-after", m.topic_missing_after)
        if m.heartbeat_lag_after >= m.heartbeat_stall_after:
            raise ConfigError(
                f"{where}.heartbeat-lag-after",
                f"got {m.heartbeat_lag_after}, expected less than heartbeat-stall-after ({m.heartbeat_stall_after}): "
                "a flow is LAGGING before it is STALLED",
            )
        if m.mm2_alias and not re.fullmatch(r"[A-Za-z0-9._-]+", m.mm2_alias):
            raise ConfigError(
                f"{where}.mm2-alias", f"got {m.mm2_alias!r}, expected a cluster alias as in mm2.properties"
            )
        try:
            re.compile(m.topics)
        except re.error as exc:
            raise ConfigError(f"{where}.topics", f"not a valid regular expression: {exc}") from None
    _validate_jobs(s.jobs)


def _validate_probe(where: str, c: ClusterSettings) -> None:
    for key in ("probe_interval", "probe_timeout", "probe_slow_after"):
        if getattr(c, key) <= 0:
            raise ConfigError(f"{where}.{_key(key)}", f"got {getattr(c, key)!r}, expected a number of seconds above 0")
    if c.probe_timeout > c.probe_interval:
        raise ConfigError(
            f"{where}.probe-timeout",
            f"got {c.probe_timeout}, expected at most probe-interval ({c.probe_interval}): a probe is judged before "
            "the next one goes, so a broker that stops is named within two intervals; raise probe-interval instead",
        )
    if c.probe_slow_after >= c.probe_timeout:
        raise ConfigError(
            f"{where}.probe-slow-after",
            f"got {c.probe_slow_after}, expected less than probe-timeout ({c.probe_timeout}): a broker is SLOW "
            "before its probes count as failed",
        )
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", c.probe_topic) or c.probe_topic in (".", ".."):
        raise ConfigError(
            f"{where}.probe-topic",
            f"got {c.probe_topic!r}, expected a Kafka topic name (letters, digits, '.', '_', '-'; up to 249) "
            'that nothing else writes to, such as "__lagd_probe"',
        )


_JVM_MEMORY = re.compile(r"[1-9][0-9]*([kmgtp]b?)?", re.IGNORECASE)
# Spark properties that have a setting of their own (or are the job's to set): spark-conf refuses them.
_OWN_PROPERTIES = {
    "spark.master": "set jobs.spark-master (or pass --master) instead",
    "spark.app.name": "each job names itself (lagd-trends, lagd-mirrors): remove it",
    "spark.driver.memory": "set jobs.driver-memory instead",
    "spark.executor.cores": "set jobs.executor-cores instead",
    "spark.executor.memory": "set jobs.executor-memory instead",
}


def _validate_scale(s: Settings) -> None:
    sc = s.scale
    if not 1 <= sc.workers <= 64:
        raise ConfigError("scale.workers", f"got {sc.workers}, expected 1 to 64 (more than the cores rarely helps)")
    if sc.session_timeout < 6 or sc.session_timeout > 300:
        raise ConfigError(
            "scale.session-timeout",
            f"got {sc.session_timeout}, expected 6 to 300 seconds (the brokers' group.min/max.session.timeout.ms)",
        )
    if sc.advertise_host and any(ch in sc.advertise_host for ch in "/ :") and not sc.advertise_host.startswith("["):
        raise ConfigError("scale.advertise-host", f"got {sc.advertise_host!r}, expected a host name or address only")
    if not sc.enabled:
        return
    for name, c in s.clusters.items():
        if c.offsets_source == "admin":
            raise ConfigError(
                f"clusters.{name}.offsets-source",
                "workers share the offsets topic (scale.group-id / scale.workers): set offsets-source = 'topic', "
                "or run one lagd without [scale] where the topic cannot be read",
            )
    if sc.workers > 1 and s.http.listen.rsplit(":", 1)[-1] == "0":
        raise ConfigError("http.listen", "with scale.workers > 1 give a port: worker i listens on that port + i")


def _validate_jobs(j: JobsSettings) -> None:
    if j.jdbc_partitions <= 0:
        raise ConfigError("jobs.jdbc-partitions", f"got {j.jdbc_partitions!r}, expected a number greater than 0")
    if not _JVM_MEMORY.fullmatch(j.driver_memory):
        raise ConfigError(
            "jobs.driver-memory", f"got {j.driver_memory!r}, expected a JVM memory size such as 2g or 512m"
        )
    if j.executor_cores < 0:
        raise ConfigError(
            "jobs.executor-cores",
            f"got {j.executor_cores}, expected cores per executor such as 2, or 0 for Spark's default",
        )
    if j.executor_memory and not _JVM_MEMORY.fullmatch(j.executor_memory):
        raise ConfigError(
            "jobs.executor-memory",
            f'got {j.executor_memory!r}, expected a JVM memory size such as 4g or 512m, or "" for Spark\'s default',
        )
    for name in j.spark_conf:
        key = f'jobs.spark-conf."{name}"'
        if name in _OWN_PROPERTIES:
            raise ConfigError(key, f"lagd sets this property itself: {_OWN_PROPERTIES[name]}")
        if not re.fullmatch(r"spark\.[A-Za-z0-9_.\-]+", name):
            raise ConfigError(
                key,
                "not a Spark property: names start with 'spark.' and hold letters, digits, '.', '_' and '-' "
                '(write them quoted: "spark.executor.instances" = "4")',
            )


def public_listen(listen: str) -> bool:
    """Whether http.listen names an address others can open (not loopback, not every interface),
    so that the status page's URL can be derived from it."""
    host = listen.rpartition(":")[0].strip("[]").lower()
    return bool(host) and host not in ("0.0.0.0", "::", "localhost", "::1") and not host.startswith("127.")


def _http_url(key: str, value: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(key, f"got {_masked(value)!r}, expected an http:// or https:// URL")


# [notify] keys that only the MQTT publisher reads.
_MQTT_KEYS = ("mqtt_url", "username", "password", "tls_ca_file", "topic_prefix", "client_id")


def _given(value: Any, default: Any) -> bool:
    """Whether a setting was given a value of its own (a secret: any value at all)."""
    return bool(value) if isinstance(value, Secret) else bool(value != default)


def _refuse_mqtt_keys(notify: NotifySettings) -> None:
    """With MQTT off, an MQTT key given a value of its own could never take effect: refused."""
    defaults = NotifySettings()
    for key in _MQTT_KEYS:
        if _given(getattr(notify, key), getattr(defaults, key)):
            raise ConfigError(
                f"notify.{_key(key)}",
                "MQTT is off (notify.mqtt-enabled = false), so it never takes effect: "
                "remove it, or turn MQTT on with mqtt-enabled = true",
            )


# Sink keys that only one kind of sink reads: set on another kind they could never take effect.
_SINK_KEYS_OF_KIND = {
    "hmac_secret": "webhook",
    "signature_header": "webhook",
    "body_template": "webhook",
    "routing_key": "pagerduty",
    "alert_ttl": "alertmanager",
}


def _validate_sink(where: str, sink: SinkSettings) -> None:
    defaults = SinkSettings()
    for key, kind in _SINK_KEYS_OF_KIND.items():
        if sink.kind != kind and _given(getattr(sink, key), getattr(defaults, key)):
            raise ConfigError(
                f"{where}.{_key(key)}",
                f'only a {kind} sink uses it and this one is a {sink.kind} sink: remove it (or set kind = "{kind}")',
            )
    if sink.kind != "pagerduty" and not sink.url:
        raise ConfigError(f"{where}.url", f"missing: a {sink.kind} sink needs the receiver's http(s):// URL")
    if sink.url:
        _http_url(f"{where}.url", sink.url if sink.kind != "webhook" else sink.url.split("$", 1)[0] or "http://x")
    if sink.kind == "pagerduty" and not sink.routing_key:
        raise ConfigError(
            f"{where}.routing-key",
            f"missing: set the PagerDuty integration's routing key (prefer LAGD_SINKS_{where.split('.', 1)[1].upper().replace('-', '_')}_ROUTING_KEY)",
        )
    for line in sink.headers:
        name, sep, _ = line.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name.strip()):
            raise ConfigError(f"{where}.headers", f'got {line!r}, expected "Name: value" lines')
    if not re.fullmatch(r"[A-Za-z0-9-]+", sink.signature_header):
        raise ConfigError(f"{where}.signature-header", f"got {sink.signature_header!r}, expected an HTTP header name")
    for key in ("timeout", "retry_initial", "retry_max", "dead_letter_after", "alert_ttl"):
        if getattr(sink, key) <= 0:
            raise ConfigError(f"{where}.{_key(key)}", f"got {getattr(sink, key)!r}, expected a number greater than 0")
    if sink.retry_max < sink.retry_initial:
        raise ConfigError(
            f"{where}.retry-max", f"got {sink.retry_max}, expected at least retry-initial ({sink.retry_initial})"
        )


# LAGD_* variables that are not settings: the settings file's path, the switch that runs the
# Python rules code where the compiled one is built (lagd.evaluate.native), and the workers'
# join barrier their supervisor sets (lagd.scale.barrier).
_NOT_SETTINGS = ("LAGD_CONFIG", NO_EXTENSIONS, "LAGD_JOIN_BARRIER")
# Variables that were read outside the settings once: now ordinary keys under a new name.
_RENAMED_ENV = {"LAGD_SPARK_DRIVER_MEMORY": "LAGD_JOBS_DRIVER_MEMORY (jobs.driver-memory)"}


def _env_overrides(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    """Fold LAGD_* variables into the raw TOML tree (in place)."""
    for var, text in sorted(env.items()):
        if not var.startswith("LAGD_") or var in _NOT_SETTINGS:
            continue
        if var in _RENAMED_ENV:
            raise ConfigError(var, f"renamed: set {_RENAMED_ENV[var]} instead and unset {var}")
        rest = var[len("LAGD_") :].lower()
        placed = False
        for section, cls in _SECTIONS.items():
            if rest.startswith(section + "_"):
                key = _key(rest[len(section) + 1 :])
                raw.setdefault(section, {})[key] = _parse_env(f"{section}.{key}", text, cls, key, var)
                placed = True
                break
        if placed:
            continue
        for section, cls in _NAMED.items():
            if not rest.startswith(section + "_"):
                continue
            tail = rest[len(section) + 1 :]
            keys = sorted((_key(f.name) for f in dataclasses.fields(cls) if f.name != "name"), key=len, reverse=True)
            for key in keys:
                suffix = "_" + key.replace("-", "_")
                if tail.endswith(suffix) and len(tail) > len(suffix):
                    lname = tail[: -len(suffix)]
                    table = raw.setdefault(section, {})
                    name = next((n for n in table if n.lower().replace("-", "_") == lname), lname)
                    table.setdefault(name, {})[key] = _parse_env(f"{section}.{name}.{key}", text, cls, key, var)
                    placed = True
                    break
            break
        if not placed:
            raise ConfigError(
                var, "unknown environment override: expected LAGD_<SECTION>_<KEY>, e.g. LAGD_STORAGE_DATABASE_URL"
            )


def _unknown_env_hint(cls: type, key: str, var: str) -> str:
    """The variable an unknown one was likely meant to be, named as a variable and as a key
    ("; did you mean LAGD_STORAGE_INTERVALS (storage.intervals)?"), else ""."""
    where, _, tomlkey = key.rpartition(".")
    close = _closest_key(tomlkey, [_key(f.name) for f in dataclasses.fields(cls) if f.name != "name"])
    if close is None:
        return f"; unset it (config/lagd.example.toml lists the keys of [{key.partition('.')[0]}])"
    prefix = var[: len(var) - len(tomlkey)]
    return f"; did you mean {prefix}{close.upper().replace('-', '_')} ({where}.{close})?"


def _parse_env(key: str, text: str, cls: type, tomlkey: str, var: str) -> Any:
    hints = typing.get_type_hints(cls)
    fname = tomlkey.replace("-", "_")
    if fname not in hints:
        raise ConfigError(key, f"unknown key, set by the environment variable {var}{_unknown_env_hint(cls, key, var)}")
    tp = hints[fname]
    if tp is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(key, f"got {text!r} from the environment, expected true or false")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(key, f"got {text!r} from the environment, expected an integer") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(key, f"got {text!r} from the environment, expected a number") from None
    if typing.get_origin(tp) is list:
        return [p.strip() for p in text.split(",") if p.strip()]
    if typing.get_origin(tp) is dict:
        raise ConfigError(
            key, f"cannot be set from the environment: put the properties in a [{key}] table of the settings file"
        )
    return text


def parse(raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Settings:
    """Validate a raw TOML tree (plus environment overrides) into Settings."""
    tree: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    _env_overrides(tree, env if env is not None else {})
    kwargs: dict[str, Any] = {}
    for section, value in tree.items():
        if section in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(section, "expected a table, e.g. [" + section + "]")
            kwargs[section] = _build(_SECTIONS[section], value, section)
        elif section in _NAMED:
            if not isinstance(value, dict):
                raise ConfigError(section, f"expected tables like [{section}.NAME]")
            named = {}
            for name, body in value.items():
                if not _NAME_RE.match(name):
                    raise ConfigError(f"{section}.{name}", "names use letters, digits, '.', '_' and '-'")
                if not isinstance(body, dict):
                    raise ConfigError(f"{section}.{name}", f"expected a table [{section}.{name}]")
                named[name] = _build(_NAMED[section], body, f"{section}.{name}", {"name": name})
            kwargs[section] = named
        else:
            raise ConfigError(section, f"unknown section; expected one of {', '.join([*_SECTIONS, *_NAMED])}")
    settings = Settings(**kwargs)
    _validate(settings)
    for name, c in settings.clusters.items():
        if c.max_commit_age == 0:
            settings.clusters[name] = dataclasses.replace(c, max_commit_age=settings.storage.expire_group)
    return settings


def load(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate a TOML file; environment overrides default to os.environ."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigFileError(
            str(p), f"cannot read {p}: {why}; pass the path of a TOML settings file (see config/lagd.example.toml)"
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(
            str(p), f"{p} is not valid TOML: {exc}; fix the file (see config/lagd.example.toml)"
        ) from None
    return parse(raw, os.environ if env is None else env)


def public_view(obj: Any) -> Any:
    """A JSON-friendly view of settings with every secret masked (for logs and the API)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {_key(f.name): public_view(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Secret):
        return str(obj)  # the mask, or "" when unset
    if isinstance(obj, dict):
        return {k: public_view(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [public_view(v) for v in obj]
    return obj


CONNECT_TIMEOUT_S = 5  # a database that accepts connections but never answers fails an attempt this fast


def sync_database_url(url: Secret | str) -> str:
    """The same database URL for a synchronous driver (Alembic, psycopg2).

    Adds libpq's `connect_timeout` unless the URL sets one, so a hung server fails the
    attempt (which is retried) instead of blocking a thread forever.
    """
    text = url.reveal() if isinstance(url, Secret) else url
    text = re.sub(r"^postgres(ql)?(\+asyncpg)?://", "postgresql+psycopg2://", text)
    if not re.search(r"[?&]connect_timeout=", text):
        text += ("&" if "?" in text else "?") + f"connect_timeout={CONNECT_TIMEOUT_S}"
    return text


def async_database_url(url: Secret | str) -> str:
    """The database URL for SQLAlchemy's asyncpg driver."""
    text = url.reveal() if isinstance(url, Secret) else url
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+asyncpg://", text)
