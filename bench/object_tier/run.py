"""Runs bench/object_tier's object_tier_bench against an S3 server started here (the tests'
s3_server.py: SeaweedFS's `weed mini` from .venv, or with --server radosgw a one-node Ceph
cluster from bench/object_tier/radosgw.sh, on free loopback ports), and keeps its output.

    .venv/bin/python bench/object_tier/run.py --bench build/bench/object_tier/object_tier_bench \\
        --out bench/results/object-tier-2026-11-28 [--server radosgw] [-- --blocks=1000]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))

from s3_server import RadosgwServer, SeaweedServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=str(REPO / "build" / "bench" / "object_tier" /
                                           "object_tier_bench"))
    ap.add_argument("--out", type=Path, default=None, help="directory for the raw output")
    ap.add_argument("--server", choices=["seaweedfs", "radosgw"], default="seaweedfs")
    ap.add_argument("--name", default="run", help="output file name (without .txt)")
    ap.add_argument("args", nargs="*", help="passed to object_tier_bench")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kvs-obj-bench-"))
    server = (SeaweedServer(base) if a.server == "seaweedfs" else RadosgwServer(base)).start()
    try:
        creds = server.credentials_file(base / "credentials")
        cmd = [a.bench, f"--endpoint={server.endpoint}", f"--bucket={server.bucket}",
               f"--credentials_file={creds}", *a.args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        lines = [ln for ln in proc.stdout.splitlines()]
        text = "$ " + " ".join(cmd[:1] + a.args) + "\n" + "\n".join(lines) + "\n"
        if proc.returncode != 0:
            text += proc.stderr[-4000:]
        print(text, end="")
        if a.out is not None:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / f"{a.name}.txt").write_text(text)
        return proc.returncode
    finally:
        server.shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
