"""Pipeline parallelism: the engine's workers (stages x tensor-parallel ranks) and the layers
each stage's namespaces hold.

vLLM splits a model's decoder layers into pipeline_parallel_size stages
(vllm.distributed.utils.get_pp_indices); a stage's workers hold the KV cache of its layers
only, so each stage stores into and loads from namespaces of its own (its pp_rank, its
layer count): namespaces of two stages never share a block. A unit is a hit only when
every stage holds it.

The scheduler is handed stage 0's KV cache config (vLLM's generate_scheduler_kv_cache_config
copies worker 0's), so it derives every stage's layer count the way vLLM's models split
their layers; it checks stage 0's against its own config, and every worker checks its own
stage at start-up. A stage whose namespace would not be the one the scheduler looks up
(its KV cache holds another number of layers, e.g. decoder layers without a KV cache of
their own) is refused, in one line, instead of never hitting.

A worker's rank -- the key of its namespaces and of the leases its loads consume -- is
pp_rank * tp_size + tp_rank, vLLM's order (PP outside TP); with one stage it is the
tensor-parallel rank.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Tuple

from .namespace import KvGroup


@dataclass(frozen=True)
class Ranks:
    """The engine's workers: pp_size stages of tp_size tensor-parallel ranks each."""

    tp_size: int = 1
    pp_size: int = 1

    def rank(self, pp_rank: int, tp_rank: int) -> int:
        return pp_rank * self.tp_size + tp_rank

    def split(self, rank: int) -> Tuple[int, int]:
        """(pp_rank, tp_rank) of a rank."""
        return divmod(rank, self.tp_size)

    def of_group(self, group: KvGroup) -> List[int]:
        """The ranks whose namespaces hold a group's units, and are looked up: every rank
        of every stage; one rank per stage (its tp_rank 0) for an MLA group, whose latent
        KV every tensor-parallel rank of the stage shares (KvGroup.replicated)."""
        per_stage = range(1) if group.replicated else range(self.tp_size)
        return [self.rank(p, t) for p in range(self.pp_size) for t in per_stage]


def engine_ranks(vllm_config: Any) -> Ranks:
    parallel = vllm_config.parallel_config
    return Ranks(tp_size=int(getattr(parallel, "tensor_parallel_size", 1) or 1),
                 pp_size=int(getattr(parallel, "pipeline_parallel_size", 1) or 1))


def stage_layer_counts(vllm_config: Any, pp_size: int) -> List[int]:
    """The decoder layers of each stage, as vLLM's models split them (get_pp_indices, which
    follows VLLM_PP_LAYER_PARTITION)."""
    from vllm.distributed.utils import get_pp_indices  # noqa: PLC0415

    total = int(vllm_config.model_config.get_total_num_hidden_layers())
    return [end - start for start, end in (get_pp_indices(total, s, pp_size)
                                           for s in range(pp_size))]


def stage_groups(vllm_config: Any, groups: List[KvGroup], pp_size: int,
                 pp_rank: int) -> List[List[KvGroup]]:
    """Every stage's KV cache groups, from `groups`, stage pp_rank's own (its KV cache
    config): the same geometry, each stage's layer count. ValueError, one line, for what
    the connector cannot serve under pipeline parallelism: several KV cache groups, or
    stage pp_rank holding other layers than vLLM's split gives it."""
    if pp_size == 1:
        return [groups]
    if len(groups) > 1:
        kinds = ", ".join(g.label for g in groups)
        raise ValueError(f"KVStrataConnector serves pipeline parallelism for models with one "
                         f"KV cache group; this one has {len(groups)} ({kinds}): serve it "
                         f"with pipeline_parallel_size 1, or with "
                         f"--disable-hybrid-kv-cache-manager (one group)")
    counts = stage_layer_counts(vllm_config, pp_size)
    (group,) = groups
    if group.geometry.num_layers != counts[pp_rank]:
        raise ValueError(f"KVStrataConnector cannot serve pipeline stage {pp_rank} of "
                         f"{pp_size}: its KV cache holds {group.geometry.num_layers} layers "
                         f"(e.g. {group.layer_names[0] if group.layer_names else '?'!r}), but "
                         f"the model's {sum(counts)} layers split {counts} across the stages, "
                         f"so the scheduler would look up other namespaces; serve it with "
                         f"pipeline_parallel_size 1")
    return [[dataclasses.replace(group, geometry=dataclasses.replace(group.geometry,
                                                                    num_layers=n))]
            for n in counts]
