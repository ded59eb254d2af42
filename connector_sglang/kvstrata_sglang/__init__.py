"""KVStrata as SGLang's HiCache L3 storage backend.

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name":"kvstrata","module_path":"kvstrata_sglang","class_name":"KVStrataStorage","interface_v1":1}'

See docs/sglang-connector.md for every option.
"""
from __future__ import annotations

from .keys import page_key, page_keys
from .layout import LAYOUTS, PageLayout, describe_pool
from .options import BackendOptions, parse_options
from .storage import KVStrataStorage

__version__ = "0.1.0"
__all__ = ["BackendOptions", "KVStrataStorage", "LAYOUTS", "PageLayout", "describe_pool",
           "page_key", "page_keys", "parse_options"]
