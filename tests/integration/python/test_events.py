"""KV events on a real kvstratad: a ZMQ subscriber decoding like llm-d's indexer (both
encodings), dense sequence numbers, replay through the ROUTER socket, one BlockRemoved per
BlockStored through eviction (small L1) and clear, AllBlocksCleared only when everything
is gone, PollEvents for connectors, and bad input."""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import grpc
import numpy as np
import pytest
import zmq

import kvstrata
from kv_events_decoder import Message, decode_message, replay
from kvs_testing import Daemon, assert_code, daemon_binary, mha_spec, short_tmpdir, wait_until

BLOCK = 64 << 10
MODEL = "kvstrata-test/events"
_salts = itertools.count()


def spec(salt: str = "") -> dict:
    return mha_spec(kv_layout="opaque", dtype="uint8", opaque_block_bytes=BLOCK, model=MODEL,
                    salt=salt or f"events-{os.getpid()}-{next(_salts)}")


def keys_for(seed: int, count: int) -> List[bytes]:
    """32-byte keys like vLLM's sha256 block hashes."""
    return [seed.to_bytes(4, "big") + bytes(20) + i.to_bytes(8, "big") for i in range(count)]


def external(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


class Subscriber:
    """SUB on the daemon's PUB endpoint plus a DEALER for replay requests."""

    def __init__(self, pub: str, replay: str) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        monitor = self.sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sub.connect(pub)
        # ZMQ's slow joiner: wait for the connection, then for the subscription to travel.
        assert monitor.poll(10000), "the SUB socket did not connect to kvstratad's PUB"
        self.sub.disable_monitor()
        monitor.close(linger=0)
        time.sleep(0.05)
        self.replay_endpoint = replay
        self.received: List[Message] = []

    def drain(self, timeout_s: float = 0.3) -> List[Message]:
        while self.sub.poll(int(timeout_s * 1000)):
            self.received.append(decode_message(self.sub.recv_multipart()))
        return self.received

    def replay(self, start_seq: int) -> List[Message]:
        return replay(self.ctx, self.replay_endpoint, start_seq)

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()


def events_daemon(workdir: Path, encoding: str, capacity: str = "8MiB") -> Daemon:
    return Daemon(workdir, {"l1.capacity": capacity, "l1.slab_size": "1MiB",
                            "events.enabled": "true",
                            "events.endpoint": f"ipc://{workdir}/ev.pub",
                            "events.replay_endpoint": f"ipc://{workdir}/ev.replay",
                            "events.pod_id": "pytest-node", "events.encoding": encoding,
                            "events.data_parallel_rank": "3"})


@pytest.fixture(params=["array", "map"])
def ev(request) -> Iterator[Tuple[Daemon, Subscriber]]:
    workdir = short_tmpdir()
    d = events_daemon(workdir, request.param).start()
    sub = Subscriber(f"ipc://{workdir}/ev.pub", f"ipc://{workdir}/ev.replay")
    try:
        yield d, sub
        assert d.running(), d.log_tail()
        assert d.stop() == 0, d.log_tail()
    finally:
        sub.close()
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def store(session: kvstrata.Session, ns, keys: List[bytes]) -> None:
    session.store(ns, keys, [np.full(BLOCK, i % 251, np.uint8) for i in range(len(keys))])


def all_batches(sub: Subscriber, expect_min: int) -> List[Message]:
    """Every batch from seq 0 (replayed), checked against what the SUB saw live: the live
    stream has every sequence number, in order, and the same payload bytes."""
    assert wait_until(lambda: len(sub.drain(0.1)) >= 1, 10), "no event reached the subscriber"
    replayed = sub.replay(0)
    assert [m.seq for m in replayed] == list(range(len(replayed))), "sequence must be dense from 0"
    assert len(replayed) >= expect_min
    assert wait_until(lambda: len(sub.drain(0.1)) >= len(replayed), 10)
    assert [m.seq for m in sub.received][:len(replayed)] == list(range(len(replayed))), (
        "the live stream skipped or reordered a sequence number")
    by_seq = {m.seq: m for m in replayed}
    for m in sub.received:  # live and replayed copies are byte-identical
        if m.seq in by_seq:
            assert by_seq[m.seq].payload == m.payload
        assert m.pod == "pytest-node" and m.model == MODEL
        assert m.dp_rank == 3
    assert all(m.topic == f"kv@pytest-node@{MODEL}" for m in replayed), "replay carries the topic"
    return replayed


def test_store_evict_clear_pairing(ev) -> None:
    daemon, sub = ev
    with daemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="events") as s:
        ns = s.register_namespace(**spec())
        keys = keys_for(1, 200)  # 200 x 64 KiB into an 8 MiB L1: most are evicted
        for i in range(0, len(keys), 20):
            store(s, ns, keys[i:i + 20])
        time.sleep(0.2)
        before_clear = all_batches(sub, 1)
        evicted = sum(len(e.block_hashes) for m in before_clear for e in m.events
                      if e.tag == "BlockRemoved")
        list(c.clear())
        time.sleep(0.2)
        sub.drain()
        batches = all_batches(sub, 2)

    stored, removed = Counter(), Counter()
    order: Dict[int, List[str]] = {}
    cleared_at = []
    flat = [e for m in batches for e in m.events]
    for i, e in enumerate(flat):
        if e.tag == "AllBlocksCleared":
            cleared_at.append(i)
            continue
        assert e.medium == "CPU" and e.locality == "LOCAL" and e.group_idx is None
        for h in e.block_hashes:
            (stored if e.tag == "BlockStored" else removed)[h] += 1
            order.setdefault(h, []).append(e.tag)
        if e.tag == "BlockStored":
            assert e.block_size == 16 and e.parent_block_hash is None and e.token_ids == []
            assert e.lora_id is None and e.lora_name is None
    want = {external(k) for k in keys}
    assert set(stored) == want, "one BlockStored per stored key, hashes as vLLM's ints"
    assert all(n == 1 for n in stored.values())
    assert removed == stored, "exactly one BlockRemoved per BlockStored"
    assert all(o == ["BlockStored", "BlockRemoved"] for o in order.values())
    assert cleared_at == [len(flat) - 1], "AllBlocksCleared once, after the last removal"
    assert evicted > 0, "the small L1 must have evicted before the clear"


