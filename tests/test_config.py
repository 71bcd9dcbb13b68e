"""Settings: the example file is valid; every kind of mistake exits 2 naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lagd.config import ConfigError, Secret, load, parse, public_view

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
            assert f"\n{key} =" in text, f"{section}.{key} is not documented in the example"
    for key in view["clusters"]["local"]:
        if key != "name":
            assert f"\n{key} =" in text, f"clusters.*.{key} is not documented in the example"


def test_minimal_config_gets_defaults() -> None:
    s = parse(MINIMAL, env={})
    c = s.clusters["prod"]
    assert c.name == "prod" and c.offsets_source == "topic" and c.offset_refresh == 10.0
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


def test_bad_environment_override_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={"LAGD_STORAGE_INTERVALS": "many"})
    assert info.value.key == "storage.intervals"
    with pytest.raises(ConfigError) as info:
        parse(MINIMAL, env={"LAGD_NOPE_X": "1"})
    assert info.value.key == "LAGD_NOPE_X"


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
