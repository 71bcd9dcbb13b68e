"""Settings: the example file is valid; every kind of mistake exits 2 naming the key."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lagd.core.config import ConfigError, Secret, load, parse, public_view, sync_database_url

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "lagd.example.toml"
MINIMAL = {"clusters": {"prod": {"bootstrap-servers": ["k1:9092"]}}}


def test_example_config_is_valid_and_documents_every_default() -> None:
    s = load(EXAMPLE, env={})
    assert s.clusters["local"].bootstrap_servers == ["127.0.0.1:9092"]
    assert s.storage.intervals == 10
    # Every key of every section appears in the example, so the example documents them all.
    text = EXAMPLE.read_text()
    view = public_view(s)
    for section in ("storage", "evaluator", "http", "notify", "jobs", "log"):
        for key in view[section]:
            # a table of properties ([jobs.spark-conf]) is documented as a table of its own
            assert f"\n{key} =" in text or f"\n[{section}.{key}]" in text, (
                f"{section}.{key} is not documented in the example"
            )
    for key in view["clusters"]["local"]:
        if key != "name":
            assert f"\n{key} =" in text, f"clusters.*.{key} is not documented in the example"


def test_minimal_config_gets_defaults() -> None:
    s = parse(MINIMAL, env={})
    c = s.clusters["prod"]
    assert c.name == "prod" and c.offsets_source == "auto" and c.offset_refresh == 10.0
    assert s.evaluator.allowed_lag == 0 and s.storage.expire_group == 7 * 24 * 3600


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({**MINIMAL, "storage": {"intervalz": 3}}, "storage.intervalz"),
        ({**MINIMAL, "storage": {"intervals": "ten"}}, "storage.intervals"),
        ({**MINIMAL, "storage": {"intervals": 0}}, "storage.intervals"),
        ({**MINIMAL, "evaluator": {"minimum-complete": 2.0}}, "evaluator.minimum-complete"),
        ({**MINIMAL, "notify": {"enabled": "yes"}}, "notify.enabled"),
        ({"clusters": {"prod": {"client-id": "x"}}}, "clusters.prod.bootstrap-servers"),
        ({"clusters": {"prod": {"bootstrap-servers": ["nohost"]}}}, "clusters.prod.bootstrap-servers"),
        ({"clusters": {"prod": {"bootstrap-servers": ["a:1"], "groups-deny": "("}}}, "clusters.prod.groups-deny"),
        ({"clusters": {"p": {"bootstrap-servers": ["a:1"], "offsets-source": "zk"}}}, "clusters.p.offsets-source"),
        ({"storage": {}}, "clusters"),
        ({**MINIMAL, "bogus": {}}, "bogus"),
        ({**MINIMAL, "mirrors": {"m": {"source": "prod", "target": "nope"}}}, "mirrors.m.target"),
        ({**MINIMAL, "http": {"auth-reads": True}}, "http.auth-token"),
    ],
)
def test_bad_config_names_the_key(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(raw, env={})
    assert info.value.key == key
    assert f"'{key}'" in str(info.value)


def test_environment_overrides_every_kind_of_key() -> None:
    env = {
        "LAGD_STORAGE_DATABASE_URL": "postgresql://u:pw@db/lagd",
        "LAGD_STORAGE_INTERVALS": "12",
        "LAGD_CLUSTERS_PROD_SASL_PASSWORD": "hunter2",
        "LAGD_CLUSTERS_PROD_BOOTSTRAP_SERVERS": "a:1, b:2",
        "LAGD_HTTP_AUTH_READS": "false",
        "LAGD_CLUSTERS_NEW_ONE_BOOTSTRAP_SERVERS": "c:3",
    }
    s = parse(MINIMAL, env=env)
    assert s.storage.intervals == 12
    assert s.storage.database_url.reveal() == "postgresql://u:pw@db/lagd"
    assert s.clusters["prod"].bootstrap_servers == ["a:1", "b:2"]
    assert s.clusters["prod"].sasl_password.reveal() == "hunter2"
    assert s.clusters["new_one"].bootstrap_servers == ["c:3"]


def test_the_switch_to_the_python_rules_code_is_not_a_setting() -> None:
    """LAGD_NO_EXTENSIONS (lagd.evaluate.native) is read by the rules code, not the settings:
    `lagd run` with it set starts, where it once refused it as an unknown override."""
    assert parse(MINIMAL, env={"LAGD_NO_EXTENSIONS": "1", "LAGD_CONFIG": "x.toml"}) == parse(MINIMAL, env={})


def test_bad_environment_override_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={"LAGD_STORAGE_INTERVALS": "many"})
    assert info.value.key == "storage.intervals"
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={"LAGD_NOPE_X": "1"})
    assert info.value.key == "LAGD_NOPE_X"


@pytest.mark.parametrize(
    ("var", "message"),
    [
        (
            "LAGD_STORAGE_INTERVAL",
            "unknown key, set by the environment variable LAGD_STORAGE_INTERVAL; "
            "did you mean LAGD_STORAGE_INTERVALS (storage.intervals)?",
        ),
        (
            "LAGD_STORAGE_DATABSE_URL",
            "unknown key, set by the environment variable LAGD_STORAGE_DATABSE_URL; "
            "did you mean LAGD_STORAGE_DATABASE_URL (storage.database-url)?",
        ),
        (
            "LAGD_HTTP_FOO",
            "unknown key, set by the environment variable LAGD_HTTP_FOO; "
            "unset it (config/lagd.example.toml lists the keys of [http])",
        ),
    ],
)
def test_an_unknown_environment_override_names_its_variable_and_the_one_meant(var: str, message: str) -> None:
    """A typo in a variable gets the same help as one in the file: the variable to fix, and the
    variable (and key) it was likely meant to be."""
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={var: "5"})
    assert str(info.value).endswith(message), str(info.value)


@pytest.mark.parametrize(
    ("raw", "key", "hint"),
    [
        ({"storage": {"flush_interval": 1.0}}, "storage.flush_interval", "did you mean 'flush-interval'?"),
        (
            {"clusters": {"a": {"bootstrap-server": ["h:1"]}}},
            "clusters.a.bootstrap-server",
            "did you mean 'bootstrap-servers'?",
        ),
        ({"evaluator": {"intervals": 10}}, "evaluator.intervals", "'intervals' is a setting of [storage]"),
        (
            {"storage": {"client-id": "x"}},
            "storage.client-id",
            "'client-id' is a setting of [notify] and [clusters.NAME]",
        ),
        ({"storage": {"nothing-like-it": 1}}, "storage.nothing-like-it", "unknown key (see"),
    ],
)
def test_an_unknown_key_says_what_was_likely_meant(raw: dict[str, Any], key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, **raw} if "clusters" not in raw else raw, env={})
    assert info.value.key == key
    assert hint in str(info.value)


def test_secrets_never_show() -> None:
    s = parse({**MINIMAL, "notify": {"password": "s3cret"}}, env={"LAGD_CLUSTERS_PROD_SASL_PASSWORD": "hunter2"})
    text = repr(s) + str(public_view(s))
    assert "s3cret" not in text and "hunter2" not in text
    assert str(Secret("x")) == "***" and Secret("x").reveal() == "x"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lagd", *args], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )


def test_check_config_cli_exit_codes(tmp_path: Path) -> None:
    ok = run_cli("check-config", str(EXAMPLE))
    assert ok.returncode == 0, ok.stderr
    cases = {
        "unknown": ('[clusters.a]\nbootstrap-servers = ["h:1"]\n[http]\nlisten-port = 1\n', "http.listen-port"),
        "type": ('[clusters.a]\nbootstrap-servers = ["h:1"]\n[storage]\nintervals = "x"\n', "storage.intervals"),
        "missing": ('[clusters.a]\nclient-id = "x"\n', "clusters.a.bootstrap-servers"),
        "toml": ("[clusters.a\n", "not valid TOML"),
    }
    for name, (text, needle) in cases.items():
        f = tmp_path / f"{name}.toml"
        f.write_text(text)
        r = run_cli("check-config", str(f))
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (name, r.stderr)


def test_missing_file_exits_2(tmp_path: Path) -> None:
    r = run_cli("check-config", str(tmp_path / "absent.toml"))
    assert r.returncode == 2 and "cannot read" in r.stderr


# --- URLs, host:port lists and named files are checked before anything starts -------------


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("notify", "mqtt-url", "mqtt://h:99999"),
        ("notify", "mqtt-url", "mqtt://h:abc"),
        ("notify", "mqtt-url", "mqtt://h:0"),
        ("notify", "mqtt-url", "mqtt://h:"),
        ("notify", "mqtt-url", "http://h:1883"),
        ("notify", "mqtt-url", "mqtt://:1883"),
        ("notify", "mqtt-url", "mqtt://h:1883/topic"),
        ("notify", "mqtt-url", "mqtt://[::1"),
        ("http", "listen", "127.0.0.1:65536"),
        ("http", "listen", "127.0.0.1:http"),
        ("http", "listen", "127.0.0.1"),
        ("storage", "database-url", "postgresql://lagd@db:99999/lagd"),
        ("storage", "database-url", "postgresql://lagd@db:port/lagd"),
    ],
)
def test_bad_url_or_address_names_key_value_and_expectation(section: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, section: {key: value}}, env={})
    assert info.value.key == f"{section}.{key}"
    message = str(info.value)
    assert "expected" in message and "\n" not in message
    if key != "database-url":  # the database URL may hold a password: it is never echoed
        assert repr(value) in message


@pytest.mark.parametrize("server", ["k1:99999", "k1:0", "k1:abc", "k1", ":9092", "k1:9092:1"])
def test_bootstrap_server_port_out_of_range_is_rejected(server: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({"clusters": {"prod": {"bootstrap-servers": ["ok:9092", server]}}}, env={})
    assert info.value.key == "clusters.prod.bootstrap-servers"
    assert repr(server) in str(info.value) and "host:port" in str(info.value)


def test_good_urls_and_addresses_pass() -> None:
    s = parse(
        {
            "clusters": {"prod": {"bootstrap-servers": ["k1:9092", "[::1]:9093", "10.0.0.1:65535"]}},
            "http": {"listen": ":0"},
            "notify": {"mqtt-url": "mqtts://[::1]:8883"},
            "storage": {"database-url": "postgresql://lagd@/lagd?host=/run/postgresql"},
        },
        env={},
    )
    assert s.http.listen == ":0"
    for url in ("mqtt://broker", "mqtt://broker:1", "mqtts://broker.example:8883/"):
        assert parse({**MINIMAL, "notify": {"mqtt-url": url}}, env={}).notify.mqtt_url == url


def test_mqtt_credentials_in_the_url_are_rejected_without_echoing_them() -> None:
    for url in ("mqtt://user:hunter2@broker:1883", "mqtt://hunter2@broker"):
        with pytest.raises(ConfigError) as info:
            parse({**MINIMAL, "notify": {"mqtt-url": url}}, env={})
        message = str(info.value)
        assert info.value.key == "notify.mqtt-url"
        assert "hunter2" not in message
        assert "notify.username" in message and "notify.password" in message


@pytest.mark.parametrize(
    ("raw_of", "key"),
    [
        (lambda f: {"clusters": {"p": {"bootstrap-servers": ["a:1"], "tls-ca-file": f}}}, "clusters.p.tls-ca-file"),
        (
            lambda f: {"clusters": {"p": {"bootstrap-servers": ["a:1"], "tls-cert-file": f, "tls-key-file": f}}},
            "clusters.p.tls-cert-file",
        ),
        (lambda f: {**MINIMAL, "http": {"tls-cert-file": f, "tls-key-file": f}}, "http.tls-cert-file"),
        (lambda f: {**MINIMAL, "notify": {"tls-ca-file": f}}, "notify.tls-ca-file"),
    ],
)
def test_missing_or_unreadable_tls_files_are_rejected(tmp_path: Path, raw_of: Any, key: str) -> None:
    for bad in (tmp_path / "absent.pem", tmp_path):  # missing; a directory (cannot be read as a file)
        with pytest.raises(ConfigError) as info:
            parse(raw_of(str(bad)), env={})
        assert info.value.key == key
        assert repr(str(bad)) in str(info.value) and "readable" in str(info.value)


def test_tls_key_file_is_checked_too(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    raw = {"clusters": {"p": {"bootstrap-servers": ["a:1"], "tls-cert-file": str(cert), "tls-key-file": "/nope.key"}}}
    with pytest.raises(ConfigError) as info:
        parse(raw, env={})
    assert info.value.key == "clusters.p.tls-key-file"
    key = tmp_path / "key.pem"
    key.write_text("x")
    raw["clusters"]["p"]["tls-key-file"] = str(key)
    assert parse(raw, env={}).clusters["p"].tls_key_file == str(key)


def test_check_config_rejects_what_would_crash_after_ready(tmp_path: Path) -> None:
    """These values passed check-config once and crashed the daemon after READY (crash loop)."""
    base = '[clusters.a]\nbootstrap-servers = ["h:9092"]\n'
    cases = {
        "port": (base + '[notify]\nmqtt-url = "mqtt://h:99999"\n', "notify.mqtt-url"),
        "letters": (base + '[notify]\nmqtt-url = "mqtt://h:abc"\n', "notify.mqtt-url"),
        "listen": (base + '[http]\nlisten = "127.0.0.1:70000"\n', "http.listen"),
        "kafka": ('[clusters.a]\nbootstrap-servers = ["h:99999"]\n', "clusters.a.bootstrap-servers"),
        "ca": (base + '[notify]\ntls-ca-file = "/no/such/ca.pem"\n', "notify.tls-ca-file"),
    }
    for name, (text, key) in cases.items():
        f = tmp_path / f"{name}.toml"
        f.write_text(text)
        r = run_cli("check-config", str(f))
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"'{key}'" in lines[0] and "expected" in lines[0], (name, r.stderr)


# --- secrets ---------------------------------------------------------------------------------

SECRETS = {
    "LAGD_CLUSTERS_LOCAL_SASL_PASSWORD": "sasl-hunter2",
    "LAGD_CLUSTERS_LOCAL_TLS_KEY_PASSWORD": "key-hunter2",
    "LAGD_STORAGE_DATABASE_URL": "postgresql://lagd:db-hunter2@db:5432/lagd",
    "LAGD_NOTIFY_PASSWORD": "mqtt-hunter2",
    "LAGD_HTTP_AUTH_TOKEN": "token-hunter2",
}


def _leaks(text: str) -> list[str]:
    return [v for v in ("sasl-hunter2", "key-hunter2", "db-hunter2", "mqtt-hunter2", "token-hunter2") if v in text]


def test_secret_is_not_a_string_and_never_shows_itself() -> None:
    s = Secret("hunter2")
    assert not isinstance(s, str)
    shown = [str(s), repr(s), f"{s}", f"{s!r}", f"{s:>20}", "%s" % s, f"{s:s}", f"{s!s}", format(s)]
    assert not any("hunter2" in t for t in shown), shown
    with pytest.raises(TypeError):
        json.dumps(s)
    assert json.dumps({"p": s}, default=str) == '{"p": "***"}'
    assert s.reveal() == "hunter2"
    assert s and not Secret("") and str(Secret("")) == ""
    assert s == Secret("hunter2") and s != Secret("other")
    assert copy.deepcopy(s).reveal() == "hunter2"
    with pytest.raises(AttributeError):
        s._value = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Secret(5)  # type: ignore[arg-type]


def test_settings_with_secrets_never_reveal_them() -> None:
    s = load(EXAMPLE, env=SECRETS)
    assert s.clusters["local"].sasl_password.reveal() == "sasl-hunter2"
    assert s.http.auth_token.reveal() == "token-hunter2"
    texts = [
        repr(s),
        str(s),
        f"{s}",
        json.dumps(public_view(s)),
        json.dumps(dataclasses.asdict(s), default=str),
        str(public_view(s.clusters["local"])),
    ]
    for text in texts:
        assert not _leaks(text), text
    assert public_view(s)["storage"]["database-url"] == "***"
    assert public_view(s)["http"]["auth-token"] == "***"


def test_check_config_output_never_shows_secrets(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "lagd", "check-config", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **SECRETS},
    )
    assert ok.returncode == 0, ok.stderr
    assert not _leaks(ok.stdout + ok.stderr)
    bad = subprocess.run(
        [sys.executable, "-m", "lagd", "check-config", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **SECRETS, "LAGD_NOTIFY_MQTT_URL": "mqtt://u:mqtt-hunter2@h:1"},
    )
    assert bad.returncode == 2 and "notify.mqtt-url" in bad.stderr
    assert not _leaks(bad.stdout + bad.stderr)


def test_database_url_errors_never_echo_the_url() -> None:
    for url in ("mysql://u:db-hunter2@h/x", "postgresql://u:db-hunter2@h:99999/x", "postgresql://u:db-hunter2/x@h/y"):
        with pytest.raises(ConfigError) as info:
            parse(MINIMAL, env={"LAGD_STORAGE_DATABASE_URL": url})
        assert info.value.key == "storage.database-url" and not _leaks(str(info.value))


def test_sync_database_url_sets_a_connect_timeout() -> None:
    assert sync_database_url("postgresql://u@h/db") == "postgresql+psycopg2://u@h/db?connect_timeout=5"
    assert sync_database_url("postgresql://u@/db?host=/run").endswith("?host=/run&connect_timeout=5")
    assert sync_database_url("postgresql://u@h/db?connect_timeout=9").endswith("?connect_timeout=9")


# --- jobs.driver-memory ----------------------------------------------------------------------


def test_driver_memory_is_a_jobs_key_overridable_from_the_environment() -> None:
    assert parse(MINIMAL, env={}).jobs.driver_memory == "2g"
    assert parse(MINIMAL, env={"LAGD_JOBS_DRIVER_MEMORY": "8g"}).jobs.driver_memory == "8g"
    assert parse({**MINIMAL, "jobs": {"driver-memory": "512m"}}, env={}).jobs.driver_memory == "512m"
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, "jobs": {"driver-memory": "lots"}}, env={})
    assert info.value.key == "jobs.driver-memory" and "'lots'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={"LAGD_SPARK_DRIVER_MEMORY": "4g"})
    assert "LAGD_JOBS_DRIVER_MEMORY" in str(info.value)


def test_check_config_accepts_lagd_jobs_driver_memory() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "lagd", "check-config", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LAGD_JOBS_DRIVER_MEMORY": "3g"},
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("job", ["trends", "mirrors", "mirror-trends"])
def test_jobs_pass_driver_memory_to_spark(monkeypatch: pytest.MonkeyPatch, job: str) -> None:
    from lagd.jobs import mirror_trends, mirrors, spark, trends
    from lagd.jobs.spark import JobError

    seen: dict[str, Any] = {}

    def fake_build_session(**kwargs: Any) -> Any:
        seen.update(kwargs)
        raise JobError("stop here: no Spark needed")

    module = {"trends": trends, "mirrors": mirrors, "mirror-trends": mirror_trends}[job]
    monkeypatch.setattr(spark, "build_session", fake_build_session)  # session_for builds through it
    raw = {**MINIMAL, "jobs": {"driver-memory": "3g"}, "mirrors": {"m": {"source": "prod", "target": "prod"}}}
    args = argparse.Namespace(master=None, start=None, end=None)
    assert module.main(parse(raw, env={}), args) == 1
    assert seen["driver_memory"] == "3g"


HOOK = {"hook": {"kind": "webhook", "url": "https://tools.example/hook"}}
PAGE = {"status-page-url": "https://lagd.example.com/"}


def test_sinks_work_without_mqtt_and_a_setting_that_would_silence_them_is_refused() -> None:
    """MQTT is one sink among others: `mqtt-enabled = false` leaves incidents and the sinks on;
    `enabled = false` turns incidents off, so sinks beside it could never send: refused, with
    what to change."""
    off = parse({**MINIMAL, "notify": {"mqtt-enabled": False, **PAGE}, "sinks": HOOK}, env={})
    assert off.notify.enabled and not off.notify.mqtt_enabled and list(off.sinks) == ["hook"]
    assert not parse({**MINIMAL, "notify": {"enabled": False}}, env={}).notify.enabled  # as before
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, "notify": {"enabled": False, **PAGE}, "sinks": HOOK}, env={})
    assert info.value.key == "notify.enabled"
    assert "sinks hook would never send" in str(info.value) and "notify.mqtt-enabled = false" in str(info.value)
    env = {"LAGD_NOTIFY_MQTT_ENABLED": "false"}  # from the environment too
    assert not parse({**MINIMAL, "notify": PAGE, "sinks": HOOK}, env=env).notify.mqtt_enabled


def test_a_sink_needs_a_status_page_url_on_call_can_open() -> None:
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, "sinks": HOOK}, env={})  # http.listen 127.0.0.1:8000: no address for anyone else
    assert info.value.key == "notify.status-page-url" and "127.0.0.1:8000" in str(info.value)
    for listen in ("0.0.0.0:8000", "[::]:8000", "localhost:8000", "[::1]:8000"):
        with pytest.raises(ConfigError, match=r"notify\.status-page-url"):
            parse({**MINIMAL, "http": {"listen": listen}, "sinks": HOOK}, env={})
    public = parse({**MINIMAL, "http": {"listen": "lagd-1.example.com:8000"}, "sinks": HOOK}, env={})
    assert public.sinks["hook"].url  # derived: http://lagd-1.example.com:8000/
    assert parse({**MINIMAL, "notify": PAGE, "sinks": HOOK}, env={}).notify.status_page_url == PAGE["status-page-url"]


def test_a_sink_key_its_kind_never_reads_is_refused() -> None:
    base = {**MINIMAL, "notify": PAGE}
    for kind, key, value in (
        ("slack", "body-template", '{"x": "$id"}'),
        ("webhook", "routing-key", "rk"),
        ("slack", "alert-ttl", 60.0),
        ("alertmanager", "hmac-secret", "s"),
    ):
        sink = {"kind": kind, "url": "https://r.example/x", key: value}
        with pytest.raises(ConfigError) as info:
            parse({**base, "sinks": {"s": sink}}, env={})
        assert info.value.key == f"sinks.s.{key}" and "remove it" in str(info.value), str(info.value)
    env = {"LAGD_SINKS_S_ROUTING_KEY": "rk"}  # a secret from the environment counts too
    with pytest.raises(ConfigError, match=r"sinks\.s\.routing-key"):
        parse({**base, "sinks": {"s": {"kind": "slack", "url": "https://r.example/x"}}}, env=env)
    ok = {"kind": "alertmanager", "url": "https://am.example", "alert-ttl": 60.0, "headers": ["A: b"]}
    assert parse({**base, "sinks": {"s": ok}}, env={}).sinks["s"].alert_ttl == 60.0


def test_with_mqtt_off_an_mqtt_key_of_its_own_is_refused() -> None:
    off = {"mqtt-enabled": False}
    with pytest.raises(ConfigError) as info:
        parse({**MINIMAL, "notify": {**off, "mqtt-url": "mqtt://broker.example:1883"}}, env={})
    assert info.value.key == "notify.mqtt-url" and "mqtt-enabled = true" in str(info.value)
    with pytest.raises(ConfigError, match=r"notify\.password"):
        parse({**MINIMAL, "notify": off}, env={"LAGD_NOTIFY_PASSWORD": "pw"})
    # the example's keys at their defaults are no such setting: a copy of it turns MQTT off as it is
    assert not parse({**MINIMAL, "notify": {**off, "mqtt-url": "mqtt://127.0.0.1:1883"}}, env={}).notify.mqtt_enabled
