"""deploy/kubernetes: every overlay renders with `kubectl kustomize`; every object of the
output validates against the Kubernetes OpenAPI schema (kubernetes-validate, strict: an
unknown or misplaced field fails); the DaemonSet carries what the design asks for (socket
and /dev/shm hostPaths, node-local L2, ConfigMap, resource limits, probes through the
socket, non-root); the ConfigMap's kvstrata.toml passes kvstratad --check_config and
agrees with the manifests (socket, metrics port, L1 below the memory limit, L3 mount);
the metrics Service and ServiceMonitor select the pods. The engine examples validate too."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Dict, List

import kubernetes_validate
import pytest
import yaml

from conftest import REPO
from kvs_testing import daemon_binary

K8S = REPO / "deploy" / "kubernetes"
OVERLAYS = ["base", "overlays/gpu-node", "overlays/shared-l3"]
K8S_VERSION = "1.30"
SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
         "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def kubectl() -> str:
    path = os.environ.get("KVSTRATA_KUBECTL") or shutil.which("kubectl")
    assert path, "kubectl is missing: scripts/setup.sh installs Debian's kubernetes-client"
    return path


def size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMGT]i?B?|)", text)
    assert m, text
    return int(m.group(1)) * SIZES.get(m.group(2), 1)


def render(overlay: str) -> List[Dict[str, Any]]:
    proc = subprocess.run([kubectl(), "kustomize", str(K8S / overlay)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: List[Dict[str, Any]], kind: str) -> Dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"want one {kind}, got {len(found)}"
    return found[0]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> Dict[str, Any]:
    return {"overlay": request.param, "docs": render(request.param)}


def test_every_object_matches_the_kubernetes_schema(rendered) -> None:
    for doc in rendered["docs"]:
        if doc["kind"] == "ServiceMonitor":
            continue  # a CRD: checked below
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_is_not_vacuous() -> None:
    ds = one(render("base"), "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def config_of(docs: List[Dict[str, Any]], ds: Dict[str, Any]) -> Dict[str, Any]:
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    name = volumes["config"]["configMap"]["name"]
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name)
    return cm


def test_daemonset_has_the_required_fields(rendered) -> None:
    docs = rendered["docs"]
    ds = one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["socket-dir"]["hostPath"]["path"] == "/run/kvstrata"
    assert volumes["dev-shm"]["hostPath"]["path"] == "/dev/shm"
    assert volumes["l2"]["hostPath"]["path"].startswith("/var/lib/kvstrata")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (daemon,) = [c for c in pod["containers"] if c["name"] == "kvstratad"]
    for c in pod["containers"] + pod.get("initContainers", []):
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
    assert {"config", "socket-dir", "dev-shm", "l2"} <= set(mounts)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = daemon[probe]["exec"]["command"]
        assert command[0] == "kvstrata" and command[-1] == "status"
        assert "--endpoint=/run/kvstrata/kvstrata.sock" in command
    assert daemon["securityContext"]["readOnlyRootFilesystem"] is True
    assert "ALL" in daemon["securityContext"]["capabilities"]["drop"]


def test_config_is_valid_and_agrees_with_the_manifests(rendered, tmp_path: Path) -> None:
    docs = rendered["docs"]
    ds = one(docs, "DaemonSet")
    cm = config_of(docs, ds)
    text = cm["data"]["kvstrata.toml"]
    (tmp_path / "kvstrata.toml").write_text(text)
    proc = subprocess.run([str(daemon_binary()), f"--config={tmp_path / 'kvstrata.toml'}",
                           "--check_config"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = tomllib.loads(text)
    pod = ds["spec"]["template"]["spec"]
    (daemon,) = [c for c in pod["containers"] if c["name"] == "kvstratad"]
    mounts = {m["mountPath"] for m in daemon["volumeMounts"]}
    assert config["server"]["socket"].rsplit("/", 1)[0] in mounts
    tiers = {t["label"]: t for t in config.get("tiers", [])}  # the [[tiers]] list
    assert tiers["l2"]["path"] in mounts
    ports = {p["name"]: p["containerPort"] for p in daemon["ports"]}
    assert config["server"]["metrics_address"] == f"0.0.0.0:{ports['metrics']}"
    limit = size(daemon["resources"]["limits"]["memory"])
    assert size(config["l1"]["capacity"]) + (1 << 30) <= limit, "L1 must fit the memory limit"
    assert daemon["resources"]["limits"]["memory"] == daemon["resources"]["requests"]["memory"]
    for tier in tiers.values():  # every enabled tier's directory is mounted
        if tier.get("enabled", True):
            assert tier["path"] in mounts, tier["label"]


def test_events_use_the_node_wide_topic(rendered, tmp_path: Path) -> None:
    """KV events go out under kv@node:<node>@<model>: NODE_NAME comes from the downward API,
    and neither the args nor the config name a pod_id that would take its place."""
    docs = rendered["docs"]
    ds = one(docs, "DaemonSet")
    (daemon,) = [c for c in ds["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "kvstratad"]
    env = {e["name"]: e for e in daemon["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert not [a for a in daemon["args"] if "events.pod_id" in a or "events.node_name" in a]
    text = config_of(docs, ds)["data"]["kvstrata.toml"]
    events = tomllib.loads(text)["events"]
    assert events.get("pod_id", "") == "" and events.get("node_name", "") == ""
    # The value the downward API gives is a valid node name for the daemon.
    (tmp_path / "kvstrata.toml").write_text(text)
    proc = subprocess.run([str(daemon_binary()), f"--config={tmp_path / 'kvstrata.toml'}",
                           "--check_config"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "NODE_NAME": "gpu-node-7"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_metrics_service_and_servicemonitor_select_the_pods(rendered) -> None:
    docs = rendered["docs"]
    ds = one(docs, "DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    svc = one(docs, "Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    port_names = {p["name"] for c in ds["spec"]["template"]["spec"]["containers"]
                  for p in c["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert all(e["path"] == "/metrics" for e in sm["spec"]["endpoints"])


def test_gpu_overlays_share_ipc_and_claim_no_gpu() -> None:
    for overlay in OVERLAYS[1:]:
        pod = one(render(overlay), "DaemonSet")["spec"]["template"]["spec"]
        assert pod["hostIPC"] is True and pod["runtimeClassName"] == "nvidia"
        assert pod["nodeSelector"]["nvidia.com/gpu.present"] == "true"
        for c in pod["containers"]:
            assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_shared_l3_mounts_a_read_write_many_claim() -> None:
    docs = render("overlays/shared-l3")
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["l3"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


@pytest.mark.parametrize("example", sorted((K8S / "examples").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_engine_examples_mount_the_socket(example: Path) -> None:
    for doc in yaml.safe_load_all(example.read_text()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        pod = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["kvstrata"]["hostPath"]["path"] == "/run/kvstrata"
        assert 10001 in pod["securityContext"]["supplementalGroups"]
        (engine,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in engine["env"]}
        assert env["KVSTRATA_SOCKET"] == "/run/kvstrata/kvstrata.sock"


def test_vllm_example_is_found_by_llm_d() -> None:
    """llm-d's pod discovery: the label, the events port, and vLLM's publisher on it."""
    (doc,) = yaml.safe_load_all((K8S / "examples" / "vllm-deployment.yaml").read_text())
    template = doc["spec"]["template"]
    assert template["metadata"]["labels"]["llm-d.ai/inference-serving"] == "true"
    (engine,) = template["spec"]["containers"]
    assert {"name": "kv-events", "containerPort": 5557} in engine["ports"]
    (events,) = [a for a in engine["args"] if a.startswith("--kv-events-config=")]
    config = json.loads(events.split("=", 1)[1])
    assert config["enable_kv_cache_events"] is True and config["publisher"] == "zmq"
    assert config["endpoint"] == "tcp://*:5557" and config["topic"].startswith("kv@$(POD_IP)@")
    env = {e["name"]: e for e in engine["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
