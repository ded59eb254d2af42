"""Python client for kvstratad, the KVStrata KV-cache daemon (gRPC over a Unix socket or TCP).

    with kvstrata.Session(client_name="my-engine") as s:
        ns = s.register_namespace(engine="vllm", model="m", dtype="bfloat16", ...)
"""
from __future__ import annotations

from . import pb
from .client import ADMIN, CONTROL, Client, ResponseStream
from .endpoint import Endpoint, default_endpoint, parse_endpoint
from .errors import DaemonUnavailable, KVStrataError
from .session import RegisteredNamespace, Session
from .spec import namespace_spec

__version__ = "0.1.0"
__all__ = [
    "ADMIN", "CONTROL", "Client", "DaemonUnavailable", "Endpoint", "KVStrataError",
    "RegisteredNamespace", "ResponseStream", "Session", "default_endpoint", "namespace_spec",
    "parse_endpoint", "pb",
]
