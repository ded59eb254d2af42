"""Unit tests of the package itself: messages from the descriptor set, RPC coverage, specs."""
from __future__ import annotations

import re

import grpc
import pytest

import kvstrata
from kvstrata import pb
from kvstrata._proto import REGISTRY


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("service", [kvstrata.CONTROL, kvstrata.ADMIN])
def test_every_rpc_has_a_typed_wrapper(service: str) -> None:
    rpcs = [name for (svc, name) in REGISTRY.methods if svc == service]
    assert rpcs, f"no RPCs loaded for {service}"
    for rpc in rpcs:
        wrapper = getattr(kvstrata.Client, snake(rpc), None)
        assert callable(wrapper), f"Client.{snake(rpc)} missing for {service}/{rpc}"
        assert wrapper.__doc__ and rpc in wrapper.__doc__


def test_messages_and_enums_are_exposed() -> None:
    assert pb.EngineKind.Value("ENGINE_KIND_VLLM") == 1
    assert pb.ENGINE_KIND_SGLANG == 2
    assert pb.DType.Name(pb.DTYPE_BFLOAT16) == "DTYPE_BFLOAT16"
    assert pb.SlotRef.STATE_READY == 4
    assert pb.JobCompletion.KIND_LOAD == 2
    req = pb.RegisterNamespaceRequest(session_id=9, spec={"model": "m", "num_layers": 3})
    assert pb.RegisterNamespaceRequest.FromString(req.SerializeToString()) == req


def test_streaming_flags_follow_the_proto() -> None:
    streaming = sorted(name for (_, name), m in REGISTRY.methods.items() if m.server_streaming)
    assert streaming == ["Clear", "Drain", "WatchCompletions"]


def test_namespace_spec_friendly_names() -> None:
    spec = kvstrata.namespace_spec(engine="vllm", dtype="torch.bfloat16", kv_layout="vllm_hnd",
                                   attention="mla", model="m", num_layers=2, tp_size=4)
    assert spec.engine_kind == pb.ENGINE_KIND_VLLM
    assert spec.dtype == pb.DTYPE_BFLOAT16
    assert spec.kv_layout == pb.KV_LAYOUT_VLLM_HND
    assert spec.attention_kind == pb.ATTENTION_KIND_MLA
    assert (spec.model, spec.num_layers, spec.tp_size) == ("m", 2, 4)


@pytest.mark.parametrize("alias, value", [("fp16", pb.DTYPE_FLOAT16), ("half", pb.DTYPE_FLOAT16),
                                          ("bf16", pb.DTYPE_BFLOAT16), ("float32", pb.DTYPE_FLOAT32),
                                          ("float8_e4m3fn", pb.DTYPE_FP8_E4M3),
                                          ("DTYPE_FP8_E5M2", pb.DTYPE_FP8_E5M2), (6, pb.DTYPE_UINT8)])
def test_dtype_aliases(alias, value: int) -> None:
    assert kvstrata.namespace_spec(dtype=alias).dtype == value


def test_namespace_spec_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="sglang"):
        kvstrata.namespace_spec(engine="tensorrt")
    with pytest.raises(TypeError, match="num_layerz"):
        kvstrata.namespace_spec(num_layerz=3)


def test_request_type_is_checked() -> None:
    with kvstrata.Client("/nonexistent/kvstrata.sock") as c:
        with pytest.raises(TypeError):
            c.heartbeat(pb.CloseSessionRequest(session_id=1))
        with pytest.raises(TypeError):
            c.heartbeat(pb.HeartbeatRequest(session_id=1), session_id=2)


def test_error_formatting() -> None:
    err = kvstrata.DaemonUnavailable(grpc.StatusCode.UNAVAILABLE, "connect failed", "unix:///x")
    assert isinstance(err, kvstrata.KVStrataError)
    assert str(err) == "UNAVAILABLE: connect failed (kvstratad at unix:///x)"
    assert err.details == "connect failed"


