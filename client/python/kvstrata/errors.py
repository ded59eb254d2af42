"""The one exception type of the client: a gRPC status code plus the daemon's message."""
from __future__ import annotations

from typing import Optional

import grpc


class KVStrataError(Exception):
    """A failed call: `.code` is the grpc.StatusCode, `.message` the daemon's explanation."""

    def __init__(self, code: grpc.StatusCode, message: str, endpoint: Optional[str] = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.endpoint = endpoint

    @property
    def details(self) -> str:
        """Same as `.message` (grpc's name for it)."""
        return self.message

    def __str__(self) -> str:
        where = f" (kvstratad at {self.endpoint})" if self.endpoint else ""
        return f"{self.code.name}: {self.message}{where}"


class DaemonUnavailable(KVStrataError):
    """The daemon could not be reached (not running, wrong socket, connection lost)."""


def session_unknown(err: BaseException, session_id: int) -> bool:
    """True for the daemon's NOT_FOUND "session <id> is unknown or has ended"."""
    return (isinstance(err, KVStrataError) and err.code == grpc.StatusCode.NOT_FOUND
            and f"session {session_id} " in err.message)


def from_rpc_error(err: grpc.RpcError, endpoint: Optional[str] = None) -> KVStrataError:
    """Translate a grpc.RpcError (which is also a grpc.Call) into a KVStrataError."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or "(no details from the server)"
    if code == grpc.StatusCode.UNAVAILABLE and message.startswith("failed to connect"):
        # gRPC's "failed to connect to all addresses; last error: ...: connect failed: addr:
        # unix:... error: No such file or directory": the operating system's reason is it.
        reason = message.rsplit("error: ", 1)[-1].strip()
        message = f"cannot connect ({reason}): is kvstratad running?"
    cls = DaemonUnavailable if code == grpc.StatusCode.UNAVAILABLE else KVStrataError
    return cls(code if code is not None else grpc.StatusCode.UNKNOWN, message, endpoint)
