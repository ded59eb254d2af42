"""Message classes, enums and enum values of kvstrata.v1, built from the descriptor set.

Use as `kvstrata.pb.NamespaceSpec(...)`, `kvstrata.pb.EngineKind.Value("ENGINE_KIND_VLLM")`
or `kvstrata.pb.ENGINE_KIND_VLLM`, exactly like a protoc-generated module.
"""
from __future__ import annotations

from ._proto import PACKAGE as _PACKAGE
from ._proto import REGISTRY as _REGISTRY

globals().update(_REGISTRY.package_members(_PACKAGE))
__all__ = sorted(_REGISTRY.package_members(_PACKAGE))
