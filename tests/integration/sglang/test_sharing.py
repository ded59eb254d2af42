"""Who shares pages: two SGLang processes with the same layout and rank do; different
salts, layouts, ranks or models never do; MLA ranks all read what the writing rank stored."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes

CHILD = Path(__file__).resolve().parent / "sglang_child.py"


class Child:
    """sglang_child.py in its own process, driven one JSON command at a time."""

    def __init__(self, endpoint: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD), endpoint], cwd=CHILD.parent,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def __call__(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the child process died (exit {self.proc.poll()})"
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def child(daemon):
    """One child process for the module (it keeps nothing between commands): starting one
    imports torch and SGLang again, ~10 s on a 2-core machine."""
    c = Child(daemon.endpoint)
    yield c
    c.close()


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_two_processes_share_pages(daemon, backends, salt, child, kind):
    mla = kind == "mla"
    # Another process stores 5 pages (MHA: tp rank 1 of 2; MLA: the writing rank 0) ...
    stored = child(op="store", kind=kind, layout="page_first", salt=salt, prefix="shared",
                   n=5, seed=11, tp_rank=0 if mla else 1)
    assert stored["ok"] == [True] * 5
    # ... this process (tp rank 1 of 2) finds and loads them byte-exact.
    pool = make_pool(kind, "page_first")
    b = backends(make_config({"salt": salt}, mla=mla, tp_rank=1, tp_size=2,
                             endpoint=daemon.endpoint), pool)
    assert b.namespace.fingerprint == stored["fingerprint"]
    keys = keys_for("shared", 5)
    assert b.batch_exists(keys) == 5
    ref = alloc_pages(pool, 5)
    fill_pages(pool, ref, 11)
    dst = alloc_pages(pool, 5)
    assert b.batch_get_v1(keys, dst) == [True] * 5
    assert page_bytes(pool, dst) == page_bytes(pool, ref)
    # And the other way round: the other process loads what this one stores.
    writer = b if not mla else backends(make_config({"salt": salt}, mla=True, tp_rank=0,
                                                    tp_size=2, endpoint=daemon.endpoint), pool)
    more = alloc_pages(pool, 3)
    fill_pages(pool, more, 12)
    assert writer.batch_set_v1(keys_for("back", 3), more) == [True] * 3
    checked = child(op="check", kind=kind, layout="page_first", salt=salt, prefix="back",
                    n=3, seed=12, tp_rank=1)
    assert checked == {**checked, "exists": 3, "ok": [True] * 3, "same": True}


def test_salts_isolate_tenants(daemon, backends, salt):
    pool = make_pool("mha", "page_first")
    a = backends(make_config({"salt": salt + "/tenant-a"}, endpoint=daemon.endpoint), pool)
    b = backends(make_config({"salt": salt + "/tenant-b"}, endpoint=daemon.endpoint), pool)
    assert a.namespace.fingerprint != b.namespace.fingerprint
    idx = alloc_pages(pool, 4)
    fill_pages(pool, idx, 21)
    keys = keys_for("tenant", 4)
    assert a.batch_set_v1(keys, idx) == [True] * 4
    assert a.batch_exists(keys) == 4
    assert b.batch_exists(keys) == 0
    assert b.batch_get_v1(keys, alloc_pages(pool, 4)) == [False] * 4
    assert not b.exists(keys[0]) and b.get(keys[0]) is None


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_incompatible_layouts_never_match(daemon, backends, salt, kind):
    mla = kind == "mla"
    fps = set()
    keys = keys_for("layouts", 2)
    for i, layout in enumerate(("layer_first", "page_first", "page_first_direct")):
        pool = make_pool(kind, layout)
        b = backends(make_config({"salt": salt}, mla=mla, endpoint=daemon.endpoint), pool)
        fps.add(b.namespace.fingerprint)
        assert b.batch_exists(keys) == 0, f"{layout} found pages another layout stored"
        idx = alloc_pages(pool, 2)
        fill_pages(pool, idx, 30 + i)
        assert b.batch_set_v1(keys, idx) == [True, True]
    assert len(fps) == 3


def test_mha_ranks_stages_and_models_are_apart(daemon, backends, salt):
    keys = keys_for("ranks", 2)
    variants = [dict(tp_rank=0, tp_size=2), dict(tp_rank=1, tp_size=2), dict(tp_rank=0, tp_size=1),
                dict(pp_rank=1, pp_size=2), dict(model="another/model")]
    fps = set()
    for i, v in enumerate(variants):
        pool = make_pool("mha", "page_first")
        b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint, **v), pool)
        fps.add(b.namespace.fingerprint)
        assert b.batch_exists(keys) == 0, f"{v} found pages stored by another rank/model"
        idx = alloc_pages(pool, 2)
        fill_pages(pool, idx, 40 + i)
        assert b.batch_set_v1(keys, idx) == [True, True]
    assert len(fps) == len(variants)


def test_mla_one_rank_writes_every_rank_reads(daemon, backends, salt):
    keys = keys_for("mla-ranks", 3)
    writer_pool, reader_pool = make_pool("mla", "page_first"), make_pool("mla", "page_first")
    writer = backends(make_config({"salt": salt}, mla=True, tp_rank=0, tp_size=4,
                                  endpoint=daemon.endpoint), writer_pool)
    follower = backends(make_config({"salt": salt}, mla=True, tp_rank=3, tp_size=4,
                                    endpoint=daemon.endpoint), reader_pool)
    other_tp = backends(make_config({"salt": salt}, mla=True, tp_rank=1, tp_size=8,
                                    endpoint=daemon.endpoint), make_pool("mla", "page_first"))
    assert writer.is_writer and not follower.is_writer
    assert writer.namespace.fingerprint == follower.namespace.fingerprint \
        == other_tp.namespace.fingerprint
    idx = alloc_pages(reader_pool, 3)
    fill_pages(reader_pool, idx, 50)
    # The follower does not write (SGLang skips its backups too) and says so in its counters.
    assert follower.batch_set_v1(keys, idx) == [True] * 3
    assert follower.counters["set_skipped_not_writer"] == 3
    assert follower.batch_exists(keys) == 0
    widx = alloc_pages(writer_pool, 3)
    fill_pages(writer_pool, widx, 50)
    assert writer.batch_set_v1(keys, widx) == [True] * 3
    dst = alloc_pages(reader_pool, 3)
    assert follower.batch_exists(keys) == 3 and other_tp.batch_exists(keys) == 3
    assert follower.batch_get_v1(keys, dst) == [True] * 3
    assert page_bytes(reader_pool, dst) == page_bytes(writer_pool, widx)
