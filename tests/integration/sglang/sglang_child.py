"""A second SGLang-side process for the sharing tests (its own host pools and backends).

    python sglang_child.py ENDPOINT      # then one JSON command per line on stdin
Command: {"op": "store"|"check", "kind": "mha"|"mla", "layout": ..., "salt": ..., "prefix":
..., "n": N, "seed": S, "tp_rank": R}. store fills N pages from S and runs batch_set_v1;
check runs batch_exists and batch_get_v1 and compares with the pages S gives. Each command
is answered by one JSON line: {"fingerprint", "ok", ["exists", "same"]}.
"""
from __future__ import annotations

import json
import sys

import sglang_pools as sp
import kvstrata_sglang


def run(endpoint: str, cmd: dict) -> dict:
    pool = sp.make_pool(cmd["kind"], cmd["layout"])
    cfg = sp.make_config({"salt": cmd["salt"]}, mla=cmd["kind"] == "mla",
                         tp_rank=cmd["tp_rank"], tp_size=2, endpoint=endpoint)
    b = kvstrata_sglang.KVStrataStorage(cfg, {})
    try:
        b.register_mem_pool_host(pool)
        keys = sp.keys_for(cmd["prefix"], cmd["n"])
        ref = sp.alloc_pages(pool, cmd["n"])
        sp.fill_pages(pool, ref, cmd["seed"])
        out = {"fingerprint": b.namespace.fingerprint}
        if cmd["op"] == "store":
            out["ok"] = b.batch_set_v1(keys, ref)
        else:
            dst = sp.alloc_pages(pool, cmd["n"])
            out["exists"] = b.batch_exists(keys)
            out["ok"] = b.batch_get_v1(keys, dst)
            out["same"] = sp.page_bytes(pool, dst) == sp.page_bytes(pool, ref)
        return out
    finally:
        b.close()


def main() -> None:
    endpoint = sys.argv[1]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(run(endpoint, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