def test_unreachable_daemon_is_one_short_line(tmp_path) -> None:
    """No daemon at the socket: one DaemonUnavailable whose text is one line with the
    operating system's reason, not gRPC's address dump."""
    with kvstrata.Client(str(tmp_path / "none.sock"), timeout=2.0) as c:
        with pytest.raises(kvstrata.DaemonUnavailable) as info:
            c.get_status()
    text = str(info.value)
    assert "\n" not in text and "failed to connect to all addresses" not in text
    assert "cannot connect (No such file or directory): is kvstratad running?" in text


def test_tiers_are_named() -> None:
    assert kvstrata.Tier.of(1) is kvstrata.Tier.L1 and str(kvstrata.Tier.of(2)) == "L2"
    assert kvstrata.Tier.L3 == kvstrata.pb.TIER_L3_SHARED
    assert kvstrata.Tier.of(99) == 99  # a tier this client does not know stays an int
    assert kvstrata.Tier.of_all(b"\x01\x03") == [kvstrata.Tier.L1, kvstrata.Tier.L3]
    assert kvstrata.Tier.of_all([2, 99]) == [kvstrata.Tier.L2, 99]
    assert kvstrata.Tier.of_all([]) == []
    # The daemon's table (ListTiers): wire 1-3 stay Tier members, a fourth tier is a
    # DaemonTier (an int) carrying its label and kind.
    infos = [kvstrata.pb.TierInfo(tier=w, name=n, kind=k, shared=sh) for w, n, k, sh in
             [(1, "l1", "memory", False), (2, "nvme", "local-file", False),
              (4, "s3", "object", True)]]
    table = kvstrata.TierTable(infos)
    got = table.of_all([1, 2, 4, 9])
    assert got[:2] == [kvstrata.Tier.L1, kvstrata.Tier.L2] and got[1] is kvstrata.Tier.L2
    assert got[2] == 4 and isinstance(got[2], kvstrata.DaemonTier) and got[3] == 9
    assert (str(got[2]), got[2].name, got[2].kind, got[2].shared) == ("s3", "s3", "object", True)
    assert table.get(2).label == "nvme" and table.by_label("s3").tier == 4 and 3 not in table


def test_installed_package_has_the_message_stubs() -> None:
    """The build writes protoc's type stubs (--pyi_out) into the package: kvstrata/v1/
    *_pb2.pyi for every proto file, re-exported by kvstrata/pb.pyi."""
    import importlib.resources

    root = importlib.resources.files("kvstrata")
    pb_stub = root.joinpath("pb.pyi").read_text()
    for name in ("admin", "common", "control"):
        assert f"from kvstrata.v1.{name}_pb2 import *" in pb_stub
        stub = root.joinpath("v1").joinpath(f"{name}_pb2.pyi").read_text()
        assert "class " in stub and "_message.Message" in stub, name
    common = root.joinpath("v1").joinpath("common_pb2.pyi").read_text()
    assert "class NamespaceSpec(_message.Message)" in common
    assert "ENGINE_KIND_VLLM: EngineKind" in common
    assert "class ReserveStoreRequest(_message.Message)" in \
        root.joinpath("v1").joinpath("control_pb2.pyi").read_text()


def test_installed_package_has_the_planner() -> None:
    """kvstrata.planning (the load planner both connectors use) is a subpackage the wheel
    must carry, importable without any engine."""
    import importlib.resources

    from kvstrata import planning

    root = importlib.resources.files("kvstrata").joinpath("planning")
    for name in ("__init__", "load_deadline", "load_planner", "prefill_model", "promotion_watch",
                 "tier_speeds"):
        assert root.joinpath(f"{name}.py").is_file(), name
    assert planning.PRIORS[int(kvstrata.Tier.L2)].gb_per_s > 0
    p = planning.LoadPlanner(planning.PrefillModel(planning.prefill_flops(None),
                                                   planning.GPU_FLOPS, 8192),
                             planning.TierSpeeds())
    assert p.plan([int(kvstrata.Tier.L1)] * 4, 0, 16, 65, 1 << 20, in_step_ok=True).units >= 0