def test_clear_of_one_namespace_is_not_all_cleared(ev) -> None:
    daemon, sub = ev
    with daemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="events") as s:
        a, b = s.register_namespace(**spec()), s.register_namespace(**spec())
        store(s, a, keys_for(2, 4))
        store(s, b, keys_for(3, 4))
        list(c.clear(fingerprint=a.fingerprint))
        time.sleep(0.2)
        batches = all_batches(sub, 1)
        tags = [e.tag for m in batches for e in m.events]
        assert "AllBlocksCleared" not in tags, "namespace b still holds blocks"
        list(c.clear())
        time.sleep(0.2)
        sub.drain()
        tags = [e.tag for m in sub.replay(0) for e in m.events]
        assert tags.count("AllBlocksCleared") == 1 and tags[-1] == "AllBlocksCleared"


def test_replay_from_the_middle_and_past_the_end(ev) -> None:
    daemon, sub = ev
    with daemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="events") as s:
        ns = s.register_namespace(**spec())
        for i in range(3):
            store(s, ns, keys_for(10 + i, 2))
            time.sleep(0.05)  # separate flushes: separate batches
        time.sleep(0.1)
        every = all_batches(sub, 3)
        tail = sub.replay(1)
        assert [m.seq for m in tail] == [m.seq for m in every[1:]]
        assert sub.replay(len(every) + 5) == []


def test_poll_events_for_connectors(ev) -> None:
    daemon, _ = ev
    with daemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="conn") as s:
        a, b = s.register_namespace(**spec()), s.register_namespace(**spec())
        store(s, a, keys_for(20, 3))
        store(s, b, keys_for(21, 2))
        assert wait_until(lambda: c.poll_events(session_id=s.session_id).next_seq > 0, 5)
        time.sleep(0.1)
        got = s.poll_events(a)
        hashes = [h for batch in got for e in batch.events for h in e.block_hashes]
        assert hashes == [external(k) for k in keys_for(20, 3)]
        event = got[0].events[0]
        assert event.kind == kvstrata.pb.KvEvent.KIND_BLOCK_STORED
        assert event.medium == "CPU" and event.block_size == 16
        assert event.namespace_id == a.namespace_id and got[0].model == MODEL
        assert not event.HasField("parent_block_hash")
        assert s.poll_events(a) == [], "the cursor moved past what was taken"
        everything = c.poll_events(session_id=s.session_id, from_seq=0)
        assert sum(len(e.block_hashes) for bt in everything.batches for e in bt.events) == 5
        assert not everything.truncated and everything.dropped_events == 0


