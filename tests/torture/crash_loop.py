#!/usr/bin/env python3
"""Crash loop: kill -9 the daemon at random moments while it writes, trims, appends its
journal and updates its ledger; after each restart on the same directories every block is
loadable byte-exact or a miss. The test of docs/crash-contract.md.

    .venv/bin/python tests/torture/crash_loop.py --tier l2 --cycles 100
    .venv/bin/python tests/torture/crash_loop.py --tier l3 --cycles 100        # GlusterFS
    .venv/bin/python tests/torture/crash_loop.py --tier l3 --l3-on local ...   # plain dir

One cycle: start kvstratad (kvs_testing.Daemon) on the same L2 (or L3) directory; check
that L1 holds nothing (L1 keeps nothing across restarts); load every candidate block (below)
and judge each answer; then a writer stores batches of host-mode blocks of known content
(two namespaces; a block's bytes are a function of its namespace and key) with
write-through, and after some batches calls Drain on the tier; a reader loads acknowledged
blocks meanwhile (hits bump L3 mtimes and journal lines). The tier is small, so L2 evicts on
the write path and L3 trims in its eviction loop (ledger reads and writes, full scans,
journal-driven trims once buckets close). At a random moment SIGKILL. After the kill, the
block files on disk are listed; with --power-cut-every K, every K-th kill is followed by
the damage a power cut may leave in files written without fsync (truncated, zeroed pages,
torn journal lines, a torn ledger, stale temp files).

A block is *acknowledged* to the tier when a Drain of that tier returned after the store
that put it in L1 returned (docs/crash-contract.md). Each answer of a load is judged:
  corrupt   a hit whose bytes are not the block's (any key)        -- must be 0
  phantom   a hit for a key no store ever sent                     -- must be 0
  lost      an acknowledged block that is a miss (a trim, a refused admission, or damage)
  unacked   a hit, byte-exact, of a block stored but not acknowledged (its write-through
            or a later Drain wrote it before the kill): allowed
Candidates each cycle: every key with a file on disk after the kill, every key sent in the
last two cycles, a sample of older acknowledged keys, and never-sent keys (the next keys the
writer would have sent, random ones, and both namespaces for every foreign file on disk).
Exits 1 on any corrupt or phantom block (or a quarantined file after a kill with no damage:
a kill -9 leaves no torn block file), 3 when a killed daemon does not exit within 30 s (its
threads stuck in the kernel: a hung mount; where they wait is printed), 2 when the run
could not start, 4 when GlusterFS hung and --restart-on-hang went on. `kill -USR1 <pid>` prints where the run itself waits.
"""
from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crash_damage import damage_like_power_cut  # noqa: E402

BLOCK = 64 * 1024
FILE_BYTES = 4096 + BLOCK
NAMESPACES = 2
LOAD_CHUNK = 32
GHOST_BASE = 1 << 40  # key indices never sent


def spec(ns: int, salt: str) -> dict:
    return dict(engine="other", model="kvstrata-crash-loop", dtype="uint8", num_layers=1,
                num_kv_heads=1, head_size=8, tokens_per_block=16, kv_layout="opaque",
                opaque_block_bytes=BLOCK, salt=f"{salt}-ns{ns}")


def key_of(salt: str, ns: int, i: int) -> bytes:
    return hashlib.blake2b(f"{salt}:{ns}:{i}".encode(), digest_size=16).digest()


def content_of(salt: str, ns: int, key: bytes) -> bytes:
    """The one right content of a block: not periodic, so a misplaced page shows."""
    return hashlib.shake_256(f"{salt}:{ns}:".encode() + key).digest(BLOCK)


class StuckDaemon(RuntimeError):
    pass


def kill_and_reap(daemon, within_s: float = 30.0) -> None:
    """SIGKILL; a daemon whose threads stay in the kernel (a hung mount) is reported with
    where they wait instead of blocking the run forever."""
    proc = daemon.proc
    proc.kill()
    try:
        proc.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        where = []
        for task in sorted(Path(f"/proc/{proc.pid}/task").glob("*")):
            try:
                stack = (task / "stack").read_text().split("\n")[:3]
            except OSError:
                stack = [(task / "wchan").read_text() if (task / "wchan").exists() else "?"]
            where.append(f"{task.name}: {' <- '.join(x.split(' ')[-1] for x in stack if x)}")
        raise StuckDaemon(f"the killed daemon (pid {proc.pid}) did not exit within "
                          f"{within_s:.0f} s; its threads wait in: {'; '.join(where[:12])}")


