"""Where the daemon listens: default socket resolution and endpoint parsing.

Mirrors daemon/common/runtime_paths.cc so client and daemon agree without any config.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

SOCKET_NAME = "kvstrata.sock"
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.%\w]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")


def default_endpoint(environ: Optional[Mapping[str, str]] = None) -> str:
    """The daemon's default Unix socket path, resolved exactly like kvstratad does.

    $KVSTRATA_SOCKET, else $RUNTIME_DIRECTORY/kvstrata.sock (systemd), else
    $XDG_RUNTIME_DIR/kvstrata/kvstrata.sock, else /tmp/kvstrata-<uid>/kvstrata.sock.
    Empty variables count as unset.
    """
    env = os.environ if environ is None else environ
    if env.get("KVSTRATA_SOCKET"):
        return env["KVSTRATA_SOCKET"]
    if env.get("RUNTIME_DIRECTORY"):
        return f"{env['RUNTIME_DIRECTORY']}/{SOCKET_NAME}"
    if env.get("XDG_RUNTIME_DIR"):
        return f"{env['XDG_RUNTIME_DIR']}/kvstrata/{SOCKET_NAME}"
    return f"/tmp/kvstrata-{os.getuid()}/{SOCKET_NAME}"


@dataclass(frozen=True)
class Endpoint:
    """A parsed endpoint: kind "unix" (address = absolute path) or "tcp" (host:port)."""

    kind: str
    address: str

    @property
    def target(self) -> str:
        """The gRPC channel target string."""
        return f"unix://{self.address}" if self.kind == "unix" else self.address

    def __str__(self) -> str:
        return self.target


def parse_endpoint(endpoint: Optional[str] = None) -> Endpoint:
    """Parse a socket path, "unix:///abs/path", "unix:path", "tcp://host:port" or "host:port".

    None means default_endpoint(). Relative socket paths are made absolute.
    """
    text = default_endpoint() if endpoint is None else os.fspath(endpoint).strip()
    if not text:
        raise ValueError("kvstrata: empty endpoint")
    if text.startswith("unix://"):
        path = text[len("unix://"):]
        if not path.startswith("/"):
            raise ValueError(f"kvstrata: {text!r}: unix:// needs an absolute path (unix:///path)")
        return Endpoint("unix", path)
    if text.startswith("unix:"):
        return Endpoint("unix", os.path.abspath(text[len("unix:"):]))
    if text.startswith("tcp://"):
        text = text[len("tcp://"):]
        if not _HOST_PORT.match(text):
            raise ValueError(f"kvstrata: tcp endpoint {text!r} is not host:port")
        return Endpoint("tcp", text)
    if "/" not in text and _HOST_PORT.match(text):
        return Endpoint("tcp", text)
    return Endpoint("unix", os.path.abspath(text))
