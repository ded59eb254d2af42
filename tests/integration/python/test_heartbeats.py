"""Heartbeat deadlines, on a daemon configured with a 1.5 s heartbeat timeout."""
from __future__ import annotations

import threading
import time

import grpc
import pytest

import kvstrata
from kvs_testing import Daemon, assert_code, run_daemon, short_tmpdir, wait_until

TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def fast_daemon():
    yield from run_daemon(
        Daemon(short_tmpdir(), {"sessions.heartbeat_timeout_ms": str(TIMEOUT_MS)}))


@pytest.fixture
def fast_client(fast_daemon: Daemon):
    with fast_daemon.client(timeout=5.0) as c:
        yield c


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch):
    """Exceptions that escaped any thread during the test."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def test_session_heartbeats_keep_it_alive(fast_client: kvstrata.Client, thread_errors) -> None:
    with kvstrata.Session(fast_client, client_name="hb") as s:
        assert s.heartbeat_timeout_ms == TIMEOUT_MS
        time.sleep(3 * TIMEOUT_MS / 1000)
        assert s.alive and s.last_error is None
        sessions = {x.session_id: x for x in fast_client.list_sessions().sessions}
        assert s.session_id in sessions
        assert time.time() * 1000 - sessions[s.session_id].last_heartbeat_unix_ms < TIMEOUT_MS
    assert not thread_errors


def test_silent_session_expires(fast_client: kvstrata.Client) -> None:
    sid = fast_client.open_session(client_name="silent").session_id
    ids = lambda: {x.session_id for x in fast_client.list_sessions().sessions}  # noqa: E731
    assert wait_until(lambda: sid not in ids(), timeout_s=3 * TIMEOUT_MS / 1000 + 5)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        fast_client.heartbeat(session_id=sid)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_lost_session_sets_alive_false_without_raising(fast_client: kvstrata.Client,
                                                       thread_errors) -> None:
    # Without auto_reconnect (test_reconnect.py covers the default: a new session).
    s = kvstrata.Session(fast_client, client_name="lost", auto_reconnect=False)
    fast_client.close_session(session_id=s.session_id)  # Behind the Session's back.
    assert wait_until(lambda: not s.alive, timeout_s=TIMEOUT_MS / 1000 + 3)
    assert isinstance(s.last_error, kvstrata.KVStrataError)
    assert s.last_error.code == grpc.StatusCode.NOT_FOUND
    s.close()  # Never raises: the NOT_FOUND is recorded instead.
    assert s.closed and not thread_errors


def test_daemon_gone_sets_alive_false(daemon_factory, thread_errors) -> None:
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(TIMEOUT_MS)})
    with d.client(timeout=2.0) as c:
        s = kvstrata.Session(c, client_name="orphan")
        assert d.stop() == 0, d.log_tail()
        assert wait_until(lambda: not s.alive, timeout_s=3 * TIMEOUT_MS / 1000 + 3)
        assert isinstance(s.last_error, kvstrata.KVStrataError)
        s.close()
        assert isinstance(s.last_error, kvstrata.DaemonUnavailable)
    assert not thread_errors
