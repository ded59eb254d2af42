"""SGLang page hashes as KVStrata keys (at most 32 bytes).

SGLang names a page by the hex SHA-256 of its tokens chained with the previous page's hash
(`get_hash_str`): 64 hex characters, stored as their 32 raw bytes. Any other string (tests,
other callers of the legacy API) is hashed to 32 bytes with a domain prefix. The rank and
pipeline-stage part of the identity (the "suffix" other backends append to the string) is
the namespace: its fingerprint covers tp/pp size and rank, layout, model, dtype and salt.
"""
from __future__ import annotations

import hashlib
from typing import Any, List, Sequence

_HEX = frozenset("0123456789abcdefABCDEF")


def page_key(key: Any) -> bytes:
    """The 32-byte KVStrata key of one SGLang page hash string."""
    if not isinstance(key, str):
        raise TypeError(f"kvstrata: a page key must be a str, got {type(key).__name__}")
    if not key:
        raise ValueError("kvstrata: a page key must not be empty")
    if len(key) == 64 and _HEX.issuperset(key):
        return bytes.fromhex(key)
    return hashlib.sha256(b"kvstrata-sglang-key\0" + key.encode("utf-8")).digest()


def page_keys(keys: Any) -> List[bytes]:
    """page_key of each key; TypeError for a single str or a non-sequence."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError(f"kvstrata: keys must be a list of str, got {type(keys).__name__}")
    return [page_key(k) for k in keys]
