"""The node-wide topic (issue 41, item 4): with $NODE_NAME set, as the DaemonSet's downward
API sets it, kvstratad publishes its KV events under "kv@node:<node>@<model>".

The subscriber is set up like llm-d's router in global-socket mode (kvEventsConfig.zmqEndpoint:
its SUB binds, the daemon's PUB connects to it; llm-d-router pkg/kvevents/zmq_subscriber.go).
It parses the topic as llm-d's parseTopic does (split on "@", exactly three parts; the pod-id
part is "node:<node>"), decodes both encodings (kv_events_decoder, as llm-d's vllm_adapter.go),
sees stores, removals and the clear with each tier's medium, and after a reconnect fills the
gap from the replay socket, whose answers carry the same topic (as vLLM 0.26+'s do)."""
from __future__ import annotations

import itertools
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import msgpack
import numpy as np
import pytest
import zmq

import kvstrata
from kv_events_decoder import Message, decode_message, replay
from kvs_testing import Daemon, mha_spec, short_tmpdir, wait_until

BLOCK = 64 << 10
MODEL = "kvstrata-test/node-topic"
NODE = "gpu-node-7"
TOPIC = f"kv@node:{NODE}@{MODEL}"
WARM_UP_MODEL = "kvstrata-test/warm-up"
_salts = itertools.count()


def router_parse_topic(topic: str) -> Tuple[str, str]:
    """llm-d's parseTopic: strings.Split(topic, "@"); three parts give (pod-id, model), any
    other count gives (topic, "")."""
    parts = topic.split("@")
    return (parts[1], parts[2]) if len(parts) == 3 else (topic, "")


def node_of(pod_id: str) -> Optional[str]:
    """The node a "node:<node>" pod-id names; None for a pod's own id."""
    return pod_id[len("node:"):] if pod_id.startswith("node:") else None


def keys_for(seed: int, count: int) -> List[bytes]:
    return [seed.to_bytes(4, "big") + bytes(20) + i.to_bytes(8, "big") for i in range(count)]


def external(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


class RouterSocket:
    """A SUB that binds, as llm-d's global-socket subscriber does; kvstratad connects to it."""

    def __init__(self, ctx: zmq.Context, endpoint: str = "tcp://127.0.0.1:*") -> None:
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.monitor = self.sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sub.bind(endpoint)
        self.endpoint = self.sub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.received: List[Message] = []

    def wait_publisher(self) -> None:
        assert self.monitor.poll(15000), "kvstratad's PUB did not connect to the bound SUB"
        self.sub.disable_monitor()
        self.monitor.close(linger=0)
        time.sleep(0.1)  # the subscription travels to the publisher

    def drain(self, timeout_s: float = 0.3) -> List[Message]:
        while self.sub.poll(int(timeout_s * 1000)):
            frames = self.sub.recv_multipart()
            assert len(frames) == 3, f"expected topic, seq, payload; got {len(frames)} frames"
            self.received.append(decode_message(frames))
        return self.received

    def close(self) -> None:
        self.sub.close(linger=0)


@pytest.fixture(params=["map", "array"])
def node_daemon(request, monkeypatch) -> Iterator[Tuple[Daemon, RouterSocket, str, zmq.Context,
                                                         str]]:
    workdir = short_tmpdir()
    ctx = zmq.Context()
    router = RouterSocket(ctx)
    monkeypatch.setenv("NODE_NAME", NODE)  # the downward API's spec.nodeName; no pod_id set
    d = Daemon(workdir, {"l1.capacity": "8MiB", "l1.slab_size": "1MiB",
                         "l2.enabled": "true", "l2.path": str(workdir / "l2"),
                         "events.enabled": "true", "events.endpoint": router.endpoint,
                         "events.replay_endpoint": f"ipc://{workdir}/ev.replay",
                         "events.encoding": request.param})
    try:
        d.start()
        router.wait_publisher()
        warm_up(d, router)
        yield d, router, f"ipc://{workdir}/ev.replay", ctx, request.param
        assert d.running(), d.log_tail()
        assert d.stop() == 0, d.log_tail()
    finally:
        router.close()
        d.kill()
        ctx.term()
        shutil.rmtree(workdir, ignore_errors=True)


def register(s: kvstrata.Session, model: str = MODEL):
    return s.register_namespace(**mha_spec(
        kv_layout="opaque", dtype="uint8", opaque_block_bytes=BLOCK, model=model,
        salt=f"node-topic-{os.getpid()}-{next(_salts)}"))


def warm_up(d: Daemon, router: RouterSocket) -> None:
    """ZMQ's slow joiner: the subscription reaches the daemon's PUB some time after the
    connection. Store blocks of another model until one of its events arrives; the tests
    then look at their own model's topic only."""
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="warm-up") as s:
        ns = register(s, WARM_UP_MODEL)
        for i in range(100):
            store(s, ns, keys_for(1000 + i, 1))
            if router.drain(0.1):
                return
    raise AssertionError("no event reached the bound SUB")


