"""Engine processes of the multi-process GPU tests (started with multiprocessing "spawn").

Each allocates its own Llama-3.1-8B KV cache, opens its own session and registration, and
reports to the parent through a multiprocessing Pipe (send() is synchronous, so a message
sent right before a SIGKILL still arrives).
"""
from __future__ import annotations

import os
import random
import signal
import traceback
from typing import Any, Dict


def _session(cfg: Dict[str, Any], name: str, **kwargs: Any):
    import kvstrata

    return kvstrata.Session(endpoint=cfg["endpoint"], client_name=name, timeout=30.0, **kwargs)


def roundtrip_engine(cfg: Dict[str, Any], conn: Any) -> None:
    """Round trips in a shared namespace, then publishes blocks for the other engine and
    loads the other engine's blocks, comparing sha256 digests."""
    try:
        import torch

        from gpu_support import (KvCache, assert_blocks_equal, block_digests, check_completion,
                                 llama_spec, random_keys, roundtrip_rounds)

        torch.cuda.set_device(0)
        rng = random.Random(cfg["seed"])
        with _session(cfg, f"gpu-engine-{cfg['name']}") as s:
            ns = s.register_namespace(**llama_spec("nhd", cfg["salt"]))
            cache = KvCache("nhd", cfg["num_blocks"])
            cache.poison(range(cfg["num_blocks"]))
            reg = s.register_cuda_kv_caches(ns, cache.pieces())
            counters = roundtrip_rounds(s, ns, reg, cache, rng, cfg["rounds"], timeout=60.0)

            # Publish: store blocks whose digests the other engine checks after loading.
            ids = rng.sample(range(cfg["num_blocks"]), 16)
            keys = random_keys(rng, 16)
            cache.fill_random(ids)
            snapshot = cache.blocks(ids)
            check_completion(s.wait_job(s.submit_store(ns, reg, keys, ids, event=True),
                                        timeout=60.0), "publish store")
            conn.send({"kind": "published", "keys": [k.hex() for k in keys],
                       "digests": block_digests(cache, ids), "counters": counters,
                       "session_id": s.session_id, "pid": os.getpid()})
            # Load the other engine's blocks into this engine's (different) memory.
            other = conn.recv()
            dst = rng.sample(sorted(set(range(cfg["num_blocks"])) - set(ids)), len(other["keys"]))
            cache.poison(dst)
            torch.cuda.current_stream().synchronize()
            job = s.submit_load(ns, reg, [bytes.fromhex(k) for k in other["keys"]], dst)
            check_completion(s.wait_job(job, timeout=60.0), "load of the other engine's blocks")
            got = block_digests(cache, dst)
            assert got == other["digests"], "the other engine's blocks differ after loading"
            assert_blocks_equal(cache.blocks(ids), snapshot, "own published blocks untouched")
            conn.send({"kind": "done", "counters": counters})
    except BaseException:
        conn.send({"kind": "error", "error": traceback.format_exc()})
    finally:
        conn.close()


def killed_engine(cfg: Dict[str, Any], conn: Any) -> None:
    """Submits big stores (optionally waiting on an event behind ~1 s of GPU work), reports,
    then SIGKILLs itself while the daemon is copying (or waiting to copy)."""
    try:
        import torch

        from gpu_support import KvCache, llama_spec, random_keys

        torch.cuda.set_device(0)
        rng = random.Random(cfg["seed"])
        s = _session(cfg, "gpu-engine-killed", heartbeat_timeout_ms=cfg["heartbeat_ms"])
        ns = s.register_namespace(**llama_spec("nhd", cfg["salt"]))
        n = cfg["num_blocks"]
        cache = KvCache("nhd", n)
        cache.fill_random(range(n))
        reg = s.register_cuda_kv_caches(ns, cache.pieces())
        torch.cuda.synchronize()
        if cfg.get("event_pending"):
            torch.cuda._sleep(int(cfg.get("sleep_cycles", 2_000_000_000)))  # busy GPU, ~1 s
        event = reg.record_event()
        chunk = n // 4
        jobs = [s.submit_store(ns, reg, random_keys(rng, chunk), list(range(i * chunk, (i + 1) * chunk)),
                               event=event) for i in range(4)]
        conn.send({"kind": "submitted", "fingerprint": ns.fingerprint, "session_id": s.session_id,
                   "jobs": jobs, "pid": os.getpid()})
    except BaseException:
        conn.send({"kind": "error", "error": traceback.format_exc()})
        conn.close()
        return
    os.kill(os.getpid(), signal.SIGKILL)
