#!/usr/bin/env python3
"""Churn soak: real daemon, real host-mode clients, chaos, every loaded byte verified.

    python3 tests/torture/torture.py --minutes 5            # or --seconds 20
    KVSTRATA_DAEMON=build/daemon/server/kvstratad python3 tests/torture/torture.py ...

Worker processes store and load chains of blocks through `kvstrata.Session` (host mode:
the shared-memory region, the same path as the SGLang backend and CPU vLLM engines). A
block's bytes are a function of its key, so any worker verifies any block it loads. A
chaos loop meanwhile, at random: SIGKILLs a worker (a new one replaces it), SIGSTOPs a
worker past its heartbeat deadline and SIGCONTs it (the paused-writer case), and kill -9s
the daemon and starts it again on the same socket and L2 directory (workers reconnect), or
makes admin calls (stats, sessions, namespaces, tiers). Idle and half-open connections sit
on every socket the daemon listens on, and soak_watch.py samples the daemon's memory, file
descriptors and threads and times a GetStatus and a fast-path lookup four times a second.
At the end the workers stop, and once their sessions ended the daemon must hold nothing
for them: no sessions, reservations, loads, leases or fenced bytes, and L1 bytes in use
equal to the bytes of its visible blocks.

Prints `tried`, `wrong bytes`, `leaks`, `growth` and `unanswered`; exits 1 when any block
was wrong, anything leaked, the daemon grew past --max-rss-growth-mib / --max-fd-growth /
--max-thread-growth after its warm-up, or left a call unanswered for more than a second
(outside its own restarts); 2 when the run could not start. Needs the kvstrata package (scripts/setup_python.sh)
and numpy is not needed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))

BLOCK = 16 * 1024  # bytes per block (an opaque namespace)
HEARTBEAT_MS = 1000
SPEC = dict(engine="other", model="kvstrata-torture", dtype="uint8", num_layers=1,
            num_kv_heads=1, head_size=8, tokens_per_block=16, kv_layout="opaque",
            opaque_block_bytes=BLOCK, salt="torture")


def block_of(key: bytes) -> bytes:
    """The one right content of `key`'s block."""
    digest = hashlib.blake2b(key, digest_size=64).digest()
    return (digest * (BLOCK // 64))[:BLOCK]


def chain(name: int, length: int) -> List[bytes]:
    keys, prev = [], name.to_bytes(8, "little")
    for i in range(length):
        prev = hashlib.blake2b(prev + i.to_bytes(4, "little"), digest_size=16).digest()
        keys.append(prev)
    return keys


# ---------------------------------------------------------------------- workers


def worker(index: int, endpoint: str, chains: int, stats_path: str, stop_at: float) -> None:
    """Store and load random chains until stop_at; write stats to stats_path (JSON) often."""
    import logging

    import kvstrata

    logging.getLogger("kvstrata").setLevel(logging.ERROR)  # Reconnects are the point here.
    rng = random.Random(os.getpid() ^ index)
    stats = {"stores": 0, "stored_blocks": 0, "loads": 0, "verified_blocks": 0,
             "wrong_blocks": 0, "errors": 0, "wrong": []}
    session = None
    last_dump = 0.0

    def dump() -> None:
        tmp = stats_path + ".tmp"
        Path(tmp).write_text(json.dumps(stats))
        os.replace(tmp, stats_path)

    while time.time() < stop_at:
        try:
            if session is None:
                session = kvstrata.Session(endpoint=endpoint, client_name=f"torture-{index}",
                                           heartbeat_timeout_ms=HEARTBEAT_MS, timeout=5.0)
                ns = session.register_namespace(**SPEC)
            keys = chain(rng.randrange(chains), rng.randrange(1, 24))
            if rng.random() < 0.5:
                r = session.store(ns, keys, [block_of(k) for k in keys])
                stats["stores"] += 1
                stats["stored_blocks"] += r.stored
            else:
                hit = session.lookup(ns, keys, lease=rng.random() < 0.5)
                got = session.load(ns, keys[:max(hit.hit_blocks, 1)], lease_id=hit.lease_id)
                stats["loads"] += 1
                for key, found, buf in zip(keys, got, got.blocks):
                    if not found:
                        continue
                    if bytes(memoryview(buf).cast("B")) == block_of(key):
                        stats["verified_blocks"] += 1
                    else:
                        stats["wrong_blocks"] += 1
                        if len(stats["wrong"]) < 5:
                            stats["wrong"].append(key.hex())
        except kvstrata.KVStrataError:
            stats["errors"] += 1  # Daemon restarting, session lost: the session reconnects.
            time.sleep(0.05)
        except Exception as err:  # noqa: BLE001 - counted, then the worker goes on
            stats["errors"] += 1
            stats.setdefault("other_errors", []).append(f"{type(err).__name__}: {err}"[:200])
            time.sleep(0.05)
        if time.time() - last_dump > 0.5:
            dump()
            last_dump = time.time()
    if session is not None:
        session.close()
    dump()


# ---------------------------------------------------------------------- the run


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        import kvs_testing

        self.args = args
        self.kvs = kvs_testing
        self.workdir = kvs_testing.short_tmpdir()
        self.l2 = self.workdir / "l2"
        self.settings = {"l1.capacity": args.l1, "l1.slab_size": "1MiB",
                         "sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS),
                         "l2.enabled": "true", "l2.path": str(self.l2),
                         "l2.capacity": args.l2}
        self.socket = self.workdir / "kvstrata.sock"
        self.daemon = None
        self.workers: Dict[int, mp.Process] = {}
        self.next_worker = 0
        self.chaos = {"worker_kills": 0, "worker_pauses": 0, "daemon_kills": 0,
                      "admin_calls": 0}
        self.watch = None
        self.idle = None
        self.stats_dir = self.workdir / "stats"
        self.stats_dir.mkdir()
        self.stop_at = time.time() + args.seconds

    def start_daemon(self) -> None:
        self.daemon = self.kvs.Daemon(self.workdir, self.settings, socket=self.socket).start()
        if self.watch is not None:
            self.watch.daemon = self.idle.daemon = self.daemon
            self.watch.serving()
            self.idle.open()

    def spawn_worker(self) -> None:
        i = self.next_worker
        self.next_worker += 1
        p = mp.get_context("spawn").Process(
            target=worker, args=(i, str(self.socket), self.args.chains,
                                 str(self.stats_dir / f"{i}.json"), self.stop_at))
        p.start()
        self.workers[i] = p

    def chaos_step(self, rng: random.Random) -> None:
        live = [i for i, p in self.workers.items() if p.is_alive()]
        roll = rng.random()
        if roll < 0.35 and live:
            i = rng.choice(live)
            os.kill(self.workers[i].pid, signal.SIGKILL)
            self.workers[i].join()
            self.chaos["worker_kills"] += 1
            self.spawn_worker()
        elif roll < 0.75 and live:
            i = rng.choice(live)
            os.kill(self.workers[i].pid, signal.SIGSTOP)  # Past its heartbeat deadline.
            time.sleep(HEARTBEAT_MS / 1000 * rng.uniform(1.3, 2.5))
            os.kill(self.workers[i].pid, signal.SIGCONT)
            self.chaos["worker_pauses"] += 1
        elif roll < 0.9 or not self.args.daemon_kills:
            with self.daemon.client(timeout=5.0) as c:
                c.get_stats()
                c.list_sessions()
                c.list_namespaces()
                c.list_tiers()
            self.chaos["admin_calls"] += 1
        else:
            self.watch.restarting()
            self.daemon.kill()  # kill -9
            self.chaos["daemon_kills"] += 1
            time.sleep(rng.uniform(0.0, 0.5))
            self.start_daemon()

    def leaks(self) -> Dict[str, float]:
        from kvstrata import pb
        from prom_text import scrape

        with self.daemon.client(timeout=10.0) as c:
            def drained() -> bool:
                m = scrape(c.get_status().metrics_address)
                return all(m.value(n) == 0 for n in (
                    "kvstrata_sessions_active", "kvstrata_reservations_active",
                    "kvstrata_loads_active", "kvstrata_leases_active", "kvstrata_fenced_bytes"))
            self.kvs.wait_until(drained, timeout_s=3 * HEARTBEAT_MS / 1000 + 10)
            m = scrape(c.get_status().metrics_address)
            l1 = next(t for t in c.list_tiers().tiers if t.tier == pb.TIER_L1_DRAM)
            return {"sessions": m.value("kvstrata_sessions_active"),
                    "reservations": m.value("kvstrata_reservations_active"),
                    "loads": m.value("kvstrata_loads_active"),
                    "leases": m.value("kvstrata_leases_active"),
                    "fenced_bytes": m.value("kvstrata_fenced_bytes"),
                    "l1_unaccounted_bytes": float(l1.used_bytes - l1.blocks * BLOCK)}

    def run(self) -> int:
        rng = random.Random(self.args.seed)
        from soak_watch import DaemonWatch, IdleConnections

        try:
            self.start_daemon()
        except BaseException as err:  # pytest.fail's exception from the launcher
            print(f"torture: the daemon did not start: {err}", file=sys.stderr)
            return 2
        self.watch = DaemonWatch(self.daemon, SPEC)
        self.idle = IdleConnections(self.daemon, self.args.idle_connections)
        self.idle.open()
        self.watch.start()
        try:
            for _ in range(self.args.workers):
                self.spawn_worker()
            while time.time() < self.stop_at - 1.0:
                time.sleep(rng.uniform(0.2, self.args.chaos_interval))
                if time.time() < self.stop_at - 3.0:
                    self.chaos_step(rng)
            for p in self.workers.values():
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
            self.watch.stop()
            growth = self.watch.growth()
            leaks = self.leaks()
        finally:
            if self.watch is not None:
                self.watch.stop()
            if self.idle is not None:
                self.idle.close()
            for p in self.workers.values():
                if p.is_alive():
                    p.kill()
            if self.daemon is not None and self.daemon.running():
                self.daemon.stop()
        totals: Dict[str, float] = {}
        wrong_keys: List[str] = []
        for f in self.stats_dir.glob("*.json"):
            s = json.loads(f.read_text())
            wrong_keys += s.pop("wrong", [])
            s.pop("other_errors", None)
            for k, v in s.items():
                totals[k] = totals.get(k, 0) + v
        leaked = {k: v for k, v in leaks.items() if v}
        print(f"tried: {self.args.seconds:.0f} s, {self.next_worker} worker processes, "
              f"{int(totals.get('stores', 0))} stores ({int(totals.get('stored_blocks', 0))} "
              f"blocks), {int(totals.get('loads', 0))} loads, "
              f"{int(totals.get('verified_blocks', 0))} loaded blocks verified, "
              f"{int(totals.get('errors', 0))} calls failed during chaos; chaos: "
              + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in self.chaos.items()))
        print(f"wrong bytes: {int(totals.get('wrong_blocks', 0))} blocks"
              + (f" (keys {wrong_keys})" if wrong_keys else ""))
        print("leaks: " + (", ".join(f"{k} {v:.0f}" for k, v in leaked.items()) or "none"))
        bounds = {"rss_mib": self.args.max_rss_growth_mib, "fds": self.args.max_fd_growth,
                  "threads": self.args.max_thread_growth}
        grew = {k: v for k, v in growth.items() if k in bounds and v > bounds[k]}
        print(f"growth (one daemon process, after {growth['sampled_s']:.0f} s of samples): "
              f"rss {growth['rss_mib']:+.1f} MiB (bound {bounds['rss_mib']}), fds "
              f"{growth['fds']:+.0f} (bound {bounds['fds']}), threads {growth['threads']:+.0f} "
              f"(bound {bounds['threads']})" + (" -- OVER" if grew else ""))
        unanswered = self.watch.unanswered
        print(f"unanswered: {len(unanswered)} of {self.watch.probes} probes over 1 s or failed "
              f"(slowest {self.watch.slowest_s * 1e3:.0f} ms; {self.idle.opened} idle "
              f"connections held)" + (f": {unanswered[:5]}" if unanswered else ""))
        result = {"seconds": self.args.seconds, "workers_started": self.next_worker,
                  "chaos": self.chaos, "totals": totals, "leaks": leaks, "growth": growth,
                  "probes": self.watch.probes, "unanswered": unanswered,
                  "slowest_probe_s": self.watch.slowest_s,
                  "idle_connections": self.idle.opened}
        if self.args.out:
            Path(self.args.out).write_text(json.dumps(result, indent=2) + "\n")
        shutil.rmtree(self.workdir, ignore_errors=True)
        return 1 if totals.get("wrong_blocks", 0) or leaked or grew or unanswered else 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--workers", type=int, default=4, help="worker processes at once")
    ap.add_argument("--chains", type=int, default=200, help="distinct chains the workers use")
    ap.add_argument("--chaos-interval", type=float, default=1.5,
                    help="longest pause between chaos events, seconds")
    ap.add_argument("--no-daemon-kills", dest="daemon_kills", action="store_false")
    ap.add_argument("--l1", default="32MiB", help="small: eviction is part of the run")
    ap.add_argument("--l2", default="256MiB")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="JSON summary")
    ap.add_argument("--idle-connections", type=int, default=8,
                    help="idle / half-open connections held on each of the daemon's sockets")
    ap.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    ap.add_argument("--max-fd-growth", type=int, default=32)
    ap.add_argument("--max-thread-growth", type=int, default=16)
    args = ap.parse_args(argv)
    args.seconds = (args.seconds if args.seconds is not None
                    else 60 * args.minutes if args.minutes is not None else 60.0)
    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
