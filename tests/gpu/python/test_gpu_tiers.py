"""GPU blocks through L2 and back: an engine stores its KV blocks (GPU -> L1, written
through to an L2 directory), the daemon restarts, and a new engine process finds the blocks
in L2 (lookup tiers), leases them and loads them into its GPU KV cache byte-exact (L2 ->
L1 promotion, then L1 -> GPU).

Each engine runs in a spawned process of its own; the daemons are started by the test.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import traceback
from typing import Any, Dict

from gpu_support import Daemon, require_gpu

require_gpu()

import kvstrata  # noqa: E402
from kvstrata import pb  # noqa: E402

NUM_BLOCKS = 32
CHILD_TIMEOUT_S = 180.0


def engine(cfg: Dict[str, Any], conn: Any) -> None:
    """mode "store": fill NUM_BLOCKS blocks, store them, report their digests.
    mode "load": look the keys up (lease), load them into poisoned blocks, report digests."""
    try:
        import torch

        from gpu_support import KvCache, block_digests, check_completion, llama_spec

        torch.cuda.set_device(0)
        keys = [bytes.fromhex(k) for k in cfg["keys"]]
        ids = list(range(NUM_BLOCKS))
        with kvstrata.Session(endpoint=cfg["endpoint"], client_name="gpu-tiers",
                              timeout=60.0) as s:
            ns = s.register_namespace(**llama_spec("nhd", cfg["salt"]))
            cache = KvCache("nhd", NUM_BLOCKS)
            reg = s.register_cuda_kv_caches(ns, cache.pieces())
            if cfg["mode"] == "store":
                cache.fill_random(ids)
                torch.cuda.synchronize()
                check_completion(s.wait_job(s.submit_store(ns, reg, keys, ids), timeout=60.0),
                                 "store")
                conn.send({"kind": "done", "digests": block_digests(cache, ids)})
            else:
                cache.poison(ids)
                torch.cuda.synchronize()
                hit = s.lookup(ns, keys, lease=True)
                job = s.submit_load(ns, reg, keys, ids, lease_id=hit.lease_id)
                check_completion(s.wait_job(job, timeout=60.0), "load from L2")
                torch.cuda.synchronize()
                conn.send({"kind": "done", "hits": hit.hit_blocks, "tiers": list(hit.tiers),
                           "lease": hit.lease_id, "digests": block_digests(cache, ids)})
    except BaseException:
        conn.send({"kind": "error", "error": traceback.format_exc()})
    finally:
        conn.close()


def run_engine(cfg: Dict[str, Any]) -> Dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=engine, args=(cfg, child), daemon=True)
    proc.start()
    child.close()
    try:
        assert parent.poll(CHILD_TIMEOUT_S), f"engine {cfg['mode']}: no answer"
        msg = parent.recv()
        assert msg["kind"] != "error", f"engine {cfg['mode']} failed:\n{msg['error']}"
        return msg
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def l2_written(d: Daemon) -> int:
    with kvstrata.Client(d.endpoint, timeout=30.0) as c:
        t = next(t for t in c.list_tiers().tiers if t.tier == pb.TIER_L2_LOCAL)
        return t.written_blocks if t.queue_depth == 0 else -1


def test_gpu_blocks_survive_a_restart_in_l2():
    import time

    # L2 at its default path, under the daemons' shared work directory ($XDG_CACHE_HOME).
    first = Daemon({"l1.capacity": "1GiB", "l2.enabled": "true", "l2.capacity": "4GiB"})
    salt = f"gpu-tiers-{os.getpid()}"
    keys = [os.urandom(16).hex() for _ in range(NUM_BLOCKS)]
    first.start()
    second = None
    try:
        stored = run_engine(dict(endpoint=first.endpoint, salt=salt, keys=keys, mode="store"))
        deadline = time.monotonic() + 60
        while l2_written(first) < NUM_BLOCKS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert l2_written(first) == NUM_BLOCKS, first.log_tail()
        assert first.stop() == 0, first.log_tail()

        second = Daemon.__new__(Daemon)
        second.__dict__.update(first.__dict__)
        second.log_path = first.workdir / "kvstratad-2.log"
        second.proc = None
        second.start()
        loaded = run_engine(dict(endpoint=second.endpoint, salt=salt, keys=keys, mode="load"))
        assert loaded["hits"] == NUM_BLOCKS
        assert loaded["tiers"] == [pb.TIER_L2_LOCAL] * NUM_BLOCKS
        assert loaded["lease"] != 0
        assert loaded["digests"] == stored["digests"], "blocks from L2 differ"
        assert second.running(), second.log_tail()
    finally:
        for d in (first, second):
            if d is not None:
                d.kill()
        shutil.rmtree(first.workdir, ignore_errors=True)
