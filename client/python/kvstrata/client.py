"""Client: one typed method per RPC of kvstrata.v1.Control and kvstrata.v1.Admin.

Every method takes either a request message or its fields as keyword arguments
(`client.heartbeat(session_id=7)`), returns the response message (a stream wrapper for
server-streaming RPCs) and raises KVStrataError / DaemonUnavailable on failure.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf.message import Message

from ._proto import HEALTH_SERVICE, PACKAGE, REGISTRY, Method
from .endpoint import Endpoint, parse_endpoint
from .errors import from_rpc_error

CONTROL = f"{PACKAGE}.Control"
ADMIN = f"{PACKAGE}.Admin"
DEFAULT_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 64 << 20
SERVING = 1  # grpc.health.v1.HealthCheckResponse.SERVING

TlsRootCert = Union[bytes, str, "os.PathLike[str]", bool, None]


def _root_certificates(tls_root_cert: TlsRootCert) -> Optional[bytes]:
    """PEM bytes for grpc.ssl_channel_credentials (True = system roots)."""
    if tls_root_cert is True:
        return None
    if isinstance(tls_root_cert, bytes):
        return tls_root_cert
    with open(os.fspath(tls_root_cert), "rb") as f:  # type: ignore[arg-type]
        return f.read()


def open_channel(endpoint: Endpoint, tls_root_cert: TlsRootCert = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> grpc.Channel:
    """A gRPC channel to the endpoint; TLS only for TCP with a root certificate (or True)."""
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), *options]
    if endpoint.kind == "tcp" and tls_root_cert not in (None, False):
        creds = grpc.ssl_channel_credentials(root_certificates=_root_certificates(tls_root_cert))
        return grpc.secure_channel(endpoint.target, creds, options=opts)
    return grpc.insecure_channel(endpoint.target, options=opts)


class ResponseStream(Iterator[Message]):
    """Iterator over a server stream; errors become KVStrataError, cancel() ends it quietly."""

    def __init__(self, call: Any, endpoint: str,
                 on_end: Optional[Callable[[], None]] = None) -> None:
        self._call = call
        self._endpoint = endpoint
        self._cancelled = False
        self._on_end = on_end  # run once, when the stream ends or is cancelled
        self._end_lock = threading.Lock()

    def __iter__(self) -> "ResponseStream":
        return self

    def __next__(self) -> Message:
        try:
            return next(self._call)
        except StopIteration:
            self._ended()
            raise
        except grpc.RpcError as err:
            self._ended()
            if self._cancelled and err.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise from_rpc_error(err, self._endpoint) from None

    def cancel(self) -> None:
        """Stop the stream; iteration then ends without an error."""
        self._cancelled = True
        self._call.cancel()
        self._ended()

    def _ended(self) -> None:
        with self._end_lock:
            on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()


class _Channel:
    """A gRPC channel, its stubs, and the calls in flight on it (so that a channel replaced
    by reset_channel() is closed once its last call ends)."""

    __slots__ = ("channel", "stubs", "calls", "retired")

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.stubs: Dict[str, Callable[..., Any]] = {}
        self.calls = 0
        self.retired = False


class Client:
    """Connection to one kvstratad (Unix socket or TCP with optional token/TLS)."""

    def __init__(self, endpoint: Optional[str] = None, token: Optional[str] = None,
                 tls_root_cert: TlsRootCert = None, timeout: float = DEFAULT_TIMEOUT_S,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.endpoint = parse_endpoint(endpoint)
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._tls_root_cert = tls_root_cert
        self._options = tuple(options)
        self._channel_lock = threading.Lock()
        self._live = _Channel(open_channel(self.endpoint, tls_root_cert, options))
        # Channels replaced by reset_channel() with calls still in flight: each is closed
        # when its last call ends (or by close()).
        self._retired: List[_Channel] = []
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        with self._channel_lock:
            self._closed = True
            channels, self._retired = [self._live, *self._retired], []
        for held in channels:
            held.channel.close()

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def _fresh_channel(self) -> grpc.Channel:
        # A subchannel pool of its own: never share a connection that is backing off after
        # failed attempts (gRPC's reconnect back-off grows to minutes).
        return open_channel(self.endpoint, self._tls_root_cert,
                            [("grpc.use_local_subchannel_pool", 1), *self._options])

    def probe(self, timeout: float = 1.0) -> bool:
        """True when the daemon answers the health check with SERVING, asked on a new
        short-lived channel (so unaffected by this client's reconnect back-off); never raises
        KVStrataError."""
        method = REGISTRY.method(HEALTH_SERVICE, "Check")
        channel = self._fresh_channel()
        try:
            stub = channel.unary_unary(method.path,
                                       request_serializer=method.request.SerializeToString,
                                       response_deserializer=method.response.FromString)
            return stub(method.request(), timeout=timeout, metadata=self._metadata).status == SERVING
        except grpc.RpcError:
            return False
        finally:
            channel.close()

    def reset_channel(self) -> None:
        """Replace the channel with a new one (connecting at once, without the back-off of
        the old one after a daemon restart). The old channel, and its connection, is closed
        now, or when the last call in flight on it ends (a stream: when it ends or is
        cancelled)."""
        fresh = _Channel(self._fresh_channel())
        with self._channel_lock:
            if self._closed:
                old = fresh
            else:
                old, self._live = self._live, fresh
                old.retired = True
                if old.calls > 0:
                    self._retired.append(old)
                    return
        old.channel.close()

    def _acquire(self, method: Method) -> Tuple[_Channel, Callable[..., Any]]:
        """The live channel, counted as having one more call in flight, and its stub."""
        with self._channel_lock:
            held = self._live
            stub = held.stubs.get(method.path)
            if stub is None:
                channel = held.channel
                factory = channel.unary_stream if method.server_streaming else channel.unary_unary
                stub = factory(method.path, request_serializer=method.request.SerializeToString,
                               response_deserializer=method.response.FromString)
                held.stubs[method.path] = stub
            held.calls += 1
        return held, stub

    def _release(self, held: _Channel) -> None:
        """A call on `held` ended: close it if it was replaced and this was its last call."""
        with self._channel_lock:
            held.calls -= 1
            if not (held.retired and held.calls == 0 and held in self._retired):
                return
            self._retired.remove(held)
        held.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"kvstrata.Client({self.endpoint.target!r})"

    def call(self, service: str, rpc: str, request: Optional[Message] = None,
             timeout: Optional[float] = None, /, **fields: Any) -> Any:
        """Call any RPC by service full name and method name (the typed methods use this)."""
        method = REGISTRY.method(service, rpc)
        if request is None:
            request = method.request(**fields)
        elif fields:
            raise TypeError(f"{rpc}: pass a request message or fields, not both")
        elif not isinstance(request, method.request):
            raise TypeError(f"{rpc}: expected {method.request.__name__}, got {type(request).__name__}")
        held, stub = self._acquire(method)
        if method.server_streaming:
            try:
                call = stub(request, timeout=timeout, metadata=self._metadata)
            except BaseException:
                self._release(held)
                raise
            return ResponseStream(call, self.endpoint.target, lambda: self._release(held))
        try:
            return stub(request, timeout=self.timeout if timeout is None else timeout,
                        metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, self.endpoint.target) from None
        finally:
            self._release(held)

    def _control(self, rpc: str, request: Optional[Message], timeout: Optional[float],
                 fields: Dict[str, Any]) -> Any:
        return self.call(CONTROL, rpc, request, timeout, **fields)

    def _admin(self, rpc: str, request: Optional[Message], timeout: Optional[float],
               fields: Dict[str, Any]) -> Any:
        return self.call(ADMIN, rpc, request, timeout, **fields)

    # ------------------------------------------------------------------ health

    def health_check(self, service: str = "", timeout: Optional[float] = None) -> int:
        """grpc.health.v1.Health/Check: the ServingStatus number (1 = SERVING)."""
        return self.call(HEALTH_SERVICE, "Check", None, timeout, service=service).status

    def is_serving(self, timeout: Optional[float] = None) -> bool:
        """True when the daemon answers the health check with SERVING."""
        return self.health_check(timeout=timeout) == SERVING

    # ------------------------------------------------------------------ Control

    def open_session(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """OpenSession -> OpenSessionResponse."""
        return self._control("OpenSession", request, timeout, fields)

    def heartbeat(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                  **fields: Any) -> Message:
        """Heartbeat -> HeartbeatResponse."""
        return self._control("Heartbeat", request, timeout, fields)

    def close_session(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                      **fields: Any) -> Message:
        """CloseSession -> CloseSessionResponse."""
        return self._control("CloseSession", request, timeout, fields)

    def register_namespace(self, request: Optional[Message] = None, *,
                           timeout: Optional[float] = None, **fields: Any) -> Message:
        """RegisterNamespace -> RegisterNamespaceResponse (spec may be a dict or NamespaceSpec)."""
        return self._control("RegisterNamespace", request, timeout, fields)

    def register_kv_memory(self, request: Optional[Message] = None, *,
                           timeout: Optional[float] = None, **fields: Any) -> Message:
        """RegisterKvMemory -> RegisterKvMemoryResponse."""
        return self._control("RegisterKvMemory", request, timeout, fields)

    def unregister_kv_memory(self, request: Optional[Message] = None, *,
                             timeout: Optional[float] = None, **fields: Any) -> Message:
        """UnregisterKvMemory -> UnregisterKvMemoryResponse."""
        return self._control("UnregisterKvMemory", request, timeout, fields)

    def lookup(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
               **fields: Any) -> Message:
        """Lookup -> LookupResponse."""
        return self._control("Lookup", request, timeout, fields)

    def release_lease(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                      **fields: Any) -> Message:
        """ReleaseLease -> ReleaseLeaseResponse."""
        return self._control("ReleaseLease", request, timeout, fields)

    def reserve_store(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                      **fields: Any) -> Message:
        """ReserveStore -> ReserveStoreResponse."""
        return self._control("ReserveStore", request, timeout, fields)

    def commit_store(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """CommitStore -> CommitStoreResponse."""
        return self._control("CommitStore", request, timeout, fields)

    def acquire_load(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """AcquireLoad -> AcquireLoadResponse."""
        return self._control("AcquireLoad", request, timeout, fields)

    def release_load(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """ReleaseLoad -> ReleaseLoadResponse."""
        return self._control("ReleaseLoad", request, timeout, fields)

    def submit_store(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """SubmitStore -> SubmitJobResponse."""
        return self._control("SubmitStore", request, timeout, fields)

    def submit_load(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                    **fields: Any) -> Message:
        """SubmitLoad -> SubmitJobResponse."""
        return self._control("SubmitLoad", request, timeout, fields)

    def cancel_job(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                   **fields: Any) -> Message:
        """CancelJob -> CancelJobResponse."""
        return self._control("CancelJob", request, timeout, fields)

    def watch_completions(self, request: Optional[Message] = None, *,
                          timeout: Optional[float] = None, **fields: Any) -> ResponseStream:
        """WatchCompletions -> stream of JobCompletion (no deadline unless timeout is given)."""
        return self._control("WatchCompletions", request, timeout, fields)

    def poll_completions(self, request: Optional[Message] = None, *,
                         timeout: Optional[float] = None, **fields: Any) -> Message:
        """PollCompletions -> PollCompletionsResponse."""
        return self._control("PollCompletions", request, timeout, fields)

    def poll_events(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                    **fields: Any) -> Message:
        """PollEvents -> PollEventsResponse (KV events; FAILED_PRECONDITION when disabled)."""
        return self._control("PollEvents", request, timeout, fields)

    # ------------------------------------------------------------------ Admin

    def get_status(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                   **fields: Any) -> Message:
        """GetStatus -> GetStatusResponse."""
        return self._admin("GetStatus", request, timeout, fields)

    def get_stats(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                  **fields: Any) -> Message:
        """GetStats -> GetStatsResponse."""
        return self._admin("GetStats", request, timeout, fields)

    def list_tiers(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                   **fields: Any) -> Message:
        """ListTiers -> ListTiersResponse."""
        return self._admin("ListTiers", request, timeout, fields)

    def list_namespaces(self, request: Optional[Message] = None, *,
                        timeout: Optional[float] = None, **fields: Any) -> Message:
        """ListNamespaces -> ListNamespacesResponse."""
        return self._admin("ListNamespaces", request, timeout, fields)

    def list_sessions(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                      **fields: Any) -> Message:
        """ListSessions -> ListSessionsResponse."""
        return self._admin("ListSessions", request, timeout, fields)

    def admin_lookup(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                     **fields: Any) -> Message:
        """AdminLookup -> AdminLookupResponse."""
        return self._admin("AdminLookup", request, timeout, fields)

    def evict(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
              **fields: Any) -> Message:
        """Evict -> EvictResponse."""
        return self._admin("Evict", request, timeout, fields)

    def clear(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
              **fields: Any) -> ResponseStream:
        """Clear -> stream of Progress (last has done=True)."""
        return self._admin("Clear", request, timeout, fields)

    def pin(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
            **fields: Any) -> Message:
        """Pin -> PinResponse."""
        return self._admin("Pin", request, timeout, fields)

    def unpin(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
              **fields: Any) -> Message:
        """Unpin -> PinResponse."""
        return self._admin("Unpin", request, timeout, fields)

    def drain(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
              **fields: Any) -> ResponseStream:
        """Drain -> stream of Progress (last has done=True)."""
        return self._admin("Drain", request, timeout, fields)

    def get_config(self, request: Optional[Message] = None, *, timeout: Optional[float] = None,
                   **fields: Any) -> Message:
        """GetConfig -> GetConfigResponse."""
        return self._admin("GetConfig", request, timeout, fields)
