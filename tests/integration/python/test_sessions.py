"""Session lifecycle over the real socket: open, heartbeat, close, and the Session helper."""
from __future__ import annotations

import os
import time

import grpc
import pytest

import kvstrata
from kvs_testing import assert_code, assert_serving


def session_ids(client: kvstrata.Client) -> set:
    return {s.session_id for s in client.list_sessions().sessions}


def test_open_heartbeat_close(client: kvstrata.Client) -> None:
    opened = client.open_session(client_name="pytest-raw", pid=os.getpid(), hostname="node-a")
    assert opened.session_id != 0
    assert opened.heartbeat_timeout_ms > 0
    assert opened.daemon_version and opened.daemon_instance_id

    info = {s.session_id: s for s in client.list_sessions().sessions}[opened.session_id]
    assert (info.client_name, info.pid, info.hostname) == ("pytest-raw", os.getpid(), "node-a")

    beat = client.heartbeat(session_id=opened.session_id)
    assert abs(beat.server_time_unix_ms - time.time() * 1000) < 60_000

    client.close_session(session_id=opened.session_id)
    assert opened.session_id not in session_ids(client)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.heartbeat(session_id=opened.session_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.close_session(session_id=opened.session_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    assert_serving(client)


def test_session_ids_are_distinct(client: kvstrata.Client) -> None:
    a = client.open_session(client_name="a")
    b = client.open_session(client_name="b")
    try:
        assert a.session_id != b.session_id
        assert a.daemon_instance_id == b.daemon_instance_id
    finally:
        client.close_session(session_id=a.session_id)
        client.close_session(session_id=b.session_id)


def test_heartbeat_timeout_is_clamped_to_config(client: kvstrata.Client) -> None:
    entries = {e.key: e.value for e in client.get_config().entries}
    maximum = int(entries["sessions.max_heartbeat_timeout_ms"])
    default = int(entries["sessions.heartbeat_timeout_ms"])
    big = client.open_session(client_name="big", heartbeat_timeout_ms=maximum * 10)
    dflt = client.open_session(client_name="default")
    try:
        assert big.heartbeat_timeout_ms == maximum
        assert dflt.heartbeat_timeout_ms == default
    finally:
        client.close_session(session_id=big.session_id)
        client.close_session(session_id=dflt.session_id)


def test_session_context_manager_closes(client: kvstrata.Client) -> None:
    with kvstrata.Session(client, client_name="pytest-ctx", hostname="node-b") as s:
        assert s.alive and s.session_id in session_ids(client)
        assert s.heartbeat().server_time_unix_ms > 0
        sid = s.session_id
    assert s.closed and not s.alive
    assert sid not in session_ids(client)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.heartbeat(session_id=sid)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    s.close()  # Idempotent.


def test_session_owns_its_client_when_given_an_endpoint(daemon, client: kvstrata.Client) -> None:
    s = kvstrata.Session(endpoint=daemon.endpoint, client_name="pytest-own")
    assert s.session_id in session_ids(client)
    s.close()
    assert s.session_id not in session_ids(client)


def test_session_closes_on_exception(client: kvstrata.Client) -> None:
    with pytest.raises(RuntimeError):
        with kvstrata.Session(client, client_name="pytest-raise") as s:
            raise RuntimeError("engine crashed")
    assert s.session_id not in session_ids(client)


def test_bad_open_session_arguments(client: kvstrata.Client) -> None:
    for fields in ({"client_name": ""}, {"client_name": "x" * 129},
                   {"client_name": "ok", "hostname": "h" * 256}):
        with pytest.raises(kvstrata.KVStrataError) as exc:
            client.open_session(**fields)
        assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    assert_serving(client)