def test_poll_events_bad_input(ev) -> None:
    daemon, _ = ev
    with daemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="bad") as s:
        with pytest.raises(kvstrata.KVStrataError) as e:
            c.poll_events(session_id=s.session_id, max_batches=100001)
        assert_code(e, grpc.StatusCode.INVALID_ARGUMENT)
        with pytest.raises(kvstrata.KVStrataError) as e:
            c.poll_events(session_id=s.session_id, namespace_id=999)
        assert_code(e, grpc.StatusCode.NOT_FOUND)
        with pytest.raises(kvstrata.KVStrataError) as e:
            c.poll_events(session_id=12345678)
        assert_code(e, grpc.StatusCode.NOT_FOUND)
        ahead = c.poll_events(session_id=s.session_id, from_seq=10**9)
        assert ahead.truncated and ahead.next_seq < 10**9


def test_poll_events_when_disabled(client: kvstrata.Client) -> None:
    with kvstrata.Session(client, client_name="off") as s:
        with pytest.raises(kvstrata.KVStrataError) as e:
            s.poll_events()
        assert_code(e, grpc.StatusCode.FAILED_PRECONDITION)


@pytest.mark.parametrize("setting, message", [
    ("events.encoding=json", "events.encoding"),
    ("events.pod_id=a@b", "events.pod_id"),
    ("events.flush_interval_ms=0", "events.flush_interval_ms"),
])
def test_bad_events_config_is_rejected(setting: str, message: str) -> None:
    proc = subprocess.run([str(daemon_binary()), "--check_config", f"--set={setting}"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_unusable_endpoint_stops_the_daemon(tmp_path: Path) -> None:
    workdir = short_tmpdir()
    try:
        proc = subprocess.run(
            [str(daemon_binary()), f"--socket={workdir}/k.sock", "--metrics_address=off",
             "--set=l1.capacity=8MiB,l1.slab_size=1MiB,l2.enabled=false,events.enabled=true,"
             "events.endpoint=tcp://*:notaport"], capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0
        assert "notaport" in proc.stdout + proc.stderr
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_lower_tier_events_pair_and_clear_last() -> None:
    """Blocks written down to L2 are announced with medium STORAGE (as vLLM's CPU ones are with
    CPU); each leaves with exactly one BlockRemoved STORAGE; AllBlocksCleared comes only when
    every tier is empty."""
    workdir = short_tmpdir()
    d = Daemon(workdir, {"l2.enabled": "true", "l2.path": str(workdir / "l2"),
                         "events.enabled": "true", "events.endpoint": ""}).start()
    try:
        with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="events-l2") as s:
            ns = s.register_namespace(**spec())
            keys = keys_for(30, 6)
            store(s, ns, keys)
            want = {external(k) for k in keys}

            def events():
                return [e for b in s.poll_events(ns) for e in b.events]
            seen: List = []
            assert wait_until(lambda: seen.extend(events()) or sum(
                len(e.block_hashes) for e in seen if e.medium == "STORAGE") >= 6, 10), seen
            by = Counter((e.kind, e.medium, h) for e in seen for h in e.block_hashes)
            stored_kind = kvstrata.pb.KvEvent.KIND_BLOCK_STORED
            removed_kind = kvstrata.pb.KvEvent.KIND_BLOCK_REMOVED
            assert {h for (k, m, h) in by if k == stored_kind and m == "CPU"} == want
            assert {h for (k, m, h) in by if k == stored_kind and m == "STORAGE"} == want
            assert all(n == 1 for n in by.values())
            # L1 cleared: CPU removals, but the blocks are still on disk: no AllBlocksCleared.
            list(c.clear(tier=kvstrata.pb.TIER_L1_DRAM))
            assert wait_until(lambda: seen.extend(events()) or sum(
                len(e.block_hashes) for e in seen
                if e.kind == removed_kind and e.medium == "CPU") >= 6, 10)
            assert not any(e.kind == kvstrata.pb.KvEvent.KIND_ALL_BLOCKS_CLEARED for e in seen)
            # One file evicted by hand, then everything: STORAGE removals, then AllBlocksCleared.
            c.evict(fingerprint=ns.fingerprint, keys=[keys[0]], tier=kvstrata.pb.TIER_L2_LOCAL)
            list(c.clear())
            assert wait_until(lambda: seen.extend(events()) or any(
                e.kind == kvstrata.pb.KvEvent.KIND_ALL_BLOCKS_CLEARED for e in seen), 10)
            removed_disk = Counter(h for e in seen if e.kind == removed_kind
                                   and e.medium == "STORAGE" for h in e.block_hashes)
            assert set(removed_disk) == want and all(n == 1 for n in removed_disk.values())
            assert seen[-1].kind == kvstrata.pb.KvEvent.KIND_ALL_BLOCKS_CLEARED
        assert d.stop() == 0, d.log_tail()
    finally:
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)
