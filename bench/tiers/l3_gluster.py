#!/usr/bin/env python3
"""L3 on a real GlusterFS volume (issue 17), beside a baseline of the same file I/O without
the daemon on the same mounts in the same run. One brick, two FUSE mounts, real kvstratad
daemons on the mounts (the test suite's fixture: tests/integration/python/gluster_fixture.py).
Prints:

  dd        context only: one 256 MiB file, and 68 KiB files by 4 parallel dd loops (fdatasync
            each; write via mount 0, read via 1; a process per file: mostly its start-up)
  files     the baseline: 4 threads (l3.io_threads' default) doing, per 68 KiB block file,
            the syscalls the daemon does (temp file opened O_DIRECT, one pwritev, fdatasync,
            close, rename into place, in <fingerprint>/<xx>/<yy>/ directories made on demand)
            through mount 0, then reading every file back as the daemon does (open O_DIRECT,
            fstat, one preadv, close) through mount 1; no process per file
  sharing   daemon B's first lookup of 1,000 blocks daemon A stored (the defaults: B
            follows A's journal), beside a B that only probes; 32-key chains: cold/warm
  latency   from a store on A (the call's return) to a hit on B, B looking up every 2 ms
  l3 io     A's L3 write throughput (1,000 blocks, store to queue empty) and B's read
            throughput (lookups with lease + loads of 100 blocks, two in flight), vs the files
            baseline (the target: >= 85% of it) and, as context, the dd loops
  cap       2 and 4 daemons under a 64 MiB cap: the brick's bytes every 0.25 s, peak, time > 1.1x
  drops     blocks offered faster than the mount takes them: dropped, shed (l3_shedding.py)
  trim      bench/tiers/l3_trim on mount 0: one trim of 2 % of 5,000 block files by the
            write journals against by a scan of the tree (the baseline), files/s and
            filesystem calls per deleted file (not in the default set)

Needs root, /dev/fuse, `ip netns` and GlusterFS (scripts/setup_gluster.sh). Not CI.

    .venv/bin/python bench/tiers/l3_gluster.py [--out DIR] [--quick] [--only dd,files,...,trim]
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import json
import mmap
import os
import shutil
import stat
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
os.environ.setdefault("KVSTRATA_DAEMON", str(REPO / "build" / "daemon" / "server" / "kvstratad"))

from gluster_fixture import GlusterCluster, unavailable_reason  # noqa: E402
from gluster_l3 import (SharedDir, UsageSampler, gl_settings, l3, store_in_batches,  # noqa: E402
                        wait_l3_idle)
from host_child import chain_keys  # noqa: E402
from kvs_testing import short_tmpdir, wait_until  # noqa: E402
from tier_helpers import FILE_BYTES, MIB, Node, blocks, fresh_salt  # noqa: E402

PARALLEL = 4  # = l3.io_threads' default
results: Dict[str, object] = {}


def say(line: str = "") -> None:
    print(line, flush=True)


def pct(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def sh(script: str) -> float:
    """Runs a shell script; returns its wall time in seconds."""
    t = time.monotonic()
    subprocess.run(["bash", "-c", script], check=True)
    return time.monotonic() - t


# ---------------------------------------------------------------------- dd


def bench_dd(vol, files: int) -> None:
    w, r = vol.mounts[0] / "dd", vol.mounts[1] / "dd"
    w.mkdir()
    secs = sh(f"dd if=/dev/zero of={w}/big bs=1M count=256 conv=fdatasync status=none")
    big_w = 256 / secs
    secs = sh(f"dd if={r}/big of=/dev/null bs=1M status=none")
    big_r = 256 / secs
    (w / "big").unlink()
    per = files // PARALLEL
    loops = " & ".join(
        f"(for i in $(seq {per}); do dd if=/dev/zero of={w}/p{j}-$i bs={FILE_BYTES} count=1 "
        f"conv=fdatasync status=none; done)" for j in range(PARALLEL)) + " & wait"
    secs = sh(loops)
    small_w = per * PARALLEL / secs
    loops = " & ".join(
        f"(for i in $(seq {per}); do dd if={r}/p{j}-$i of=/dev/null bs={FILE_BYTES} "
        f"status=none; done)" for j in range(PARALLEL)) + " & wait"
    secs = sh(loops)
    small_r = per * PARALLEL / secs
    # The cost of one dd process with no I/O (subtracted from nothing; context for the above).
    secs = sh(f"for i in $(seq {per}); do dd if=/dev/zero of=/dev/null bs={FILE_BYTES} "
              "count=1 status=none; done")
    spawn_ms = secs / per * 1000
    shutil.rmtree(w)
    mb = FILE_BYTES / MIB
    results["dd"] = dict(big_write_mib_s=big_w, big_read_mib_s=big_r, files_write_per_s=small_w,
                         files_read_per_s=small_r, files_write_mib_s=small_w * mb,
                         files_read_mib_s=small_r * mb, dd_spawn_ms=spawn_ms)
    say(f"dd: 256 MiB file: write {big_w:.0f} MiB/s (conv=fdatasync), read {big_r:.0f} MiB/s "
        "(other mount)")
    say(f"dd: {per * PARALLEL} files of {FILE_BYTES} B, {PARALLEL} parallel loops: write "
        f"{small_w:.0f} files/s = {small_w * mb:.1f} MiB/s (fdatasync each), read "
        f"{small_r:.0f} files/s = {small_r * mb:.1f} MiB/s (other mount); one dd process "
        f"without I/O: {spawn_ms:.1f} ms")


# ---------------------------------------------------------------------- files (the baseline)

HEADER_BYTES = 4096  # kBlockHeaderBytes (daemon/tiers/block_file_format.h); the payload follows
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC  # OpenTemp's kFlags


def _make_dirs(d: str) -> None:
    """block_file_io.cc MakeDirectories: mkdir(0755) of every prefix of `d` (EEXIST is fine),
    then a stat of `d`."""
    for pos in range(1, len(d) + 1):
        if pos != len(d) and d[pos] != "/":
            continue
        try:
            os.mkdir(d[:pos], 0o755)
        except FileExistsError:
            pass
    os.stat(d)


def _open_temp(tmp: str) -> tuple:
    """block_file_io.cc OpenTemp: O_DIRECT first; on EINVAL unlink and open buffered.
    Returns (fd, direct)."""
    try:
        return os.open(tmp, _TMP_FLAGS | os.O_DIRECT, 0o644), True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    try:
        os.unlink(tmp)  # Some filesystems create the file before refusing O_DIRECT.
    except OSError:
        pass
    return os.open(tmp, _TMP_FLAGS, 0o644), False


def _write_block_file(path: str, iov: list) -> bool:
    """block_file_io.cc WriteBlockFile with try_direct_io and FsyncPolicy::kFile (l3.fsync =
    "file"); `iov` = [header page, payload], both page-aligned. Returns whether O_DIRECT."""
    tmp = f"{path}.tmp.{os.getpid()}.{int.from_bytes(os.getrandom(8), 'little'):016x}"
    try:
        fd, direct = _open_temp(tmp)
    except OSError as e:  # Directories are made when missing, not checked on every write.
        _make_dirs(path.rpartition("/")[0])
        if e.errno != errno.ENOENT:
            raise
        fd, direct = _open_temp(tmp)
    done = False
    try:
        while True:  # internal::WriteVecFullyAt: one pwritev of header page + payload
            try:
                n = os.pwritev(fd, iov, 0)
                break
            except OSError as e:
                if e.errno != errno.EINVAL or not direct:
                    raise
                # FallBackToBuffered: clear O_DIRECT on the descriptor, go on buffered.
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                direct = False
        if n != FILE_BYTES:
            raise OSError(errno.EIO, f"short pwritev of {tmp}: {n} of {FILE_BYTES} bytes")
        os.fdatasync(fd)  # FsyncPolicy::kFile: the temp file, before the rename
        os.close(fd)
        fd = -1
        os.rename(tmp, path)  # kFile: no fsync of the directory after it (kFileAndDir's)
        done = True
    finally:
        if fd >= 0:
            os.close(fd)
        if not done:
            try:
                os.unlink(tmp)  # TempFileGuard
            except OSError:
                pass
    return direct


def _read_block_file(path: str, iov: list) -> bool:
    """block_file_read.cc ReadBlockFileInto into a page-aligned destination (an L1 slot):
    ReadWholeDirect's open(O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK), fstat, one preadv
    of header page + payload, close. Where O_DIRECT is refused, the header-first path,
    buffered (open, fstat, pread of the header, pread of the payload, close; the daemon also
    tries an O_DIRECT re-open through /proc/self/fd there). Skipped, as CPU only: the header
    and XXH3 payload checksum checks. Returns whether O_DIRECT."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ESTALE):
            raise
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            n = -1
            if stat.S_ISREG(st.st_mode) and st.st_size == FILE_BYTES:
                try:
                    n = os.preadv(fd, iov, 0)
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
        finally:
            os.close(fd)
        if n == FILE_BYTES:
            return True
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        os.fstat(fd)
        n = os.preadv(fd, iov[:1], 0) + os.preadv(fd, iov[1:], HEADER_BYTES)
    finally:
        os.close(fd)
    if n != FILE_BYTES:
        raise OSError(errno.EIO, f"short read of {path}: {n} of {FILE_BYTES} bytes")
    return False