class Book:
    """What the engine side knows: keys sent, acknowledged by a store, by a Drain."""

    def __init__(self, salt: str) -> None:
        self.salt = salt
        self.lock = threading.Lock()
        self.next_index = [0] * NAMESPACES
        self.sent: Dict[Tuple[int, int], int] = {}     # (ns, i) -> cycle sent
        self.stored: Set[Tuple[int, int]] = set()       # the store returned ok for it
        self.acked: Set[Tuple[int, int]] = set()        # a Drain returned after that
        self.by_hex: Dict[str, Tuple[int, int]] = {}

    def take(self, ns: int, count: int, cycle: int) -> List[int]:
        with self.lock:
            first = self.next_index[ns]
            self.next_index[ns] += count
            for i in range(first, first + count):
                self.sent[(ns, i)] = cycle
                self.by_hex[key_of(self.salt, ns, i).hex()] = (ns, i)
            return list(range(first, first + count))


class Tally:
    def __init__(self) -> None:
        self.c = {"checked": 0, "hits": 0, "exact_acked": 0, "unacked": 0, "lost": 0,
                  "lost_on_disk": 0,
                  "misses_unacked": 0, "ghost_checked": 0, "corrupt": 0, "phantom": 0}
        self.bad: List[str] = []

    def add(self, other: "Tally") -> None:
        for k, v in other.c.items():
            self.c[k] += v
        self.bad += other.bad[:10]


