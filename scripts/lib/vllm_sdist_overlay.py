"""vllm==VERSION's Python files from its source archive on the package index, into DIR
(scripts/setup_vllm.sh): `python3 vllm_sdist_overlay.py VERSION DIR`. On PYTHONPATH in front
of .venv-vllm they run the connector's Scheduler tests on that release (no compiled parts,
no dependencies: .venv-vllm's serve it). The archive is ~40 MB (a wheel is ~400 MB), its
sha256 checked against the index's. Reads PIP_INDEX_URL (default PyPI's simple index)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import urllib.request


def main() -> int:
    version, target = sys.argv[1], sys.argv[2]
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    req = urllib.request.Request(f"{index}/vllm/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        files = json.load(r)["files"]
    name = f"vllm-{version}.tar.gz"
    found = [f for f in files if f["filename"] == name]
    if not found:
        print(f"vllm_sdist_overlay: {name} is not on {index}", file=sys.stderr)
        return 1
    with urllib.request.urlopen(found[0]["url"], timeout=600) as r:
        data = r.read()
    want = found[0].get("hashes", {}).get("sha256")
    if want and hashlib.sha256(data).hexdigest() != want:
        print(f"vllm_sdist_overlay: {name}: sha256 differs from the index's", file=sys.stderr)
        return 1
    prefix = f"vllm-{version}/"
    tmp = f"{target}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        members = []
        for m in t.getmembers():
            if not m.name.startswith(prefix + "vllm/") or m.name.endswith(".so") or \
                    not (m.isfile() or m.isdir()) or ".." in m.name.split("/"):
                continue
            m.name = m.name[len(prefix):]
            members.append(m)
        t.extractall(tmp, members)
    meta = os.path.join(tmp, f"vllm-{version}.dist-info")
    os.makedirs(meta)
    with open(os.path.join(meta, "METADATA"), "w") as f:   # importlib.metadata.version
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    shutil.rmtree(target, ignore_errors=True)
    os.rename(tmp, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