def store(s: kvstrata.Session, ns, keys: List[bytes]) -> None:
    s.store(ns, keys, [np.full(BLOCK, i % 251, np.uint8) for i in range(len(keys))])


def summary(router: RouterSocket) -> list:
    return [(m.seq, [(e.tag, e.medium, len(e.block_hashes)) for e in m.events])
            for m in router.received]


def assert_node_topic(m: Message) -> None:
    """The topic as llm-d's router reads it: pod-id node:<NODE>, one of this test's models."""
    pod, model = router_parse_topic(m.topic)
    assert node_of(pod) == NODE, f"pod-id {pod!r} of {m.topic!r} is not the node-wide form"
    assert model in (MODEL, WARM_UP_MODEL) and m.topic == f"kv@node:{NODE}@{model}"


def events_of(messages: List[Message]):
    return [e for m in messages for e in m.events]


def ours(messages: List[Message]) -> List[Message]:
    return [m for m in messages if m.model == MODEL]


def test_node_topic_stores_removals_clear(node_daemon) -> None:
    d, router, _, _, encoding = node_daemon
    keys = keys_for(40, 6)
    want = {external(k) for k in keys}
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="node-topic") as s:
        ns = register(s)
        store(s, ns, keys)

        def tiers_stored() -> set:
            return {e.medium for e in events_of(ours(router.drain(0.1)))
                    if e.tag == "BlockStored"}
        assert wait_until(lambda: tiers_stored() >= {"CPU", "STORAGE"}, 10), summary(router)
        time.sleep(0.2)  # the L2 writes of all six blocks
        list(c.clear())
        assert wait_until(lambda: any(e.tag == "AllBlocksCleared"
                                      for e in events_of(ours(router.drain(0.1)))), 10), (
            summary(router))

    for m in router.received:  # what the router's indexer sees
        assert_node_topic(m)
    assert ours(router.received)[0].topic == TOPIC
    seqs = [m.seq for m in router.received]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "dense sequence numbers"
    raw_events = [e for m in ours(router.received) for e in msgpack.unpackb(m.payload)[1]]
    assert all(isinstance(e, dict if encoding == "map" else list) for e in raw_events)
    flat = events_of(ours(router.received))
    by = Counter((e.tag, e.medium, e.locality, h) for e in flat for h in e.block_hashes)
    for tag in ("BlockStored", "BlockRemoved"):
        assert {h for (t, m, loc, h) in by if t == tag and (m, loc) == ("CPU", "LOCAL")} == want
        assert {h for (t, m, loc, h) in by
                if t == tag and (m, loc) == ("STORAGE", "LOCAL")} == want
    assert all(n == 1 for n in by.values()), "one event per block, tier and kind"
    assert flat[-1].tag == "AllBlocksCleared"
    assert [e.tag for e in flat].count("AllBlocksCleared") == 1


def test_replay_after_the_router_reconnects(node_daemon) -> None:
    """The router restarts at the same address; kvstratad's PUB reconnects to it. Batches
    published meanwhile come late (the connecting PUB queued them) or not at all (lost
    with the old connection); either way, as llm-d-router's subscriber does with its last
    sequence number, a replay from last_seen + 1 returns every one of them, dense, under the
    node-wide topic, with the bytes the live stream carried."""
    d, router, replay_endpoint, ctx, _ = node_daemon
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="node-replay") as s:
        ns = register(s)
        store(s, ns, keys_for(50, 2))
        assert wait_until(lambda: ours(router.drain(0.1)), 10), summary(router)
        time.sleep(0.3)  # the L2 writes' events too
        last_seen = router.drain(0.1)[-1].seq

        address = router.endpoint
        router.close()  # the router goes away; the daemon goes on publishing
        missed = keys_for(51, 3)
        store(s, ns, missed)
        time.sleep(0.3)

        again = RouterSocket(ctx, address)
        try:
            again.wait_publisher()
            for i in range(100):  # until something arrives (slow joiner)
                store(s, ns, keys_for(60 + i, 1))
                if again.drain(0.1):
                    break
            time.sleep(0.2)
            live = again.drain(0.1)
            assert live, "nothing reached the router after it came back"
            for m in live:
                assert_node_topic(m)

            filled = replay(ctx, replay_endpoint, last_seen + 1)
            newest = max(m.seq for m in live)
            assert [m.seq for m in filled][:newest - last_seen] == list(
                range(last_seen + 1, newest + 1)), "replay is dense from last_seen + 1"
            for m in filled:
                assert_node_topic(m)  # the replay's own topic frame
            by_seq = {m.seq: m for m in filled}
            for m in live:
                assert by_seq[m.seq].payload == m.payload, "replayed bytes are the live ones"
            got = {h for m in filled for e in m.events
                   if e.tag == "BlockStored" and e.medium == "CPU" for h in e.block_hashes}
            assert {external(k) for k in missed} <= got
        finally:
            again.close()
