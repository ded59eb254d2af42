"""Decodes KVStrata's ZMQ KV event messages the way llm-d's KV-Cache Indexer does
(pkg/kvevents/engineadapter/vllm_adapter.go): exactly 3 frames (topic, 8-byte big-endian
sequence, msgpack payload), the topic split on "@" into kv/<pod>/<model>, the payload an
array batch [ts, events, dp_rank?], each event a tagged union whose first element names
it, trailing optional fields padded with None, hashes as ints (or bytes: last 8 bytes
big-endian). The map encoding's events are msgspec tagged maps ({"type": tag, ...}), as llm-d's
mapEventToFields reads them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import msgpack

STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                 "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                 "kv_cache_spec_sliding_window", "locality")
REMOVED_FIELDS = ("block_hashes", "medium", "group_idx", "locality")
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def hash_as_uint64(raw: Any) -> int:
    if isinstance(raw, int):
        return raw & 0xFFFFFFFFFFFFFFFF
    if isinstance(raw, (bytes, bytearray)) and raw:
        return int.from_bytes(bytes(raw[-8:]).rjust(8, b"\0"), "big")
    raise ValueError(f"unsupported hash {raw!r}")


@dataclass
class Event:
    tag: str
    block_hashes: List[int] = field(default_factory=list)
    parent_block_hash: Optional[int] = None
    token_ids: List[int] = field(default_factory=list)
    block_size: int = 0
    lora_id: Optional[int] = None
    medium: Optional[str] = None
    lora_name: Optional[str] = None
    group_idx: Optional[int] = None
    locality: Optional[str] = None


@dataclass
class Message:
    topic: str
    pod: str
    model: str
    seq: int
    ts: float
    dp_rank: Optional[int]
    events: List[Event]
    payload: bytes


def parse_topic(topic: str) -> Tuple[str, str]:
    parts = topic.split("@")
    return (parts[1], parts[2]) if len(parts) == 3 else (topic, "")


def decode_event(raw: Any) -> Event:
    if isinstance(raw, dict):  # map encoding
        tag = raw["type"]
        names = STORED_FIELDS if tag == "BlockStored" else REMOVED_FIELDS
        values = [raw.get(n) for n in names] if tag != "AllBlocksCleared" else []
    else:
        assert isinstance(raw, list) and raw, f"malformed tagged union {raw!r}"
        tag, values = raw[0], list(raw[1:])
        names = STORED_FIELDS if tag == "BlockStored" else REMOVED_FIELDS
        if tag == "BlockStored":
            assert len(values) >= 4, f"BlockStored has too few fields: {raw!r}"
        values += [None] * (len(names) - len(values))
    assert isinstance(tag, str), f"event tag is not a string: {tag!r}"
    if tag == "AllBlocksCleared":
        return Event(tag)
    assert tag in ("BlockStored", "BlockRemoved"), f"unknown tag {tag}"
    fields = dict(zip(names, values))
    event = Event(tag, [hash_as_uint64(h) for h in fields["block_hashes"]],
                  medium=fields.get("medium"), group_idx=fields.get("group_idx"),
                  locality=fields.get("locality"))
    if tag == "BlockStored":
        parent = fields["parent_block_hash"]
        event.parent_block_hash = None if parent is None else hash_as_uint64(parent)
        event.token_ids = list(fields["token_ids"] or [])
        event.block_size = int(fields["block_size"])
        event.lora_id = fields["lora_id"]
        event.lora_name = fields["lora_name"]
    return event


def decode_payload(payload: bytes) -> Tuple[float, List[Event], Optional[int]]:
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(batch, list) and len(batch) >= 2, f"batch is not an array: {batch!r}"
    ts, events = batch[0], batch[1]
    assert isinstance(ts, float)
    dp_rank = batch[2] if len(batch) > 2 else None
    return ts, [decode_event(e) for e in events], dp_rank


def decode_message(frames: List[bytes]) -> Message:
    assert len(frames) == 3, f"expected 3 message parts, got {len(frames)}"
    topic = frames[0].decode()
    assert len(frames[1]) == 8, f"invalid sequence bytes length: {len(frames[1])}"
    seq = int.from_bytes(frames[1], "big")
    pod, model = parse_topic(topic)
    ts, events, dp_rank = decode_payload(frames[2])
    return Message(topic, pod, model, seq, ts, dp_rank, events, frames[2])


def replay(ctx: Any, endpoint: str, start_seq: int) -> List[Message]:
    """A DEALER request as llm-d-router's requestReplay sends it: ["", start_seq]; answers
    ["", topic, seq, payload] up to the end marker ["", "", -1, ""]."""
    import zmq  # noqa: PLC0415 - only the replay tests need pyzmq

    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
    out: List[Message] = []
    try:
        while True:
            assert dealer.poll(5000), "no replay answer"
            frames = dealer.recv_multipart()
            assert len(frames) == 4 and frames[0] == b"", frames
            _, topic, seq, payload = frames
            if seq == END_SEQ:
                assert topic == b"" and payload == b""
                return out
            out.append(decode_message([topic, seq, payload]))
    finally:
        dealer.close(linger=0)