def _in_threads(fn, root: Path, shares: List[List[str]], iovs: List[list]) -> tuple:
    """fn(str(root / name), iovs[j]) for every name of shares[j] on thread j, all threads
    at once. Returns (seconds from the first start to the last join, files done by O_DIRECT)."""
    direct = [0] * len(shares)
    errors: List[Exception] = []

    def work(j: int) -> None:
        try:
            for name in shares[j]:
                direct[j] += fn(f"{root}/{name}", iovs[j])
        except Exception as e:  # re-raised below, after every thread is joined
            errors.append(e)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(len(shares))]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    secs = time.monotonic() - t
    if errors:
        raise errors[0]
    return secs, sum(direct)


def bench_files(vol, files: int) -> None:
    """The baseline the daemon's L3 is held to: per block file the syscalls the daemon makes,
    with no process per file. PARALLEL threads (= l3.io_threads' default), each with its
    share of `files` files of FILE_BYTES, write them through mount 0 exactly as
    FileTier::Write -> BlockFileSystem::WriteBlock -> WriteBlockFile (block_file_io.cc) does
    with the default l3.fsync = "file" (_write_block_file: open `<path>.tmp.<pid>.<random>`
    O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC|O_DIRECT, one pwritev of the header page and the
    payload from page-aligned memory, fdatasync, close, rename over `<path>`), into the
    BlockFilePath fan-out `<root>/<fingerprint>/<xx>/<yy>/<hex key>.kv` (block_path.cc; xx
    and yy from a hash of the key, blake2b standing in for XXH3-64), whose directories are
    made on the first ENOENT as WriteBlockFile does (MakeDirectories, then the open again).
    Timed from the first thread's start to the last one's join -> files/s, MiB/s. Then the
    same threads read every file back through mount 1 exactly as FileTier::Read ->
    ReadBlock -> ReadBlockFileInto (block_file_read.cc ReadWholeDirect) does into an L1
    slot (_read_block_file: open O_RDONLY|O_CLOEXEC|O_DIRECT|O_NONBLOCK, fstat, one preadv,
    close) -> files/s.

    Python threads release the GIL in every one of these syscalls, and the Python work
    between them is microseconds against the milliseconds a syscall on a FUSE mount takes,
    so this stands in fairly for the same loop in C. Not mirrored, being the daemon's own
    cost rather than the filesystem's: its queueing and RPCs, the CPU work of the header
    and the XXH3 checksums, the one-time namespace.json (its directory is made here before
    the clock starts), the shared usage ledger's occasional update, and a lookup's stat of
    the files before they are read."""
    fp = hashlib.md5(b"bench-files").hexdigest()  # a namespace fingerprint: 32 lowercase hex
    roots = [m / "files" / fp for m in vol.mounts[:2]]
    _make_dirs(str(roots[0]))
    assert wait_until(roots[1].is_dir, 10.0), f"{roots[1]} not visible through mount 1"
    names = []
    for i in range(files):
        key = hashlib.blake2b(b"bench-files-%d" % i, digest_size=16).digest()
        h = hashlib.blake2b(key, digest_size=8).digest()  # XXH3-64's top two bytes' stand-in
        names.append(f"{h[0]:02x}/{h[1]:02x}/{key.hex()}.kv")
    shares = [names[j::PARALLEL] for j in range(PARALLEL)]
    n = sum(len(s) for s in shares)
    # One page-aligned buffer per thread (mmap: O_DIRECT needs aligned memory, as an L1 slot
    # is): a header page with the magic, then the payload.
    bufs = [mmap.mmap(-1, FILE_BYTES) for _ in range(PARALLEL)]
    for buf in bufs:
        buf[:8] = b"KVSTRATA"
        buf[HEADER_BYTES:] = os.urandom(FILE_BYTES - HEADER_BYTES)
    views = [memoryview(buf) for buf in bufs]
    iovs = [[v[:HEADER_BYTES], v[HEADER_BYTES:]] for v in views]
    w_secs, w_direct = _in_threads(_write_block_file, roots[0], shares, iovs)
    for buf in bufs:
        buf[:HEADER_BYTES] = bytes(HEADER_BYTES)  # so that the check below sees the reads
    r_secs, r_direct = _in_threads(_read_block_file, roots[1], shares, iovs)
    assert all(bytes(v[0][:8]) == b"KVSTRATA" for v in iovs), "read back a foreign file"
    for v in [v for iov in iovs for v in iov] + views:
        v.release()
    for buf in bufs:
        buf.close()
    shutil.rmtree(vol.mounts[0] / "files")
    mb = FILE_BYTES / MIB
    w, r = n / w_secs, n / r_secs
    results["files"] = dict(files=n, threads=PARALLEL, file_bytes=FILE_BYTES,
                            write_seconds=w_secs, write_per_s=w, write_mib_s=w * mb,
                            write_direct=w_direct, read_seconds=r_secs, read_per_s=r,
                            read_mib_s=r * mb, read_direct=r_direct)
    say(f"files: {n} files of {FILE_BYTES} B, {PARALLEL} threads, the daemon's syscalls: write "
        f"{w:.0f} files/s = {w * mb:.1f} MiB/s (temp file, pwritev, fdatasync, rename; "
        f"O_DIRECT {w_direct} of {n}), read {r:.0f} files/s = {r * mb:.1f} MiB/s (other "
        f"mount; open, fstat, preadv; O_DIRECT {r_direct} of {n})")