class CrashLoop:
    def __init__(self, args: argparse.Namespace, root: Path, brick: Optional[Path]) -> None:
        import kvs_testing

        self.args, self.kvs = args, kvs_testing
        self.rng = random.Random(args.seed)
        self.root = root            # the tier's directory as the daemon sees it
        self.listing_root = brick or root  # where to list files (the brick: no FUSE cost)
        self.workdir = kvs_testing.short_tmpdir()
        self.salt = f"crash-{args.tier}-{args.seed}-{os.getpid()}"
        self.book = Book(self.salt)
        self.totals = Tally()
        self.events = {"kills": 0, "kills_during_drain": 0, "power_cuts": 0,
                       "drains_returned": 0, "batches_stored": 0, "quarantined_after_kill": 0,
                       "tier_evictions": 0, "damaged_files": 0}
        self.cycle_log: List[dict] = []
        self.tier_pb = None
        self.on_disk: Set[str] = set()
        self.damaged: Set[str] = set()
        self.hung = ""

    # ------------------------------------------------------------------ daemon

    def settings(self) -> Dict[str, str]:
        base = {"l1.capacity": "128MiB", "l1.slab_size": "1MiB",
                "sessions.heartbeat_timeout_ms": "3000"}
        cap = self.args.capacity
        if self.args.tier == "l2":
            return {**base, "l2.enabled": "true", "l2.path": str(self.root),
                    "l2.capacity": cap}
        return {**base, "l2.enabled": "false", "l3.enabled": "true", "l3.path": str(self.root),
                "l3.capacity": cap, "l3.eviction_interval_ms": "200",
                "l3.follow_interval_ms": "100", "l3.access_record_interval_ms": "0",
                "l3.audit_interval_s": "60"}

    def start(self):
        extra = dict(kv.split("=", 1) for kv in self.args.set)
        return self.kvs.Daemon(self.workdir, {**self.settings(), **extra},
                               socket=self.workdir / "kvstrata.sock").start()

    def tier_info(self, client):
        return next(t for t in client.list_tiers().tiers if t.tier == self.tier_pb)

    # ------------------------------------------------------------------ verify

    def judge(self, session, nss, keys: List[Tuple[int, int]], tally: Tally) -> None:
        """Loads (ns, i) keys in chunks; a KVStrataError propagates."""
        by_ns: Dict[int, List[int]] = {}
        for ns, i in keys:
            by_ns.setdefault(ns, []).append(i)
        for ns, idx in by_ns.items():
            for at in range(0, len(idx), LOAD_CHUNK):
                chunk = idx[at:at + LOAD_CHUNK]
                ks = [key_of(self.salt, ns, i) for i in chunk]
                if self.args.lookup_first:  # as an engine does: a lookup, then the load
                    for k in ks:
                        session.lookup(nss[ns], [k])
                got = session.load(nss[ns], ks)
                for i, k, found, buf in zip(chunk, ks, got, got.blocks):
                    self.judge_one(ns, i, k, bool(found), buf, tally)

    def judge_one(self, ns: int, i: int, key: bytes, found: bool, buf, tally: Tally) -> None:
        b, c = self.book, tally.c
        c["checked"] += 1
        sent = (ns, i) in b.sent
        if not sent:
            c["ghost_checked"] += 1
        if not found:
            if (ns, i) in b.acked:
                c["lost"] += 1
                if key.hex() in self.on_disk and not self.damaged:
                    c["lost_on_disk"] += 1
            elif sent:
                c["misses_unacked"] += 1
            return
        c["hits"] += 1
        if bytes(memoryview(buf).cast("B")) != content_of(self.salt, ns, key):
            c["corrupt"] += 1
            tally.bad.append(f"corrupt ns{ns} #{i} key {key.hex()}")
        elif not sent:
            c["phantom"] += 1
            tally.bad.append(f"phantom ns{ns} #{i} key {key.hex()}")
        elif (ns, i) in b.acked:
            c["exact_acked"] += 1
        else:
            c["unacked"] += 1

    def candidates(self, cycle: int) -> List[Tuple[int, int]]:
        b = self.book
        keys: Set[Tuple[int, int]] = set()
        foreign = 0
        for hexkey in self.on_disk:
            if hexkey in b.by_hex:
                keys.add(b.by_hex[hexkey])
            else:
                foreign += 1  # not a key of this run: checked below as a ghost
        keys.update(k for k, c in b.sent.items() if c >= cycle - 2)
        older = sorted(b.acked - keys)
        keys.update(self.rng.sample(older, min(len(older), self.args.sample_old)))
        for ns in range(NAMESPACES):  # the keys the writer would send next, and random ones
            keys.update((ns, b.next_index[ns] + j) for j in range(8))
            keys.update((ns, GHOST_BASE + self.rng.randrange(1 << 30)) for _ in range(8))
        if foreign:
            self.totals.bad.append(f"{foreign} block files on disk name keys of no store")
        return sorted(keys)

    # ------------------------------------------------------------------ one cycle

    def list_disk(self) -> Set[str]:
        """Hex keys of the block files on disk (quarantine and temp files excluded)."""
        found = set()
        for dirpath, dirnames, names in os.walk(self.listing_root):
            dirnames[:] = [d for d in dirnames
                           if d not in (".quarantine", ".kvstrata-journal", ".glusterfs")]
            for n in names:
                if n.endswith(".kv"):
                    found.add(n[:-3])
        return found

    def quarantined(self) -> int:
        q = self.listing_root / ".quarantine"
        return len(os.listdir(q)) if q.is_dir() else 0

    def run_cycle(self, cycle: int, final: bool = False) -> dict:
        import kvstrata
        from kvstrata import pb

        self.tier_pb = pb.TIER_L2_LOCAL if self.args.tier == "l2" else pb.TIER_L3_SHARED
        record = {"cycle": cycle}
        quarantine_before = self.quarantined()
        t0 = time.monotonic()
        daemon = self.start()
        record["start_s"] = round(time.monotonic() - t0, 3)
        client = daemon.client(timeout=30.0)
        sessions = []
        try:
            l1 = next(t for t in client.list_tiers().tiers if t.tier == pb.TIER_L1_DRAM)
            record["l1_blocks_at_start"] = l1.blocks
            if l1.blocks:
                self.totals.bad.append(f"cycle {cycle}: L1 held {l1.blocks} blocks at start")
            if self.args.tier == "l2":
                self.kvs.wait_until(lambda: self.tier_info(client).index_warm, 60.0)
            main = kvstrata.Session(client, client_name="crash-loop", auto_reconnect=False)
            sessions.append(main)
            nss = [main.register_namespace(**spec(ns, self.salt)) for ns in range(NAMESPACES)]
            tally = Tally()
            self.judge(main, nss, self.candidates(cycle), tally)
            record.update(tally.c)
            self.totals.add(tally)
            info = self.tier_info(client)
            record["tier_evictions_at_check"] = info.evictions
            record["tier_quarantined_at_check"] = info.quarantined_files
            for line in tally.bad[:5]:
                print(f"  cycle {cycle}: {line}", flush=True)
            quarantined_now = self.quarantined() - quarantine_before
            record["quarantined"] = quarantined_now
            if quarantined_now and not self.damaged:
                self.events["quarantined_after_kill"] += quarantined_now
                self.totals.bad.append(f"cycle {cycle}: {quarantined_now} files quarantined "
                                       "after a kill -9 with no damage")
            self.damaged = set()
            if final:
                info = self.tier_info(client)
                record["tier"] = {"blocks": info.blocks, "used_bytes": info.used_bytes,
                                  "evictions": info.evictions, "written": info.written_blocks,
                                  "dropped": info.dropped_writes, "errors": info.write_errors}
                main.close()
                sessions.clear()
                client.close()
                record["stop_rc"] = daemon.stop()
                return record
            try:
                record.update(self.churn_and_kill(daemon, client, cycle))
            except StuckDaemon:
                sessions.clear()  # Its socket still accepts and never answers.
                raise
        finally:
            for s in sessions:
                try:
                    s.close()
                except Exception:  # noqa: BLE001 - the daemon is gone
                    pass
            client.close()
            if daemon.running():
                daemon.proc.kill()  # A stuck one was reported already; else reaped below.
        if daemon.running():
            kill_and_reap(daemon)
        self.on_disk = self.list_disk()
        record["files_on_disk"] = len(self.on_disk)
        cut = self.args.power_cut_every and (cycle + 1) % self.args.power_cut_every == 0
        if cut:
            self.damaged = damage_like_power_cut(self.root, self.args.tier, self.rng,
                                                 since=record["kill_wall"] - 5.0)
            self.events["power_cuts"] += 1
            self.events["damaged_files"] += len(self.damaged)
            record["damaged"] = len(self.damaged)
        return record

    def churn_and_kill(self, daemon, client, cycle: int) -> dict:
        """Writer and reader threads, then SIGKILL at a random moment."""
        import kvstrata

        stop = threading.Event()
        in_drain = threading.Event()
        stats = {"stored_batches": 0, "drains": 0, "reads": 0, "thread_errors": 0}
        budget = self.args.max_blocks_per_cycle
        rng = random.Random(self.rng.random())

        def writer() -> None:
            nonlocal budget
            try:
                s = kvstrata.Session(client, client_name="crash-writer", auto_reconnect=False)
                nss = [s.register_namespace(**spec(ns, self.salt)) for ns in range(NAMESPACES)]
                pending: List[Tuple[int, int]] = []
                while not stop.is_set() and budget > 0:
                    ns = rng.randrange(NAMESPACES)
                    n = min(budget, rng.randint(1, 16))
                    budget -= n
                    idx = self.book.take(ns, n, cycle)
                    keys = [key_of(self.salt, ns, i) for i in idx]
                    r = s.store(nss[ns], keys, [content_of(self.salt, ns, k) for k in keys])
                    ok = [(ns, i) for i, good in zip(idx, r.ok) if good]
                    with self.book.lock:
                        self.book.stored.update(ok)
                    pending += ok
                    stats["stored_batches"] += 1
                    if rng.random() < 0.2:
                        in_drain.set()
                        # A block the Drain covers was in L1 when it began (L1 holds a whole
                        # cycle's blocks: nothing is evicted from it within a cycle).
                        covered = list(pending)
                        for _ in client.drain(target=self.tier_pb, timeout=60.0):
                            pass
                        in_drain.clear()
                        with self.book.lock:
                            self.book.acked.update(covered)
                        pending = [k for k in pending if k not in set(covered)]
                        stats["drains"] += 1
            except Exception:  # noqa: BLE001 - the kill ends the writer
                stats["thread_errors"] += 1

        def reader() -> None:
            tally = Tally()
            try:
                s = kvstrata.Session(client, client_name="crash-reader", auto_reconnect=False)
                nss = [s.register_namespace(**spec(ns, self.salt)) for ns in range(NAMESPACES)]
                while not stop.is_set():
                    with self.book.lock:
                        pool = list(self.book.acked)
                    if not pool:
                        time.sleep(0.02)
                        continue
                    self.judge(s, nss, rng.sample(pool, min(8, len(pool))), tally)
                    stats["reads"] += 1
                    time.sleep(0.01)
            except Exception:  # noqa: BLE001
                stats["thread_errors"] += 1
            finally:
                with self.book.lock:
                    self.totals.c["corrupt"] += tally.c["corrupt"]
                    self.totals.c["phantom"] += tally.c["phantom"]
                    self.totals.bad += tally.bad

        threads = [threading.Thread(target=writer, daemon=True),
                   threading.Thread(target=reader, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, self.args.max_run_s))
        during_drain = in_drain.is_set()
        kill_wall = time.time()
        kill_and_reap(daemon)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        self.events["kills"] += 1
        self.events["kills_during_drain"] += int(during_drain)
        self.events["drains_returned"] += stats["drains"]
        self.events["batches_stored"] += stats["stored_batches"]
        return {**stats, "killed_during_drain": during_drain, "kill_wall": kill_wall}

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        import logging

        logging.getLogger("kvstrata").setLevel(logging.CRITICAL)  # Sessions die with the daemon.
        t0 = time.monotonic()
        try:
            for cycle in range(self.args.cycles):
                rec = self.run_cycle(cycle)
                self.cycle_log.append(rec)
                if self.args.verbose or cycle % 10 == 0:
                    print(f"cycle {cycle}: {json.dumps({k: v for k, v in rec.items() if k != 'kill_wall'})}",
                          flush=True)
            final = self.run_cycle(self.args.cycles, final=True)
            self.cycle_log.append(final)
        except StuckDaemon as err:
            self.hung = f"after {self.events['kills']} kills: {err}"
            print(f"crash_loop: HUNG {self.hung}", file=sys.stderr, flush=True)
            final = {}
        except BaseException as err:  # noqa: B902 - pytest.fail from the launcher included
            print(f"crash_loop: stopped: {type(err).__name__}: {err}", file=sys.stderr)
            return 2
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
        c = self.totals.c
        elapsed = time.monotonic() - t0
        print(f"tier: {self.args.tier} on {self.args.l3_on if self.args.tier == 'l3' else 'local disk'}"
              f" ({self.root}), capacity {self.args.capacity}, {elapsed:.0f} s")
        print(f"cycles: {self.events['kills']} kill -9 ({self.events['kills_during_drain']} during "
              f"a Drain), {self.events['power_cuts']} followed by power-cut damage "
              f"({self.events['damaged_files']} files damaged); {self.events['batches_stored']} "
              f"batches stored, {self.events['drains_returned']} Drains returned, "
              f"{len(self.book.sent)} blocks sent, {len(self.book.acked)} acknowledged")
        print(f"checked: {c['checked']} loads after restarts ({c['ghost_checked']} of never-sent "
              f"keys); hits {c['hits']}: {c['exact_acked']} acknowledged byte-exact, "
              f"{c['unacked']} unacknowledged byte-exact; misses: {c['lost']} acknowledged "
              f"(trimmed, refused or damaged; {c['lost_on_disk']} of them with their file on disk "
              f"after the kill), {c['misses_unacked']} unacknowledged")
        print(f"final: {json.dumps(final.get('tier', {}))}")
        print(f"corrupt: {c['corrupt']}")
        print(f"phantom: {c['phantom']}")
        print(f"quarantined after a kill with no damage: {self.events['quarantined_after_kill']}")
        if self.totals.bad:
            print("problems: " + "; ".join(self.totals.bad[:20]))
        if self.args.out:
            Path(self.args.out).write_text(json.dumps(
                {"args": vars(self.args), "totals": c, "events": self.events,
                 "elapsed_s": elapsed, "problems": self.totals.bad[:100], "hung": self.hung,
                 "cycles": self.cycle_log}, indent=1, default=str) + "\n")
        failed = c["corrupt"] or c["phantom"] or self.events["quarantined_after_kill"] or \
            any("L1 held" in b or "no store" in b for b in self.totals.bad)
        return 1 if failed else 3 if self.hung else 0


