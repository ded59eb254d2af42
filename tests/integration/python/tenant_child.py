"""A client of one tenant for test_tenants.py: `python tenant_child.py JSON-ARGS`, run under
the tenant's uid. Opens a session, registers `spec`, stores `count` blocks of `chain` in host
mode (or records why it cannot), looks them up, then tries what another tenant must not be
able to do with `foreign_session` / `foreign_namespace`; prints one JSON object of results
(error codes by name): with host mode, also the size of the region it maps, whether its
blocks load back byte-exact, and whether `needle` (hex) occurs anywhere in its mapping. With
"hold", it then waits for a line on stdin, looks its own blocks up again, prints
{"hits_after"} and exits.
"""
from __future__ import annotations

import json
import sys

import kvstrata
from host_child import block_bytes, chain_keys
from kvstrata import pb
from kvstrata.fast_path import FastPathSocket


def code_of(call) -> str:
    try:
        call()
        return "OK"
    except kvstrata.KVStrataError as err:
        return err.code.name


def main() -> None:
    args = json.loads(sys.argv[1])
    out: dict = {}
    session = kvstrata.Session(endpoint=args["endpoint"], client_name="tenant-child")
    client = session.client
    out["session_id"] = session.session_id
    ns = session.register_namespace(**args["spec"])
    out.update(namespace_id=ns.namespace_id, fingerprint=ns.fingerprint)
    keys = chain_keys(args["chain"], int(args["count"]))
    seed = int(args.get("seed", 1))
    try:
        total = {"stored": 0, "already_present": 0, "dropped": 0}
        for start in range(0, len(keys), 64):  # a flood comes in engine-sized stores
            part = session.store(ns, keys[start:start + 64],
                                 [block_bytes(seed, i, ns.bytes_per_block)
                                  for i in range(start, min(start + 64, len(keys)))])
            for k, v in part.as_dict().items():
                total[k] += v
        out["store"] = total
        region = session.shared_region()
        out["region_bytes"] = len(region.buffer)
        got = session.load(ns, keys[:64])
        out["loaded_exact"] = sum(
            1 for i, b in enumerate(got.blocks)
            if b is not None and bytes(b) == block_bytes(seed, i, ns.bytes_per_block).tobytes())
        if args.get("needle"):
            out["needle_found"] = bytes(region.buffer).find(bytes.fromhex(args["needle"])) >= 0
    except kvstrata.KVStrataError as err:
        out["store_error"] = err.code.name
    # With "lease", the lookup pins its hits under a lease (reported; released at the end).
    leased = session.lookup(ns, keys, lease=bool(args.get("lease")), lease_ttl_ms=30000)
    out["hits"], out["lease_id"] = leased.hit_blocks, leased.lease_id
    foreign, foreign_ns = int(args.get("foreign_session", 0)), int(args.get("foreign_namespace", 0))
    if foreign:
        out["foreign_lookup"] = code_of(lambda: client.lookup(
            session_id=foreign, namespace_id=foreign_ns, keys=keys))
        fast = FastPathSocket(session.open_response.lookup_socket, timeout=5.0)
        out["foreign_fast_lookup"] = code_of(lambda: fast.lookup(foreign, foreign_ns, keys, False))
        fast.close()
        out["foreign_heartbeat"] = code_of(lambda: client.heartbeat(session_id=foreign))
        out["foreign_close"] = code_of(lambda: client.close_session(session_id=foreign))
        out["foreign_acquire"] = code_of(lambda: client.acquire_load(
            session_id=foreign, namespace_id=foreign_ns, keys=keys))
    foreign_lease = int(args.get("foreign_lease", 0))
    if foreign_lease:
        # A load of its own naming another tenant's lease (job frame; no GPU: refused, as
        # its completion) must not take that lease over; a release frame skips it.
        job = session.submit_load(ns, 7, keys[:4], range(4), lease_id=foreign_lease)
        done = session.wait_job(job, timeout=10)
        out["foreign_lease_load"] = done.error.split(":")[0]
        out["foreign_lease_released"] = session.release_leases([foreign_lease])
    out["listed_sessions"] = [s.session_id for s in client.list_sessions().sessions]
    out["listed_namespaces"] = [n.fingerprint for n in client.list_namespaces().namespaces]
    out["listed_salts"] = [n.spec.salt for n in client.list_namespaces().namespaces]
    out["all_events"] = code_of(lambda: client.poll_events(session_id=session.session_id))
    out["clear"] = code_of(lambda: list(client.clear()))
    out["get_config"] = code_of(lambda: client.get_config())
    out["status"] = code_of(lambda: client.get_status())
    print(json.dumps(out), flush=True)
    if args.get("hold"):
        sys.stdin.readline()
        print(json.dumps({"hits_after": session.lookup(ns, keys).hit_blocks,
                          "lease_released": session.release_leases([leased.lease_id])}),
              flush=True)
    session.close()


if __name__ == "__main__":
    main()
