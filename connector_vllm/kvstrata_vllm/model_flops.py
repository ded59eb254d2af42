"""The served model's arithmetic for the load planner (kvstrata.planning.prefill_flops),
read from vLLM's config: `vllm_config.model_config.hf_text_config`."""
from __future__ import annotations

from typing import Any

from kvstrata import planning


def prefill_flops(vllm_config: Any) -> planning.PrefillFlops:
    """FLOPs per token and per token and context token of vLLM's model (a generic 8B
    model's where the config lacks a field)."""
    model_config = getattr(vllm_config, "model_config", None)
    return planning.prefill_flops(getattr(model_config, "hf_text_config", None))
