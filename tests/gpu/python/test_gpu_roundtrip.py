"""GPU mode end to end, engine in this process, daemon in its own: Llama-3.1-8B KV caches
(32 layers, 8 KV heads of 128, bf16, 16 tokens per block = 2 MiB blocks) in vLLM's
layouts, stored from and loaded into GPU memory by the daemon, compared byte for byte.
"""
from __future__ import annotations

import random
import time

import grpc
import pytest

from gpu_support import (BLOCK_BYTES, KvCache, assert_blocks_equal, check_completion,
                         llama_spec, random_keys, require_gpu, roundtrip_rounds)

require_gpu()

import torch  # noqa: E402

import kvstrata  # noqa: E402
from kvstrata import pb  # noqa: E402

NUM_BLOCKS = 1024            # 2 GiB of KV per cache
JOB_TIMEOUT_S = 60.0


def _setup(session, salt, layout, num_blocks=NUM_BLOCKS):
    ns = session.register_namespace(**llama_spec(layout, salt))
    assert ns.bytes_per_block == BLOCK_BYTES
    cache = KvCache(layout, num_blocks)
    cache.poison(range(num_blocks))
    reg = session.register_cuda_kv_caches(ns, cache.pieces())
    assert reg.registration_id > 0
    return ns, cache, reg


@pytest.mark.parametrize("layout,rounds", [("nhd", 24), ("hnd", 8), ("flashinfer", 6),
                                           ("cross_layer", 8)])
def test_roundtrip_rounds(session, salt, layout, rounds):
    """Random stores and concurrent loads into different, poisoned block ids, byte-exact."""
    ns, cache, reg = _setup(session, salt, layout)
    expected_pieces = {"nhd": 64, "hnd": 64, "flashinfer": 32, "cross_layer": 1}[layout]
    assert len(reg.description.pieces) == expected_pieces
    rng = random.Random(f"{layout}-{salt}")
    counters = roundtrip_rounds(session, ns, reg, cache, rng, rounds, timeout=JOB_TIMEOUT_S)
    assert counters["loaded_blocks"] > 0, counters


@pytest.mark.parametrize("layout", ["nhd", "hnd", "flashinfer", "cross_layer"])
def test_consecutive_blocks_roundtrip(session, salt, layout):
    """Runs of consecutive block ids (the daemon copies each tensor's run as one 2-D copy
    when the L1 slots are evenly spaced), stored and loaded byte-exact, also layer-wise."""
    ns = session.register_namespace(**llama_spec(layout, salt))
    cache = KvCache(layout, 512)
    cache.poison(range(512))
    reg = session.register_cuda_kv_caches(ns, cache.pieces(), layer_flags=True)
    rng = random.Random(f"consecutive-{layout}-{salt}")
    src, dst, dst2 = list(range(64, 160)), list(range(300, 396)), list(range(400, 496))
    keys = random_keys(rng, len(src))
    cache.fill_random(src)
    snapshot = cache.blocks(src)
    check_completion(session.wait_job(session.submit_store(ns, reg, keys, src, event=True),
                                      timeout=JOB_TIMEOUT_S), "store")
    torch.cuda.current_stream().synchronize()
    check_completion(session.wait_job(session.submit_load(ns, reg, keys, dst),
                                      timeout=JOB_TIMEOUT_S), "load")
    assert_blocks_equal(cache.blocks(dst), snapshot, "consecutive load")
    value = reg.layer_flags.next_value()
    c = session.wait_job(session.submit_load(ns, reg, keys, dst2, layer_flag_value=value),
                         timeout=JOB_TIMEOUT_S)
    check_completion(c, "layer-wise load")
    assert_blocks_equal(cache.blocks(dst2), snapshot, "consecutive layer-wise load")


