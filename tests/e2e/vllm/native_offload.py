"""vLLM's own OffloadingConnector (CPUOffloadingSpec) in vLLM's real Scheduler, with a worker
standing in for its GPU one, to count the engine steps of its loads (test_load_steps.py).

The scheduler side is vLLM's, unchanged: its lookup, its hybrid hit rule, its load and store
jobs. The worker (NativeWorker) does what vLLM's OffloadingConnectorWorker reports, without
a GPU: a store job completes in the step that receives it; a load job lands `land_s` after
its step submitted it and is reported (finished_recving, the job completed) by the first
step whose get_finished finds it landed -- vLLM's worker polls its CUDA events there and
never waits. No KV bytes move: only the steps are counted.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheTensor
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.structured_output import StructuredOutputManager

import harness
from harness import BLOCK, Engine


class NativeWorker:
    def __init__(self, land_s: float) -> None:
        self.land_s = land_s
        self.loads: Dict[int, Tuple[str, float]] = {}   # job -> (request, when it lands)

    def run(self, meta: Any) -> KVConnectorOutput:
        done = OffloadingWorkerMetadata()
        now = time.monotonic()
        for job_id in meta.store_jobs:
            done.mark_completed(job_id)
        for job_id, job in meta.load_jobs.items():
            self.loads[job_id] = (job.req_id, now + self.land_s)
        recving = set()
        for job_id, (req_id, at) in list(self.loads.items()):
            if at <= time.monotonic():
                del self.loads[job_id]
                done.mark_completed(job_id)
                recving.add(req_id)
        return KVConnectorOutput(finished_recving=recving or None,
                                 kv_connector_worker_meta=done if done.completed_jobs else None)


class NativeEngine:
    """The scheduler with vLLM's OffloadingConnector, one NativeWorker; execute / update as
    harness.Engine's (steps_to_forward drives either)."""

    def __init__(self, model_dir: str, land_s: float, window: int, num_blocks: int = 512) -> None:
        self.config = harness.vllm_config(model_dir, {})
        self.config.kv_transfer_config = KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"spec_name": "CPUOffloadingSpec",
                                       "cpu_bytes_to_use": 1 << 26, "block_size": BLOCK})
        self.config.cache_config.num_gpu_blocks = num_blocks
        kvc = harness.kv_cache_config(num_blocks, window)
        if "shared_by" in getattr(KVCacheTensor, "__dataclass_fields__", {}):
            # vLLM 0.26 sizes its CPU cache from the tensors' bytes per block (layer i of
            # each group sharing one tensor, as harness.Worker lays them out); >= 0.27
            # from the groups' specs.
            page = kvc.kv_cache_groups[0].kv_cache_spec.page_size_bytes
            kvc.kv_cache_tensors = [
                KVCacheTensor(size=num_blocks * page,
                              shared_by=[g.layer_names[i] for g in kvc.kv_cache_groups])
                for i in range(len(kvc.kv_cache_groups[0].layer_names))]
        self.scheduler = Scheduler(
            vllm_config=self.config, kv_cache_config=kvc,
            log_stats=True, structured_output_manager=StructuredOutputManager(self.config),
            block_size=BLOCK)
        self.worker = NativeWorker(land_s)
        self.outputs: Dict[str, List[int]] = {}
        self._ids = 0

    add = Engine.add   # the same requests (their ids, sampling, block hasher)

    def execute(self, so: Any) -> ModelRunnerOutput:
        kvo = self.worker.run(so.kv_connector_metadata)
        req_ids = list(so.num_scheduled_tokens)
        sampled = [[Engine._next_token(self.scheduler.requests[r])]
                   if self.scheduler.requests[r].num_computed_tokens >=
                   self.scheduler.requests[r].num_tokens else [] for r in req_ids]
        return ModelRunnerOutput(req_ids=req_ids,
                                 req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, logprobs=None,
                                 prompt_logprobs_dict={}, pooler_output=None,
                                 kv_connector_output=None if kvo.is_empty() else kvo)

    def update(self, so: Any, out: ModelRunnerOutput) -> None:
        for o in self.scheduler.update_from_output(so, out).values():
            for r in o.outputs:
                self.outputs.setdefault(r.request_id, []).extend(r.new_token_ids)

    def run(self, steps: int = 200) -> None:
        """Step until no request is left, then a few steps more (stores of the last ones)."""
        for _ in range(steps):
            idle = not self.scheduler.has_requests()
            so = self.scheduler.schedule()
            self.update(so, self.execute(so))
            if idle and not so.kv_connector_metadata.store_jobs:
                return
        raise AssertionError("requests did not finish")

    def drop_gpu_prefix_cache(self) -> None:
        """vLLM's own prefix cache forgotten, the connector's CPU cache kept (the benchmark's
        reset between phases)."""
        assert self.scheduler.kv_cache_manager.reset_prefix_cache()
