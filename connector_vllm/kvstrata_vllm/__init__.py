"""kvstrata_vllm: the vLLM KV connector for KVStrata (see docs/vllm-connector.md).

vLLM loads it by name: kv_connector="KVStrataConnector", kv_connector_module_path="kvstrata_vllm".
"""
from __future__ import annotations

from .config import ConnectorConfig, parse_config

__version__ = "0.1.0"
__all__ = ["ConnectorConfig", "KVStrataConnector", "parse_config"]


def __getattr__(name: str):  # vLLM is imported only when the connector class is asked for.
    if name == "KVStrataConnector":
        from .connector import KVStrataConnector
        return KVStrataConnector
    raise AttributeError(name)