# ---------------------------------------------------------------------- sharing and I/O


def bench_sharing(vol, work: Path, n: int) -> None:
    shared = SharedDir(vol, "sharing")
    salt, keys, data = fresh_salt("bench-share"), chain_keys("bench-share", n), blocks(60, n)
    a = Node(work, gl_settings(shared.roots[0]), salt, "a")
    try:
        t = time.monotonic()
        store_in_batches(a, keys, data)
        assert wait_l3_idle(a, 600)
        secs = time.monotonic() - t
        st = l3(a)
        wrote = st.written_blocks
        results["l3_write"] = dict(blocks=wrote, seconds=secs, files_per_s=wrote / secs,
                                   mib_s=wrote * FILE_BYTES / MIB / secs,
                                   dropped=st.dropped_writes, errors=st.write_errors)
        say(f"l3 write: A wrote {wrote} of {n} blocks in {secs:.2f} s = {wrote / secs:.0f} "
            f"files/s = {wrote * FILE_BYTES / MIB / secs:.1f} MiB/s (store to queue empty; "
            f"dropped {st.dropped_writes}, errors {st.write_errors})")
    finally:
        a.close()

    # The baseline first: a daemon that does not follow the journals (probes only).
    for name, extra in (("b0", {"l3.follow_interval_ms": "0"}), ("b", {})):
        b = Node(work, gl_settings(shared.roots[1], **extra), salt, name)
        t = time.monotonic()
        first = b.session.lookup(b.ns, keys).hit_blocks
        first_ms = (time.monotonic() - t) * 1000
        tries, hits, t = 1, first, time.monotonic()
        while hits < n and tries < 1000:
            hits = b.session.lookup(b.ns, keys).hit_blocks
            tries += 1
        all_s = time.monotonic() - t
        results["first_lookup" + ("_probes_only" if extra else "")] = dict(
            hits=first, of=n, ms=first_ms, lookups_to_all=tries, seconds_to_all=all_s, final=hits)
        after = (f"all {n} after {tries} back-to-back lookups ({all_s:.2f} s more)"
                 if hits == n else f"only {hits} after {tries} lookups ({all_s:.2f} s)")
        say(f"sharing: B's first lookup of A's {n} blocks "
            f"({'probes only' if extra else 'following the journals'}): {first} hit "
            f"({100 * first / n:.1f}%) in {first_ms:.1f} ms; {after}")
        if extra:
            b.close()
    try:  # B (following) goes on: read throughput, every block promoted from L3 and loaded.
        t, loaded = time.monotonic(), 0
        hit = b.session.lookup(b.ns, keys[:100], lease=True)
        for i in range(0, n, 100):  # two requests in flight: the next one's lookup first
            after = b.session.lookup(b.ns, keys[:i + 200], lease=True) if i + 100 < n else None
            got = b.session.load(b.ns, keys[i:i + 100], lease_id=hit.lease_id)
            loaded, hit = loaded + sum(bool(x) for x in got), after
        secs = time.monotonic() - t
        results["l3_read"] = dict(blocks=loaded, seconds=secs, files_per_s=loaded / secs,
                                  mib_s=loaded * FILE_BYTES / MIB / secs)
        say(f"l3 read: B loaded {loaded} of {n} blocks from L3 in {secs:.2f} s = "
            f"{loaded / secs:.0f} files/s = {loaded * FILE_BYTES / MIB / secs:.1f} MiB/s "
            "(lookup with lease + load, 100 at a time, the next 100's lookup before each load)")
    finally:
        b.close()

    c = Node(work, gl_settings(shared.roots[1]), salt, "c")
    try:
        chains = [keys[i:i + 32] for i in range(0, n - 31, 32)]
        cold, cold_hits = [], 0
        for ch in chains:
            t = time.monotonic()
            cold_hits += c.session.lookup(c.ns, ch).hit_blocks
            cold.append((time.monotonic() - t) * 1000)
        for ch in chains:  # until the index knows them all
            while c.session.lookup(c.ns, ch).hit_blocks < 32:
                pass
        warm = []
        for _ in range(10):
            for ch in chains:
                t = time.monotonic()
                c.session.lookup(c.ns, ch)
                warm.append((time.monotonic() - t) * 1000)
        total = 32 * len(chains)
        results["chains32"] = dict(chains=len(chains), first_hits=cold_hits, of=total,
                                   cold_p50_ms=pct(cold, 50), cold_p99_ms=pct(cold, 99),
                                   warm_p50_ms=pct(warm, 50), warm_p99_ms=pct(warm, 99))
        say(f"32-key chains: first lookups hit {cold_hits} of {total} "
            f"({100 * cold_hits / total:.1f}%); cold p50 {pct(cold, 50):.2f} ms p99 "
            f"{pct(cold, 99):.2f} ms ({len(cold)} lookups); warm (index knows them) p50 "
            f"{pct(warm, 50):.3f} ms p99 {pct(warm, 99):.3f} ms ({len(warm)} lookups)")
    finally:
        c.close()


