"""Pure unit tests: default socket resolution (same order as the daemon) and endpoint parsing."""
from __future__ import annotations

import os

import pytest

import kvstrata
from kvstrata.endpoint import Endpoint

ENV_VARS = ("KVSTRATA_SOCKET", "RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_default_is_tmp_per_uid(clean_env: pytest.MonkeyPatch) -> None:
    assert kvstrata.default_endpoint() == f"/tmp/kvstrata-{os.getuid()}/kvstrata.sock"


def test_xdg_runtime_dir(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert kvstrata.default_endpoint() == "/run/user/1000/kvstrata/kvstrata.sock"


def test_runtime_directory_beats_xdg(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    clean_env.setenv("RUNTIME_DIRECTORY", "/run/kvstrata")
    assert kvstrata.default_endpoint() == "/run/kvstrata/kvstrata.sock"


def test_kvstrata_socket_beats_everything(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    clean_env.setenv("RUNTIME_DIRECTORY", "/run/kvstrata")
    clean_env.setenv("KVSTRATA_SOCKET", "/srv/k.sock")
    assert kvstrata.default_endpoint() == "/srv/k.sock"


def test_empty_variables_count_as_unset(clean_env: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        clean_env.setenv(name, "")
    assert kvstrata.default_endpoint() == f"/tmp/kvstrata-{os.getuid()}/kvstrata.sock"


def test_explicit_environ_mapping() -> None:
    assert kvstrata.default_endpoint({"RUNTIME_DIRECTORY": "/r"}) == "/r/kvstrata.sock"


def test_client_without_endpoint_uses_default(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("KVSTRATA_SOCKET", "/srv/k.sock")
    with kvstrata.Client() as c:
        assert c.endpoint == Endpoint("unix", "/srv/k.sock")


@pytest.mark.parametrize("text, kind, address, target", [
    ("/run/k.sock", "unix", "/run/k.sock", "unix:///run/k.sock"),
    ("unix:///run/k.sock", "unix", "/run/k.sock", "unix:///run/k.sock"),
    ("unix:/run/k.sock", "unix", "/run/k.sock", "unix:///run/k.sock"),
    ("localhost:7470", "tcp", "localhost:7470", "localhost:7470"),
    ("10.1.2.3:7470", "tcp", "10.1.2.3:7470", "10.1.2.3:7470"),
    ("[::1]:7470", "tcp", "[::1]:7470", "[::1]:7470"),
    ("tcp://node-7.cluster:7470", "tcp", "node-7.cluster:7470", "node-7.cluster:7470"),
])
def test_parse_endpoint(text: str, kind: str, address: str, target: str) -> None:
    ep = kvstrata.parse_endpoint(text)
    assert (ep.kind, ep.address, ep.target) == (kind, address, target)


def test_relative_path_becomes_absolute(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert kvstrata.parse_endpoint("k.sock") == Endpoint("unix", str(tmp_path / "k.sock"))


@pytest.mark.parametrize("bad", ["", "unix://relative/k.sock", "tcp://no-port"])
def test_bad_endpoints_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        kvstrata.parse_endpoint(bad)
