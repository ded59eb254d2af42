"""Friendly construction of a NamespaceSpec: engine="vllm", dtype="bfloat16", kv_layout="vllm_nhd"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Union

from google.protobuf.message import Message

from . import pb

EnumArg = Union[int, str, Any]

_DTYPE_ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32",
    "fp32": "float32", "fp8": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "byte": "uint8",
}
# Friendly argument name -> (NamespaceSpec field, enum wrapper, value prefix, aliases).
_ENUM_ARGS: Dict[str, tuple] = {
    "engine": ("engine_kind", pb.EngineKind, "ENGINE_KIND_", {}),
    "engine_kind": ("engine_kind", pb.EngineKind, "ENGINE_KIND_", {}),
    "dtype": ("dtype", pb.DType, "DTYPE_", _DTYPE_ALIASES),
    "kv_layout": ("kv_layout", pb.KvLayout, "KV_LAYOUT_", {}),
    "layout": ("kv_layout", pb.KvLayout, "KV_LAYOUT_", {}),
    "attention": ("attention_kind", pb.AttentionKind, "ATTENTION_KIND_", {}),
    "attention_kind": ("attention_kind", pb.AttentionKind, "ATTENTION_KIND_", {}),
}


def enum_value(wrapper: Any, prefix: str, value: EnumArg, aliases: Mapping[str, str] = {}) -> int:
    """An enum number from an int, a short name ("vllm"), a full name or e.g. torch.bfloat16."""
    if isinstance(value, bool):
        raise TypeError(f"expected a {prefix}* name or number, got {value!r}")
    if isinstance(value, int):
        return value
    name = str(value).strip().lower()
    name = name[len("torch."):] if name.startswith("torch.") else name
    name = aliases.get(name, name).upper()
    for candidate in (name, prefix + name):
        if candidate in wrapper.keys():
            return wrapper.Value(candidate)
    choices = ", ".join(k[len(prefix):].lower() for k in wrapper.keys() if not k.endswith("UNSPECIFIED"))
    raise ValueError(f"unknown {prefix.rstrip('_').lower()} {value!r}; expected one of: {choices}")


def namespace_spec(spec: Union[Message, Mapping[str, Any], None] = None, **fields: Any) -> Message:
    """A kvstrata.pb.NamespaceSpec from a spec message/dict and/or friendly keyword fields.

    Enum fields accept names (engine="vllm", dtype="bf16", kv_layout="vllm_nhd",
    attention="mla") or numbers; every other NamespaceSpec field is passed as is.
    """
    out = pb.NamespaceSpec()
    if isinstance(spec, Message):
        out.CopyFrom(spec)
    elif spec is not None:
        fields = {**spec, **fields}
    known = set(out.DESCRIPTOR.fields_by_name)
    for key, value in fields.items():
        if key in _ENUM_ARGS:
            field, wrapper, prefix, aliases = _ENUM_ARGS[key]
            setattr(out, field, enum_value(wrapper, prefix, value, aliases))
        elif key in known:
            setattr(out, key, value)
        else:
            raise TypeError(f"namespace_spec: unknown field {key!r}; fields: {', '.join(sorted(known))}")
    return out


@dataclass(frozen=True)
class RegisteredNamespace:
    """What RegisterNamespace answered for a spec.

    After a daemon restart the Session re-registers the spec and updates namespace_id in
    place (the fingerprint stays the same), so keep and pass this object, not the id.
    """

    namespace_id: int
    fingerprint: str
    bytes_per_block: int

    def __hash__(self) -> int:  # Stable across the in-place update of namespace_id.
        return hash((self.fingerprint, self.bytes_per_block))

    def _update(self, namespace_id: int, fingerprint: str, bytes_per_block: int) -> None:
        object.__setattr__(self, "namespace_id", int(namespace_id))
        object.__setattr__(self, "fingerprint", fingerprint)
        object.__setattr__(self, "bytes_per_block", int(bytes_per_block))


NamespaceArg = Union[RegisteredNamespace, int]


def namespace_id(ns: NamespaceArg) -> int:
    """The daemon's id of a RegisteredNamespace (or an id passed as is)."""
    if isinstance(ns, RegisteredNamespace):
        return ns.namespace_id
    if isinstance(ns, int) and not isinstance(ns, bool):
        return ns
    raise TypeError(f"expected the RegisteredNamespace from register_namespace(), got {type(ns).__name__}")


def block_bytes(ns: Any) -> int:
    """bytes_per_block of a RegisteredNamespace (host-mode store/load need it)."""
    if not isinstance(ns, RegisteredNamespace):
        raise TypeError("store/load need the RegisteredNamespace from register_namespace() "
                        f"(it carries bytes_per_block), got {type(ns).__name__}")
    return ns.bytes_per_block
