"""KVStrata as SGLang's HiCache L3 storage backend.

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name":"kvstrata","module_path":"kvstrata_sglang","class_name":"KVStrataStorage","interface_v1":1}'

See docs/sglang-connector.md for every option. SGLang is imported only when
KVStrataStorage is asked for, so the page layouts (layout.py: the host pool;
device_pool.py: the device pool as kvstrata pieces) import without it.
"""
from __future__ import annotations

from .device_pool import device_pool_pieces
from .keys import page_key, page_keys
from .layout import LAYOUTS, PageLayout, describe_pool
from .options import BackendOptions, parse_options

__version__ = "0.1.0"
__all__ = ["BackendOptions", "KVStrataStorage", "LAYOUTS", "PageLayout", "describe_pool",
           "device_pool_pieces", "page_key", "page_keys", "parse_options"]


def __getattr__(name: str):  # SGLang is imported only when the backend class is asked for.
    if name == "KVStrataStorage":
        from .storage import KVStrataStorage
        return KVStrataStorage
    raise AttributeError(name)
