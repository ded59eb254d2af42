"""Client transport against an in-process gRPC server: token metadata, TLS, streams, errors.

These cover what the current daemon cannot show yet (TCP listeners with a token or TLS,
server streams); the server here speaks the same wire contract through generic handlers.
"""
from __future__ import annotations

import subprocess
import threading
from concurrent import futures
from pathlib import Path
from typing import Iterator, List

import grpc
import pytest

import kvstrata
from kvstrata import pb


class FakeAdmin:
    """Answers GetStatus (recording metadata), Drain (a progress stream) and Evict (an error)."""

    def __init__(self) -> None:
        self.metadata: List[dict] = []
        self.drain_cancelled = threading.Event()

    def get_status(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        return pb.GetStatusResponse(version="fake", pid=42)

    def drain(self, request, context):
        context.add_callback(self.drain_cancelled.set)
        for i in range(1, 4):
            yield pb.Progress(done_units=i, total_units=3, unit="blocks", done=(i == 3))
        self.drain_cancelled.wait(30)  # Hold the stream open until the client cancels.

    def evict(self, request, context):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "fingerprint: must be 32 hex characters")

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn, req, resp):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)
        return grpc.method_handlers_generic_handler("kvstrata.v1.Admin", {
            "GetStatus": unary(self.get_status, pb.GetStatusRequest, pb.GetStatusResponse),
            "Evict": unary(self.evict, pb.EvictRequest, pb.EvictResponse),
            "Drain": grpc.unary_stream_rpc_method_handler(
                self.drain, request_deserializer=pb.DrainRequest.FromString,
                response_serializer=pb.Progress.SerializeToString),
        })


def serve(port_spec: str, credentials=None):
    fake = FakeAdmin()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((fake.handler(),))
    port = (server.add_secure_port(port_spec, credentials) if credentials
            else server.add_insecure_port(port_spec))
    server.start()
    return server, fake, port


@pytest.fixture
def tcp_server() -> Iterator:
    server, fake, port = serve("127.0.0.1:0")
    yield fake, f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_bearer_token_is_sent(tcp_server) -> None:
    fake, address = tcp_server
    with kvstrata.Client(address, token="s3cret") as c:
        assert c.get_status().version == "fake"
    with kvstrata.Client(address) as c:
        c.get_status()
    assert fake.metadata[0].get("authorization") == "Bearer s3cret"
    assert "authorization" not in fake.metadata[1]


def test_errors_carry_code_and_message(tcp_server) -> None:
    _, address = tcp_server
    with kvstrata.Client(address) as c:
        with pytest.raises(kvstrata.KVStrataError) as exc:
            c.evict(fingerprint="xyz")
    assert not isinstance(exc.value, kvstrata.DaemonUnavailable)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert exc.value.message == "fingerprint: must be 32 hex characters"


def test_server_stream_iterates_and_cancels(tcp_server) -> None:
    fake, address = tcp_server
    with kvstrata.Client(address) as c:
        stream = c.drain(target=pb.TIER_L2_LOCAL)
        seen = []
        for progress in stream:
            seen.append(progress.done_units)
            if progress.done:
                stream.cancel()
        assert seen == [1, 2, 3]
    assert fake.drain_cancelled.wait(5)


def test_stream_deadline_is_an_error(tcp_server) -> None:
    _, address = tcp_server
    with kvstrata.Client(address) as c:
        with pytest.raises(kvstrata.KVStrataError) as exc:
            list(c.drain(timeout=0.5))
    assert exc.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_tls_with_root_cert(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    server, fake, port = serve("localhost:0", creds)
    try:
        with kvstrata.Client(f"localhost:{port}", token="t", tls_root_cert=str(cert)) as c:
            assert c.get_status().pid == 42
        with kvstrata.Client(f"localhost:{port}", tls_root_cert=cert.read_bytes()) as c:
            assert c.get_status().pid == 42
        with kvstrata.Client(f"localhost:{port}", timeout=3) as plain:
            with pytest.raises(kvstrata.DaemonUnavailable):
                plain.get_status()
        assert fake.metadata[0]["authorization"] == "Bearer t"
    finally:
        server.stop(grace=None)
