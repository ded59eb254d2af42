"""kvstratad's ZMQ KV events decoded with the real msgspec structs of the vLLM in this
venv (vllm.distributed.kv_events.KVEventBatch: 0.33, or 0.26 with .vllm026 on PYTHONPATH),
as vLLM's own subscribers decode them: the default encoding ("map") is what vLLM
publishes (re-encoding the decoded batch gives the same msgpack values), every
field holds the daemon's values (medium CPU / STORAGE, locality LOCAL, block_size the
namespace's tokens per block, token-less), and "array" stays selectable."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import msgspec
import numpy as np
import pytest
import zmq

import kvstrata
from kvs_testing import Daemon, mha_spec, short_tmpdir, wait_until
from vllm.distributed import kv_events as vke

BLOCK = 64 << 10
MODEL = "kvstrata-test/wire"


def keys_for(seed: int, count: int) -> List[bytes]:
    return [seed.to_bytes(4, "big") + bytes(20) + i.to_bytes(8, "big") for i in range(count)]


def run(encoding: str | None) -> Tuple[List[Tuple[bytes, bytes]], List[int]]:
    """Stores 6 blocks (L1, written down to L2), clears, and returns every (topic, payload)
    the SUB socket saw and the 6 keys' hashes."""
    workdir: Path = short_tmpdir()
    settings = {"l2.enabled": "true", "l2.path": str(workdir / "l2"),
                "events.enabled": "true", "events.endpoint": f"ipc://{workdir}/ev.pub",
                "events.pod_id": "wire-pod"}
    if encoding is not None:
        settings["events.encoding"] = encoding
    d = Daemon(workdir, settings).start()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    sub.connect(f"ipc://{workdir}/ev.pub")
    try:
        assert monitor.poll(10000), "the SUB socket did not connect"
        time.sleep(0.05)
        got: List[Tuple[bytes, bytes]] = []
        keys = keys_for(7, 6)
        with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="wire") as s:
            ns = s.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                                 opaque_block_bytes=BLOCK, model=MODEL,
                                                 salt="wire"))
            s.store(ns, keys, [np.full(BLOCK, i, np.uint8) for i in range(len(keys))])

            def drain(n_storage: int) -> bool:
                while sub.poll(100):
                    topic, _seq, payload = sub.recv_multipart()
                    got.append((topic, payload))
                return sum(p.count(b"STORAGE") for _, p in got) >= n_storage
            assert wait_until(lambda: drain(1), 10), got
            time.sleep(0.3)  # the L2 write-downs
            list(c.clear())
            assert wait_until(lambda: drain(2) and b"AllBlocksCleared" in b"".join(
                p for _, p in got), 10), got
        assert d.stop() == 0, d.log_tail()
        return got, [int.from_bytes(k[-8:], "big") for k in keys]
    finally:
        monitor.close(linger=0)
        sub.close(linger=0)
        ctx.term()
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def default_run() -> Iterator[Tuple[List[Tuple[bytes, bytes]], List[int]]]:
    yield run(None)


def test_default_encoding_is_what_vllm_publishes(default_run) -> None:
    got, _ = default_run
    decoder = msgspec.msgpack.Decoder(vke.KVEventBatch)
    encoder = msgspec.msgpack.Encoder()
    for topic, payload in got:
        assert topic == f"kv@wire-pod@{MODEL}".encode()
        batch = decoder.decode(payload)  # raises on any field vLLM's structs reject
        assert batch.data_parallel_rank == 0
        # The same values as vLLM's encoding of them (msgspec may pick a wider map header:
        # map16 for 0.33's 16-field BlockStored).
        assert msgspec.msgpack.decode(encoder.encode(batch)) == msgspec.msgpack.decode(payload)


def test_every_field_holds_the_daemons_values(default_run) -> None:
    got, hashes = default_run
    decoder = msgspec.msgpack.Decoder(vke.KVEventBatch)
    events = [e for _, p in got for e in decoder.decode(p).events]
    stored = {}
    removed = {}
    for e in events:
        if isinstance(e, vke.AllBlocksCleared):
            continue
        assert e.medium in (vke.MEDIUM_CPU, "STORAGE"), e
        assert e.locality == "LOCAL" and e.group_idx is None, e
        target = stored if isinstance(e, vke.BlockStored) else removed
        for h in e.block_hashes:
            target[(h, e.medium)] = target.get((h, e.medium), 0) + 1
        if isinstance(e, vke.BlockStored):
            assert e.block_size == 16 and e.token_ids == [] and e.parent_block_hash is None
            assert e.lora_id is None and e.lora_name is None and e.extra_keys is None
            assert e.kv_cache_spec_kind is None
    want = {(h, m) for h in hashes for m in (vke.MEDIUM_CPU, "STORAGE")}
    assert set(stored) == want and all(n == 1 for n in stored.values()), stored
    assert removed == stored, "one BlockRemoved per BlockStored and medium"
    assert isinstance(events[-1], vke.AllBlocksCleared)


def test_array_encoding_stays_selectable() -> None:
    got, hashes = run("array")
    events = [e for _, p in got for e in msgspec.msgpack.decode(p)[1]]
    assert all(isinstance(e, list) for e in events)
    stored = [e for e in events if e[0] == "BlockStored"]
    # [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys,
    #  group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window, locality]
    assert stored and all(len(e) == 13 and e[12] == "LOCAL" for e in stored), stored
    assert {h for e in stored for h in e[1]} == set(hashes)