def test_concurrent_jobs_in_flight(session, salt):
    """Several stores and loads submitted before waiting for any of them."""
    ns, cache, reg = _setup(session, salt, "nhd")
    rng = random.Random(salt)
    ids = rng.sample(range(NUM_BLOCKS), 8 * 32)
    groups = [ids[i * 32:(i + 1) * 32] for i in range(8)]
    keys = [random_keys(rng, 32) for _ in range(8)]
    # Phase 1: four stores in flight at once.
    for g in groups[:4]:
        cache.fill_random(g)
    event = reg.record_event()
    snaps = [cache.blocks(g) for g in groups[:4]]
    jobs = [session.submit_store(ns, reg, keys[i], groups[i], event=event) for i in range(4)]
    for c in session.wait_jobs(jobs, timeout=JOB_TIMEOUT_S).values():
        check_completion(c, "store")
    # Phase 2: four loads of those keys into other blocks while four new stores run.
    for g in groups[4:]:
        cache.fill_random(g)
    event = reg.record_event()
    snaps2 = [cache.blocks(g) for g in groups[4:]]
    dst_ids = rng.sample(sorted(set(range(NUM_BLOCKS)) - set(ids)), 4 * 32)
    dst = [dst_ids[i * 32:(i + 1) * 32] for i in range(4)]
    cache.poison(dst_ids)
    torch.cuda.current_stream().synchronize()
    jobs = []
    for i in range(4):
        jobs.append(session.submit_store(ns, reg, keys[4 + i], groups[4 + i], event=event))
        jobs.append(session.submit_load(ns, reg, keys[i], dst[i]))
    done = session.wait_jobs(jobs, timeout=JOB_TIMEOUT_S)
    for j in jobs:
        check_completion(done[j], f"job {j}")
    for i in range(4):
        assert_blocks_equal(cache.blocks(dst[i]), snaps[i], f"load {i}")
    # Phase 3: the second stores are loadable too.
    cache.poison(dst_ids)
    torch.cuda.current_stream().synchronize()
    jobs = [session.submit_load(ns, reg, keys[4 + i], dst[i]) for i in range(4)]
    done = session.wait_jobs(jobs, timeout=JOB_TIMEOUT_S)
    for i, j in enumerate(jobs):
        check_completion(done[j], f"load {j}")
        assert_blocks_equal(cache.blocks(dst[i]), snaps2[i], f"second load {i}")


def test_missing_keys_are_reported_per_block(session, salt):
    """A load of partly missing keys fails exactly those indices and leaves their blocks
    untouched; the present ones are loaded byte-exact."""
    ns, cache, reg = _setup(session, salt, "nhd")
    rng = random.Random(salt)
    ids = rng.sample(range(NUM_BLOCKS), 32)
    src, dst = ids[:16], ids[16:]
    keys = random_keys(rng, 16)
    cache.fill_random(src)
    snapshot = cache.blocks(src)
    job = session.submit_store(ns, reg, keys, src, event=True)
    check_completion(session.wait_job(job, timeout=JOB_TIMEOUT_S), "store")

    missing = {0, 5, 6, 15}
    load_keys = [random_keys(rng, 1)[0] if i in missing else keys[i] for i in range(16)]
    cache.poison(dst, byte=0x3C)
    poison = cache.blocks(dst[:1]).clone()
    torch.cuda.current_stream().synchronize()
    c = session.wait_job(session.submit_load(ns, reg, load_keys, dst), timeout=JOB_TIMEOUT_S)
    assert not c.ok
    assert sorted(c.failed_blocks) == sorted(missing), (list(c.failed_blocks), c.error)
    present = [i for i in range(16) if i not in missing]
    assert_blocks_equal(cache.blocks([dst[i] for i in present]), snapshot[present], "present keys")
    for i in missing:
        assert_blocks_equal(cache.blocks([dst[i]]), poison, f"missing key {i} (must stay untouched)")

    # Nothing present at all: every index fails.
    c = session.wait_job(session.submit_load(ns, reg, random_keys(rng, 3), dst[:3]),
                         timeout=JOB_TIMEOUT_S)
    assert not c.ok and sorted(c.failed_blocks) == [0, 1, 2]


