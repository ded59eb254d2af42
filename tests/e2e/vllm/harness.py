"""Drives vLLM's real Scheduler with KVStrataConnector on both sides, without a GPU.

`Engine` holds one scheduler (vLLM's Scheduler, with the connector in the SCHEDULER role)
and `pp` x `tp` workers (the connector in the WORKER role, each with its own CPU KV cache
tensors: pipeline stage s holds the layers vLLM's get_pp_indices gives it, and the scheduler
is handed stage 0's KV cache config, as vLLM's engine does).
A step runs what vLLM's model runner does around a forward pass: bind the metadata,
handle preemptions, start_load_kv, "forward" (write each scheduled token's KV, a value
derived from the token and its position, so loaded bytes can be checked), wait_for_save,
get_transfer_results, get_block_ids_with_load_errors; the workers' outputs are merged by
vLLM's own KVOutputAggregator and fed to Scheduler.update_from_output.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from vllm import SamplingParams
from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig, ModelConfig,
                         ParallelConfig, SchedulerConfig, VllmConfig)
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.utils import get_pp_indices
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec,
                                        MLAAttentionSpec, SlidingWindowSpec)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

import kvstrata_vllm.worker as kv_worker
from kvstrata_vllm import KVStrataConnector

BLOCK = 16
LAYERS = 2
KV_HEADS = 2
HEAD = 4
EOS = 2
init_none_hash(sha256)


def vllm_config(model_dir: str, extra: Dict[str, Any], tp: int = 1, batch_tokens: int = 64,
                max_seqs: int = 16, kv_events: bool = False,
                max_model_len: int = 2048, pp: int = 1) -> VllmConfig:
    model = ModelConfig(model=model_dir, dtype="float32", seed=0, max_model_len=max_model_len)
    sched = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=batch_tokens,
                            max_model_len=max_model_len, enable_chunked_prefill=True,
                            is_encoder_decoder=False)
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
    cache.kv_cache_layout = "LBNHC"
    kvt = KVTransferConfig(kv_connector="KVStrataConnector",
                           kv_connector_module_path="kvstrata_vllm", kv_role="kv_both",
                           kv_load_failure_policy="recompute", kv_connector_extra_config=extra)
    events = KVEventsConfig(enable_kv_cache_events=True, publisher="null") if kv_events else None
    return VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                      kv_transfer_config=kvt, device_config=DeviceConfig("cpu"),
                      parallel_config=ParallelConfig(tensor_parallel_size=tp,
                                                     pipeline_parallel_size=pp),
                      kv_events_config=events)


def kv_cache_config(num_blocks: int, window: int = 0, mla: bool = False,
                    layers: range = range(LAYERS)) -> KVCacheConfig:
    """One full-attention group of the `layers` (all LAYERS, or a pipeline stage's); with
    `window`, a hybrid model as vLLM's hybrid KV cache manager lays it out (gpt-oss style):
    group 0 full attention on the even layers, group 1 a sliding window of `window` tokens
    on the odd ones, layer 2i and 2i+1 sharing one tensor (Worker). mla: one MLA group (a
    latent of HEAD values per token, the same on every tensor-parallel rank)."""
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                             dtype=torch.float32)
    if mla:
        spec = MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=HEAD,
                                dtype=torch.float32)
    if not window:
        return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                             kv_cache_groups=[KVCacheGroupSpec([f"layers.{i}.attn" for i in
                                                                layers], spec)])
    swa = SlidingWindowSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                            dtype=torch.float32, sliding_window=window)
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec([f"layers.{i}.attn" for i in range(0, 2 * LAYERS, 2)], spec),
        KVCacheGroupSpec([f"layers.{i}.attn" for i in range(1, 2 * LAYERS, 2)], swa)])


def kv_value(token: int, pos: int, layer: int, kv: int, rank: int) -> float:
    """The KV 'computed' for a token at a position (what the fake forward pass writes)."""
    return float(token * 4096 + pos) + layer * 0.5 + kv * 0.25 + rank * 0.125


def stage_layers(pp: int, stage: int) -> range:
    """The layers of a pipeline stage, as vLLM's models split them."""
    return range(*get_pp_indices(LAYERS, stage, pp))


def worker_connector(config: VllmConfig, kvc: KVCacheConfig, rank: int,
                     stage: int = 0) -> KVStrataConnector:
    """The connector in the WORKER role of tensor-parallel rank `rank` of pipeline stage
    `stage` (vLLM's parallel groups are not initialised here)."""
    saved = kv_worker.tp_rank, kv_worker.pp_rank
    kv_worker.tp_rank, kv_worker.pp_rank = (lambda: rank), (lambda: stage)
    try:
        return KVStrataConnector(config, KVConnectorRole.WORKER, kvc)
    finally:
        kv_worker.tp_rank, kv_worker.pp_rank = saved


class Worker:
    def __init__(self, config: VllmConfig, kvc: KVCacheConfig, rank: int,
                 stage: int = 0) -> None:
        self.rank = rank
        self.stage = stage
        self.connector = worker_connector(config, kvc, rank, stage)
        groups = kvc.kv_cache_groups
        # MLA: [blocks, block, latent], the same bytes on every rank.
        self.mla = isinstance(groups[0].kv_cache_spec, MLAAttentionSpec)
        shape = (kvc.num_blocks, BLOCK, HEAD) if self.mla else \
            (2, kvc.num_blocks, BLOCK, KV_HEADS, HEAD)
        # Layer i of every group shares one tensor, as vLLM's hybrid allocator does.
        shared = [torch.zeros(*shape) for _ in groups[0].layer_names]
        self.kv = {name: shared[i] for g in groups for i, name in enumerate(g.layer_names)}
        # Per group: (its layers' numbers in kv_value, their tensors, its sliding window).
        self.groups = [([int(n.split(".")[1]) for n in g.layer_names],
                        [self.kv[n] for n in g.layer_names],
                        int(getattr(g.kv_cache_spec, "sliding_window", 0) or 0)
                        if isinstance(g.kv_cache_spec, SlidingWindowSpec) else 0)
                       for g in groups]
        self.connector.register_kv_caches(self.kv)

    def write(self, block_ids: Any, tokens: List[int], start: int, end: int) -> None:
        """Write the KV of positions [start, end): block_ids per group (or group 0's list)."""
        per_group = block_ids if isinstance(block_ids, tuple) else (block_ids,)
        for (layers, tensors, _), ids in zip(self.groups, per_group):
            for pos in range(start, end):
                b, off = ids[pos // BLOCK], pos % BLOCK
                for li, t in zip(layers, tensors):
                    if self.mla:
                        t[b, off] = kv_value(tokens[pos], pos, li, 0, 0)
                        continue
                    for kv in (0, 1):
                        t[kv, b, off] = kv_value(tokens[pos], pos, li, kv, self.rank)

    def check(self, block_ids: Any, tokens: List[int], end: int) -> List[int]:
        """Positions < end whose KV differs from what the forward pass computes: every one
        in a full-attention group, those the next token's window reads in a sliding-window
        group (vLLM frees the blocks before them)."""
        per_group = block_ids if isinstance(block_ids, tuple) else (block_ids,)
        bad = set()
        for (layers, tensors, window), ids in zip(self.groups, per_group):
            first = max(0, end - window + 1) if window else 0
            for pos in range(first, end):
                b, off = ids[pos // BLOCK], pos % BLOCK
                for li, t in zip(layers, tensors):
                    got = t[b, off] if self.mla else t[0, b, off]
                    want = kv_value(tokens[pos], pos, li, 0, 0 if self.mla else self.rank)
                    if b == 0 or not bool((got == want).all()):
                        bad.add(pos)
                        break
        return sorted(bad)


def finished(connector: KVStrataConnector, finished_req_ids: set) -> tuple:
    """(finished sending, finished receiving, failed receiving) as the model runner asks for
    them: get_transfer_results on vLLM >= 0.27, get_finished on 0.26 (no failed set)."""
    if hasattr(connector, "get_transfer_results"):
        r = connector.get_transfer_results(finished_req_ids)
        return r.finished_sending, r.finished_recving, getattr(r, "failed_recving", set())
    return (*connector.get_finished(finished_req_ids), set())


class Engine:
    def __init__(self, model_dir: str, extra: Dict[str, Any], tp: int = 1,
                 num_blocks: int = 512, batch_tokens: int = 64, kv_events: bool = False,
                 window: int = 0, mla: bool = False, pp: int = 1) -> None:
        self.config = vllm_config(model_dir, extra, tp=tp, batch_tokens=batch_tokens,
                                  kv_events=kv_events, pp=pp)
        self.config.cache_config.num_gpu_blocks = num_blocks
        # Each stage's KV cache config; the scheduler gets stage 0's (vLLM's
        # generate_scheduler_kv_cache_config copies worker 0's).
        stages = [kv_cache_config(num_blocks, window, mla, stage_layers(pp, s))
                  for s in range(pp)]
        self.hybrid = window > 0
        self.scheduler = Scheduler(vllm_config=self.config, kv_cache_config=stages[0],
                                   log_stats=True,
                                   structured_output_manager=StructuredOutputManager(self.config),
                                   block_size=BLOCK)
        self.connector: KVStrataConnector = self.scheduler.get_kv_connector()
        # In vLLM's order: rank = stage * tp + tensor-parallel rank.
        self.workers = [Worker(self.config, stages[s], r, s) for s in range(pp) for r in range(tp)]
        self.aggregator = KVOutputAggregator(tp * pp)
        self.computed_by_forward: Dict[str, int] = {}   # tokens written by the fake forward
        self.outputs: Dict[str, List[int]] = {}
        self.finished: List[str] = []
        self.stats: Dict[str, int] = {}
        self.invalid_reported: set = set()
        self.failed_reported: set = set()   # requests reported failed receiving (hybrid)
        self._ids = 0
        self.published: List[Any] = []   # KV events batches vLLM published
        publisher = self.scheduler.kv_event_publisher
        real_publish = publisher.publish
        publisher.publish = lambda batch: (self.published.append(batch), real_publish(batch))

    def add(self, prompt: List[int], max_tokens: int = 4, salt: Optional[str] = None,
            params: Optional[Dict[str, Any]] = None) -> Request:
        self._ids += 1
        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        sp.update_from_generation_config({}, EOS)
        req = Request(request_id=f"r{self._ids}", prompt_token_ids=list(prompt),
                      sampling_params=sp, pooling_params=None, cache_salt=salt,
                      block_hasher=get_request_block_hasher(BLOCK, sha256))
        req.kv_transfer_params = params
        self.scheduler.add_request(req)
        self.outputs[req.request_id] = []
        return req

    def block_ids(self, req_id: str) -> Any:
        """Group 0's block ids; every group's (a tuple) for a hybrid model."""
        ids = self.scheduler.kv_cache_manager.get_block_ids(req_id)
        return tuple(ids) if self.hybrid else ids[0]

    def step(self, before_update=None) -> Any:
        so = self.scheduler.schedule()
        merged = self.execute(so)
        if before_update is not None:
            before_update(so)
        self.update(so, merged)
        return so

    def execute(self, so: Any) -> ModelRunnerOutput:
        """The workers run a step (SchedulerOutput `so`); their merged output."""
        outputs = []
        for w in self.workers:
            c = w.connector
            c.bind_connector_metadata(so.kv_connector_metadata)
            if so.preempted_req_ids:
                c.handle_preemptions(so.kv_connector_metadata)
            # vLLM's order: start_load_kv, then the forward pass (a load of the block that
            # holds a prompt's last token lands before the forward pass rewrites that token).
            c.start_load_kv(None)
            # Forward pass: write KV for every scheduled token.
            for new in so.scheduled_new_reqs:
                req = self.scheduler.requests[new.req_id]
                n = so.num_scheduled_tokens[new.req_id]
                w.write(self.block_ids(new.req_id), req.all_token_ids, new.num_computed_tokens,
                        new.num_computed_tokens + n)
            cached = so.scheduled_cached_reqs
            for i, req_id in enumerate(cached.req_ids):
                req = self.scheduler.requests[req_id]
                start = cached.num_computed_tokens[i]
                w.write(self.block_ids(req_id), req.all_token_ids, start,
                        start + so.num_scheduled_tokens[req_id])
            # A step without a forward pass skips wait_for_save (vLLM 0.26's no_forward).
            if so.total_num_scheduled_tokens > 0:
                c.wait_for_save()
            sending, recving, failed = finished(c, so.finished_req_ids)
            if failed:
                self.failed_reported |= failed
            kvo = KVConnectorOutput(finished_sending=sending or None,
                                    finished_recving=recving or None,
                                    **({"failed_recving": failed} if failed else {}),
                                    invalid_block_ids=c.get_block_ids_with_load_errors(),
                                    kv_connector_stats=c.get_kv_connector_stats(),
                                    kv_connector_worker_meta=c.build_connector_worker_meta())
            c.clear_connector_metadata()
            outputs.append(self._runner_output(so, kvo))
        merged = self.aggregator.aggregate(outputs)
        kvo = merged.kv_connector_output
        if kvo is not None:
            self.invalid_reported |= set(kvo.invalid_block_ids or ())
        return merged

    def update(self, so: Any, merged: ModelRunnerOutput) -> None:
        """The scheduler takes a step's output (Scheduler.update_from_output)."""
        eco = self.scheduler.update_from_output(so, merged)
        for out in eco.values():
            # vLLM merges the workers' and the scheduler's connector stats here.
            stats = out.scheduler_stats.kv_connector_stats if out.scheduler_stats else None
            for k, v in (stats or {}).items():
                self.stats[k] = self.stats.get(k, 0) + v
            for o in out.outputs:
                self.outputs[o.request_id].extend(o.new_token_ids)
                if o.finish_reason is not None:
                    self.finished.append(o.request_id)

    def _runner_output(self, so: Any, kvo: KVConnectorOutput) -> ModelRunnerOutput:
        req_ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = self.scheduler.requests[rid]
            done = req.num_computed_tokens  # already advanced by schedule()
            # A token is sampled once the whole known sequence has been computed.
            sampled.append([self._next_token(req)] if done >= req.num_tokens else [])
        return ModelRunnerOutput(req_ids=req_ids,
                                 req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, logprobs=None,
                                 prompt_logprobs_dict={}, pooler_output=None,
                                 kv_connector_output=None if kvo.is_empty() else kvo)

    @staticmethod
    def _next_token(req: Request) -> int:
        # Deterministic "greedy" token from the sequence so far (never EOS).
        return 10 + (sum(req.all_token_ids) * 31 + len(req.all_token_ids)) % 400

    def run(self, max_steps: int = 200) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_requests():
                return
            self.step()
        raise AssertionError("requests did not finish")

    def drain_stores(self, timeout: float = 30.0) -> None:
        """Wait for the workers' background stores; count their stats."""
        for w in self.workers:
            assert w.connector.worker.drain(timeout), "stores did not finish"
            stats = w.connector.get_kv_connector_stats()
            for k, v in (stats.data if stats else {}).items():
                self.stats[k] = self.stats.get(k, 0) + v

    def shutdown(self) -> None:
        for w in self.workers:
            w.connector.shutdown()
        self.connector.shutdown()
