"""A second client process for the host-mode tests: `python host_child.py MODE JSON-ARGS`.

Modes (args: endpoint, spec, chain, count, seed, ...):
  store            store blocks 0..count-1 of the chain; print the StoreResult as JSON.
  lookup-load      lookup(keys 0..lookup-1) with a lease, load the hits with that lease;
                   print {"hit_blocks", "lease_id", "found", "digests"}.
  die-mid-store    open a session with a short heartbeat, reserve `count` keys, write half
                   of the slots, print {"session_id", "reservation_id", "written"}, SIGKILL.
  die-holding-load lookup with a lease and AcquireLoad the keys, print the ids, SIGKILL.
  pause-mid-store  reserve `count` keys, print the slot offsets, SIGSTOP itself (a paused
                   writer); once continued, fill every reserved slot with 0xEE, try to commit,
                   print {"commit_error"} and wait for a line on stdin before exiting.
  pause-holding-load  lookup with a lease and AcquireLoad the keys, print the ids, SIGSTOP
                   itself (a paused reader); once continued, wait for a line on stdin, exit.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys

import numpy as np

import kvstrata
from kvstrata import pb


def chain_keys(chain: str, count: int) -> list:
    """Prefix-chain keys: key i hashes key i-1 (16 bytes each)."""
    keys, prev = [], chain.encode()
    for i in range(count):
        prev = hashlib.blake2b(prev + i.to_bytes(4, "little"), digest_size=16).digest()
        keys.append(prev)
    return keys


def block_bytes(seed: int, index: int, nbytes: int) -> np.ndarray:
    """Deterministic pseudo-random block contents."""
    return np.random.default_rng([seed, index]).integers(0, 256, nbytes, dtype=np.uint8)


def digest(buf) -> str:
    return hashlib.sha256(memoryview(buf).cast("B") if not isinstance(buf, np.ndarray)
                          else buf.tobytes()).hexdigest()


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    mode, args = sys.argv[1], json.loads(sys.argv[2])
    hb = int(args.get("heartbeat_timeout_ms", 0))
    session = kvstrata.Session(endpoint=args["endpoint"], client_name=f"host-child-{mode}",
                               heartbeat_timeout_ms=hb)
    ns = session.register_namespace(**args["spec"])
    n = ns.bytes_per_block
    keys = chain_keys(args["chain"], int(args["count"]))
    seed = int(args.get("seed", 0))

    if mode == "store":
        result = session.store(ns, keys, [block_bytes(seed, i, n) for i in range(len(keys))])
        emit({**result.as_dict(), "namespace_id": ns.namespace_id, "fingerprint": ns.fingerprint})
        session.close()
    elif mode == "lookup-load":
        probe = chain_keys(args["chain"], int(args["lookup"]))
        hit = session.lookup(ns, probe, lease=True)
        got = session.load(ns, probe[:hit.hit_blocks], lease_id=hit.lease_id)
        emit({"hit_blocks": hit.hit_blocks, "lease_id": hit.lease_id, "tiers": hit.tiers,
              "found": list(got), "digests": [digest(b) if b is not None else None
                                              for b in got.blocks]})
        session.close()
    elif mode == "die-mid-store":
        region = session.shared_region()
        r = session.client.reserve_store(session_id=session.session_id,
                                         namespace_id=ns.namespace_id, keys=keys)
        reserved = [s for s in r.slots if s.state == pb.SlotRef.STATE_RESERVED]
        written = 0
        for s in reserved[: len(reserved) // 2]:
            region.buffer[s.offset:s.offset + s.length] = block_bytes(seed, written, n).tobytes()
            written += 1
        l1 = next(t for t in session.client.list_tiers().tiers if t.tier == pb.TIER_L1_DRAM)
        emit({"session_id": session.session_id, "reservation_id": r.reservation_id,
              "reserved": len(reserved), "written": written, "l1_used_bytes": l1.used_bytes})
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode in ("die-holding-load", "pause-holding-load"):
        # A load acquired (its blocks pinned for this reader), then SIGKILL or SIGSTOP.
        session.shared_region()
        hit = session.lookup(ns, keys, lease=True)
        r = session.client.acquire_load(session_id=session.session_id,
                                        namespace_id=ns.namespace_id, keys=keys)
        emit({"session_id": session.session_id, "hit_blocks": hit.hit_blocks,
              "lease_id": hit.lease_id, "load_id": r.load_id,
              "ready": sum(1 for s in r.slots if s.state == pb.SlotRef.STATE_READY)})
        os.kill(os.getpid(), signal.SIGKILL if mode == "die-holding-load" else signal.SIGSTOP)
        sys.stdin.readline()  # The parent checks the fence while this process still runs.
    elif mode == "pause-mid-store":
        region = session.shared_region()
        sid = session.session_id
        r = session.client.reserve_store(session_id=sid, namespace_id=ns.namespace_id, keys=keys)
        reserved = [s for s in r.slots if s.state == pb.SlotRef.STATE_RESERVED]
        emit({"session_id": sid, "offsets": [s.offset for s in reserved]})
        os.kill(os.getpid(), signal.SIGSTOP)
        for s in reserved:  # Resumed after the session ended: the copies finish anyway.
            region.buffer[s.offset:s.offset + s.length] = b"\xee" * s.length
        try:
            session.client.commit_store(session_id=sid, reservation_id=r.reservation_id)
            error = None
        except kvstrata.KVStrataError as err:
            error = err.code.name
        emit({"commit_error": error})
        sys.stdin.readline()  # The parent checks the fence while this process still runs.
        session.close()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