@pytest.mark.parametrize("completions", ["socket", "stream"])
def test_completions_on_the_job_socket_or_the_stream(session, salt, completions):
    """The daemon offers socket_completions: a job's completion (ok, or naming its failed
    blocks) comes back on the job socket itself, not on the WatchCompletions stream; a
    client that sends version-1 frames (an older daemon's) gets the same on the stream."""
    if completions == "stream":
        session.open_response.socket_completions = False
    else:
        assert session.open_response.socket_completions
    tracker = session.completions()
    via_socket = []
    delivered = tracker.delivered
    tracker.delivered = lambda sid, c: (via_socket.append(c.job_id), delivered(sid, c))
    ns, cache, reg = _setup(session, salt, "nhd", num_blocks=64)
    rng = random.Random(salt)
    keys = random_keys(rng, 8)
    cache.fill_random(range(8))
    snapshot = cache.blocks(range(8))
    check_completion(session.wait_job(session.submit_store(ns, reg, keys, range(8), event=True),
                                      timeout=JOB_TIMEOUT_S), "store")
    cache.poison(range(16, 26))
    torch.cuda.current_stream().synchronize()
    mixed = keys[:4] + random_keys(rng, 2) + keys[4:]
    c = session.wait_job(session.submit_load(ns, reg, mixed, range(16, 26)), timeout=JOB_TIMEOUT_S)
    assert not c.ok and sorted(c.failed_blocks) == [4, 5], (list(c.failed_blocks), c.error)
    present = list(range(16, 20)) + list(range(22, 26))
    assert_blocks_equal(cache.blocks(present), snapshot, "load")
    assert c.elapsed_us > 0
    assert len(via_socket) == (2 if completions == "socket" else 0), via_socket


def test_load_with_lease(session, salt):
    """lookup(lease=True) pins the chain; a load with the lease consumes it."""
    ns, cache, reg = _setup(session, salt, "nhd")
    rng = random.Random(salt)
    ids = rng.sample(range(NUM_BLOCKS), 64)
    src, dst = ids[:32], ids[32:]
    keys = random_keys(rng, 32)
    cache.fill_random(src)
    snapshot = cache.blocks(src)
    check_completion(session.wait_job(session.submit_store(ns, reg, keys, src, event=True),
                                      timeout=JOB_TIMEOUT_S), "store")
    hit = session.lookup(ns, keys, lease=True)
    assert hit.hit_blocks == 32 and hit.lease_id != 0, hit
    assert all(t == pb.TIER_L1_DRAM for t in hit.tiers)
    cache.poison(dst)
    torch.cuda.current_stream().synchronize()
    c = session.wait_job(session.submit_load(ns, reg, keys, dst, lease_id=hit.lease_id),
                         timeout=JOB_TIMEOUT_S)
    check_completion(c, "leased load")
    assert_blocks_equal(cache.blocks(dst), snapshot, "leased load")
    # A prefix with a lease, too.
    hit = session.lookup(ns, keys[:8], lease=True)
    cache.poison(dst[:8])
    torch.cuda.current_stream().synchronize()
    c = session.wait_job(session.submit_load(ns, reg, keys[:8], dst[:8], lease_id=hit.lease_id),
                         timeout=JOB_TIMEOUT_S)
    check_completion(c, "leased prefix load")
    assert_blocks_equal(cache.blocks(dst[:8]), snapshot[:8], "leased prefix load")


def test_poll_and_take_completions(session, salt):
    """poll_completions() / take_completions() hand out each completion once."""
    ns, cache, reg = _setup(session, salt, "nhd", num_blocks=64)
    rng = random.Random(salt)
    cache.fill_random(range(8))
    jobs = {session.submit_store(ns, reg, random_keys(rng, 2), [2 * i, 2 * i + 1], event=True)
            for i in range(4)}
    seen = {}
    end = time.monotonic() + JOB_TIMEOUT_S
    while set(seen) != jobs and time.monotonic() < end:
        for c in session.poll_completions():
            assert c.job_id not in seen, f"job {c.job_id} handed out twice"
            seen[c.job_id] = c
        time.sleep(0.01)
    assert set(seen) == jobs
    for c in seen.values():
        assert c.kind == pb.JobCompletion.KIND_STORE
        check_completion(c, "store")
    assert session.take_completions() == {}