def bench_store_to_hit(vol, work: Path, trials: int) -> None:
    shared = SharedDir(vol, "latency")
    salt = fresh_salt("bench-latency")
    a = Node(work, gl_settings(shared.roots[0]), salt, "a")
    b = Node(work, gl_settings(shared.roots[1]), salt, "b")
    try:
        lat = []
        for i in range(trials):
            key, data = chain_keys(f"lat-{i}", 1), blocks(70 + i, 1)
            a.session.store(a.ns, key, data)
            t = time.monotonic()
            while b.session.lookup(b.ns, key).hit_blocks == 0:
                if time.monotonic() - t > 30:
                    break
                time.sleep(0.002)
            lat.append((time.monotonic() - t) * 1000)
        results["store_to_hit"] = dict(trials=trials, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
                                       min_ms=min(lat), max_ms=max(lat), all_ms=lat)
        say(f"store on A -> hit on B (B looking up every 2 ms): p50 {pct(lat, 50):.0f} ms, p99 "
            f"{pct(lat, 99):.0f} ms, min {min(lat):.0f}, max {max(lat):.0f} ({trials} trials)")
    finally:
        b.close()
        a.close()


# ---------------------------------------------------------------------- cap and drops


def bench_cap(vol, work: Path, writers: int, per_writer: int, cap: int, tag: str = "") -> None:
    shared = SharedDir(vol, f"cap{writers}{tag}")
    salt = fresh_salt(f"bench-cap{writers}{tag}")
    nodes = [Node(work, gl_settings(shared.roots[i % 2], **{"l3.capacity": f"{cap >> 20}MiB"}),
                  salt, f"w{i}") for i in range(writers)]
    try:
        with UsageSampler(shared) as sampler:
            threads = [threading.Thread(target=store_in_batches, args=(
                n, chain_keys(f"cap{writers}-{i}", per_writer), blocks(80 + i, per_writer)))
                for i, n in enumerate(nodes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for n in nodes:
                wait_l3_idle(n, 600)
            done = time.monotonic() - sampler.t0
            deadline = time.monotonic() + 120
            while shared.brick_bytes()[0] > cap and time.monotonic() < deadline:
                time.sleep(0.25)
            settled = time.monotonic() - sampler.t0
            time.sleep(2)
        infos = [l3(n) for n in nodes]
        samples = sampler.samples
        at, peak = sampler.peak()
        over = sampler.over(int(cap * 1.1))
        written = sum(t.written_blocks for t in infos)
        dropped = sum(t.dropped_writes for t in infos)
        offered = writers * per_writer
        results[f"cap_{writers}"] = dict(
            cap=cap, writers=writers, offered=offered, written=written, dropped=dropped,
            evictions=sum(t.evictions for t in infos), peak_x=peak / cap, peak_at_s=at,
            samples=len(samples), over_1_1x=len(over),
            over_from_s=over[0][0] if over else None, over_to_s=over[-1][0] if over else None,
            writes_done_s=done, under_cap_s=settled,
            series=[(round(s, 2), b, f) for s, b, f in samples])
        say(f"cap {cap >> 20} MiB, {writers} writers x {per_writer} blocks "
            f"({offered * FILE_BYTES / cap:.2f}x the cap offered): peak {peak / cap:.2f}x at "
            f"{at:.1f} s; {len(over)} of {len(samples)} samples over 1.1x"
            + (f" ({over[0][0]:.1f}-{over[-1][0]:.1f} s)" if over else "")
            + f"; writes done {done:.1f} s, back under the cap {settled:.1f} s; written "
            f"{written}, dropped {dropped}, evicted {sum(t.evictions for t in infos)}")
        say("  t(s)  x cap  files: " + "  ".join(
            f"{s:.0f}:{b / cap:.2f}" for s, b, _ in samples[::max(1, len(samples) // 30)]))
    finally:
        for n in nodes:
            n.close()


def bench_drops(vol, work: Path, n: int) -> None:
    shared = SharedDir(vol, "drops")
    salt, keys = fresh_salt("bench-drops"), chain_keys("bench-drops", n)
    a = Node(work, gl_settings(shared.roots[0], **{"l1.capacity": "512MiB"}), salt, "a")
    try:
        t = time.monotonic()
        for i in range(0, n, 100):
            a.session.store(a.ns, keys[i:i + 100], blocks(90 + i, min(100, n - i)))
        offer_s = time.monotonic() - t
        wait_l3_idle(a, 600)
        secs = time.monotonic() - t
        st = l3(a)
        stats = {c.name: c.value for c in a.client.get_stats().counters}
        shed = st.shed_writes + st.deferred_writes  # backlog_policy "defer": never reused
        results["drops"] = dict(offered=n, offer_seconds=offer_s, written=st.written_blocks,
                                dropped=st.dropped_writes, shed_or_waiting=shed, seconds=secs,
                                errors=st.write_errors, drop_rate=(st.dropped_writes + shed) / n,
                                dropped_stores_counter=stats.get("dropped_stores"))
        say(f"drops: {n} blocks offered in {offer_s:.2f} s ({n / offer_s:.0f}/s); L3 wrote "
            f"{st.written_blocks} in {secs:.1f} s ({st.written_blocks / secs:.0f} files/s), "
            f"dropped {st.dropped_writes}, shed or waiting for a hit {shed} (not written: "
            f"{100 * (st.dropped_writes + shed) / n:.1f}%), errors {st.write_errors}")
    finally:
        a.close()


def bench_trim(vol, files: int) -> None:
    binary = os.environ.get("KVSTRATA_L3_TRIM", str(REPO / "build" / "bench" / "tiers" / "l3_trim"))
    out = vol.mounts[0] / "l3_trim.json"
    run = subprocess.run([binary, f"--files={files}", "--evict-pct=2", f"--dir={vol.mounts[0]}",
                          f"--out={out}"], capture_output=True, text=True, timeout=3600)
    say(run.stdout.rstrip())
    if run.returncode != 0:
        say(f"l3_trim failed ({run.returncode}): {run.stderr.strip()[-500:]}")
        return
    results["trim"] = json.loads(out.read_text())
    out.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="directory for results.json")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--only", default="dd,files,sharing,latency,cap,drops",
                    help="comma-separated parts to run (default: all; the summary needs all)")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        say(f"l3_gluster: cannot run here: {reason}")
        return 2
    q, only = args.quick, set(args.only.split(","))
    say(f"machine: {os.cpu_count()} CPUs, glusterfs "
        f"{subprocess.run(['glusterfs', '--version'], capture_output=True, text=True).stdout.split()[1]}"
        f", kvstratad {os.environ['KVSTRATA_DAEMON']}")
    say("commit: " + subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip())
    work = short_tmpdir()
    try:
        with GlusterCluster(short_tmpdir()) as gl:
            vol = gl.volume("bench", mounts=2)
            if "dd" in only:
                bench_dd(vol, 200 if q else 1000)
            if "files" in only:
                bench_files(vol, 200 if q else 1000)
            if "sharing" in only:
                bench_sharing(vol, work, 200 if q else 1000)
            if "latency" in only:
                bench_store_to_hit(vol, work, 5 if q else 20)
            if "cap" in only:
                for writers in (2, 4):
                    bench_cap(vol, work, writers, 200 if q else 1000, 64 * MIB)
            if "drops" in only:
                bench_drops(vol, work, 1000 if q else 4000)
            if "trim" in only:
                bench_trim(vol, 500 if q else 5000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if only != set(ap.get_default("only").split(",")):
        return write_results(args.out)
    base = results["files"]
    summary = {
        "first_lookup_hit_rate": results["first_lookup"]["hits"] / results["first_lookup"]["of"],
        "cap_peak_x": {w: results[f"cap_{w}"]["peak_x"] for w in (2, 4)},
        "l3_write_vs_files": results["l3_write"]["files_per_s"] / base["write_per_s"],
        "l3_read_vs_files": results["l3_read"]["files_per_s"] / base["read_per_s"],
        "drop_rate": results["drops"]["drop_rate"],
    }
    results["summary"] = summary
    say()
    say(f"targets: first lookup 100%: {100 * summary['first_lookup_hit_rate']:.1f}%; cap <= 1.1x "
        f"at every sample: peak {summary['cap_peak_x'][2]:.2f}x (2 writers), "
        f"{summary['cap_peak_x'][4]:.2f}x (4 writers); L3 >= 85% of the files baseline "
        f"(the daemon's syscalls, {PARALLEL} threads): write "
        f"{100 * summary['l3_write_vs_files']:.0f}%, read "
        f"{100 * summary['l3_read_vs_files']:.0f}%; drop rate "
        f"{100 * summary['drop_rate']:.1f}%")
    dd, l3w, l3r = results["dd"], results["l3_write"], results["l3_read"]
    say(f"context, not a target: L3 vs the {PARALLEL} dd loops (a process per file): write "
        f"{100 * l3w['files_per_s'] / dd['files_write_per_s']:.0f}%, read "
        f"{100 * l3r['files_per_s'] / dd['files_read_per_s']:.0f}%; vs one 256 MiB file's dd: "
        f"write {100 * l3w['mib_s'] / dd['big_write_mib_s']:.0f}%, read "
        f"{100 * l3r['mib_s'] / dd['big_read_mib_s']:.0f}%")
    return write_results(args.out)


def write_results(out) -> int:
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