def main(argv: Optional[List[str]] = None) -> int:
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: where a stuck run waits
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", choices=("l2", "l3"), default="l2")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--l3-on", choices=("gluster", "local"), default="gluster",
                    help="l3: a GlusterFS volume (tests/integration/python/gluster_fixture.py), "
                         "or a local directory")
    ap.add_argument("--capacity", default="4MiB", help="small: the tier evicts / trims")
    ap.add_argument("--max-run-s", type=float, default=2.0,
                    help="the kill comes 0.05 s .. this after the writes start")
    ap.add_argument("--max-blocks-per-cycle", type=int, default=1200,
                    help="L1 (128 MiB) must hold a cycle's blocks")
    ap.add_argument("--sample-old", type=int, default=64,
                    help="older acknowledged keys checked each cycle besides the candidates")
    ap.add_argument("--power-cut-every", type=int, default=0,
                    help="every K-th kill is followed by power-cut damage (0: never)")
    ap.add_argument("--restart-on-hang", action="store_true",
                    help="l3 on GlusterFS: after a hung mount, go on with a fresh volume")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a daemon setting over the loop's own (repeatable)")
    ap.add_argument("--lookup-first", action="store_true",
                    help="look each key up before loading it (default: loads alone, which "
                         "probe unknown keys themselves)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="JSON with every cycle's figures")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    if args.tier == "l2" or args.l3_on == "local":
        import kvs_testing

        base = kvs_testing.short_tmpdir()
        try:
            return CrashLoop(args, base / args.tier, None).run()
        finally:
            shutil.rmtree(base, ignore_errors=True)
    from gluster_fixture import GlusterCluster, unavailable_reason
    import kvs_testing

    reason = unavailable_reason()
    if reason is not None:
        print(f"crash_loop: GlusterFS cannot run here: {reason}", file=sys.stderr)
        return 2
    # A hung mount (the killed daemon's threads never return from the kernel) ends a
    # segment; with --restart-on-hang a fresh volume takes the remaining cycles.
    total = {"segments": 0, "kills": 0, "corrupt": 0, "phantom": 0, "hangs": 0}
    out, rc, wanted = args.out, 0, args.cycles
    while total["kills"] < wanted and total["segments"] < 20:
        args.cycles = wanted - total["kills"]
        if out:
            args.out = out if not total["segments"] else f"{out}.segment{total['segments']}"
        with GlusterCluster(kvs_testing.short_tmpdir()) as gl:
            vol = gl.volume("crash", mounts=1)
            root = vol.mounts[0] / "l3"
            root.mkdir()
            loop = CrashLoop(args, root, vol.brick / "l3")
            seg_rc = loop.run()
            if loop.hung:  # Abort the FUSE connection: the stuck calls fail, the zombie exits.
                for client in vol.clients:
                    client.kill()
        total["segments"] += 1
        total["kills"] += loop.events["kills"]
        total["corrupt"] += loop.totals.c["corrupt"]
        total["phantom"] += loop.totals.c["phantom"]
        total["hangs"] += int(bool(loop.hung))
        rc = max(rc, seg_rc) if seg_rc != 3 else max(rc, 3 if not args.restart_on_hang else 0)
        if seg_rc == 1 or not (loop.hung and args.restart_on_hang):
            break
        args.seed += 1000
    args.cycles = wanted
    print(f"total on GlusterFS: {total['kills']} kill -9 cycles in {total['segments']} "
          f"segment(s), corrupt {total['corrupt']}, phantom {total['phantom']}, "
          f"mount hangs {total['hangs']}")
    if total["hangs"] and args.restart_on_hang:
        rc = max(rc, 4)  # Hangs are reported as such, not as a pass.
    return rc


if __name__ == "__main__":
    sys.exit(main())