def test_bad_registrations_and_jobs_are_refused(session, salt):
    """The daemon validates geometry, handles, block ids and event indices."""
    ns, cache, reg = _setup(session, salt, "nhd", num_blocks=64)
    desc = reg.description
    good = desc.to_proto(reg.events.handles)

    def register(memory):
        return session.client.register_kv_memory(session_id=session.session_id,
                                                 namespace_id=ns.namespace_id, cuda=memory)

    def expect(code, memory):
        with pytest.raises(kvstrata.KVStrataError) as exc:
            register(memory)
        assert exc.value.code == code, exc.value

    bad = pb.CudaKvMemory(); bad.CopyFrom(good); del bad.tensors[-1]  # noqa: E702
    expect(grpc.StatusCode.INVALID_ARGUMENT, bad)                    # pieces do not add up
    bad = pb.CudaKvMemory(); bad.CopyFrom(good); bad.num_blocks = 64 * 1024  # noqa: E702
    expect(grpc.StatusCode.INVALID_ARGUMENT, bad)                    # blocks beyond the allocation
    bad = pb.CudaKvMemory(); bad.CopyFrom(good); bad.tensors[0].ipc_handle = b"x" * 10  # noqa: E702
    expect(grpc.StatusCode.INVALID_ARGUMENT, bad)                    # handle of the wrong size
    bad = pb.CudaKvMemory(); bad.CopyFrom(good)  # noqa: E702
    bad.gpu_uuid = "GPU-00000000-0000-0000-0000-000000000000"
    expect(grpc.StatusCode.NOT_FOUND, bad)                           # unknown GPU
    # Blocks beyond the allocation, with allocation_bytes declared to match: the daemon
    # checks the size its IPC handle really maps (it would copy out of bounds otherwise).
    bad = pb.CudaKvMemory(); bad.CopyFrom(good); bad.num_blocks = 64 * 1024  # noqa: E702
    for t in bad.tensors:
        t.allocation_bytes = t.base_offset + 64 * 1024 * t.block_stride
    with pytest.raises(kvstrata.KVStrataError) as exc:
        register(bad)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT, exc.value
    assert "exceeds" in str(exc.value), exc.value

    keys = random_keys(random.Random(salt), 1)
    with pytest.raises(kvstrata.KVStrataError) as exc:               # block id out of range
        session.client.submit_store(session_id=session.session_id, namespace_id=ns.namespace_id,
                                    registration_id=reg.registration_id,
                                    blocks=[pb.BlockTransfer(key=keys[0], block_id=64)])
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(kvstrata.KVStrataError) as exc:               # event index out of range
        session.client.submit_store(session_id=session.session_id, namespace_id=ns.namespace_id,
                                    registration_id=reg.registration_id, wait_event=99,
                                    blocks=[pb.BlockTransfer(key=keys[0], block_id=0)])
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ValueError):                                  # caught by the client
        session.submit_store(ns, reg, keys, [64])
    # The good registration still works after all that.
    cache.fill_random([0])
    c = session.wait_job(session.submit_store(ns, reg, keys, [0], event=True), timeout=JOB_TIMEOUT_S)
    check_completion(c, "store after refusals")


def test_unregister_then_register_again(session, salt):
    ns, cache, reg = _setup(session, salt, "nhd", num_blocks=64)
    session.unregister_cuda_kv_caches(reg)
    with pytest.raises(kvstrata.KVStrataError):
        session.client.submit_load(session_id=session.session_id, namespace_id=ns.namespace_id,
                                   registration_id=reg.registration_id,
                                   blocks=[pb.BlockTransfer(key=b"k" * 32, block_id=0)])
    reg2 = session.register_cuda_kv_caches(ns, cache.pieces())
    counters = roundtrip_rounds(session, ns, reg2, cache, random.Random(salt), 3, max_blocks=16,
                                timeout=JOB_TIMEOUT_S)
    assert counters["rounds"] == 3
