"""PrefillModel: how long an engine takes to compute tokens, measured from its own steps.

The shape comes from the model's arithmetic (prefill_flops): a step computing n new tokens
after c tokens of context costs about `overhead + scale * (linear * n + attention * n *
(c + n / 2))`, its linear part the weights' FLOPs per token and its attention part the
FLOPs per token and context token, both divided by a device rate. The two numbers that the
arithmetic cannot know -- the step's fixed cost (`overhead`) and how fast this engine runs
the arithmetic (`scale`) -- are fitted to the steps the engine's scheduler reports: each
step's scheduled tokens and context (step_built) against its duration (the time to
step_done, the step's output). The fit is a least-squares one over the last WINDOW steps,
pulled toward the prior (a fast device: an unmeasured engine is assumed to compute quickly,
so a slow tier is not trusted to beat it), so a handful of odd steps moves it little; the
pull is weighed at a full chunk's work, so only steps that compute a real part of a chunk
move the per-FLOP rate (small steps teach the fixed cost). Steps
that loaded KV in the step itself are not fitted (the load is in their time). An engine
that reports no steps (SGLang's storage backend sees none) is priced by the prior alone.

Steps are numbered by the caller (kvstrata_vllm: KVStrataMetadata.step, which the workers
send back with the step's output), so a duration is always that step's, whatever the
engine skips (an empty step has no forward pass and no output). With asynchronous
scheduling an engine builds step k+1 before step k's output arrives: a step's duration runs
from the later of its build and the previous output to its own output.
Not thread-safe: one thread (the engine's scheduler) calls everything.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

WINDOW = 256                 # steps fitted
PRIOR_WEIGHT = 2.0           # the prior counts as this many steps
GPU_FLOPS = 1.0e15           # prior device rate: faster than any H100/H200 really runs prefill
CPU_FLOPS = 2.0e12
PRIOR_OVERHEAD_MS = 2.0
_MAX_PENDING = 8             # steps built and not yet done (async scheduling keeps 1-2)


@dataclass(frozen=True)
class PrefillFlops:
    """FLOPs per computed token (`linear`) and per token and context token (`attention`)."""
    linear: float
    attention: float


def prefill_flops(text_config: Any) -> PrefillFlops:
    """The model's FLOPs from its Hugging Face text config (the engine's `hf_text_config`;
    a Llama-style decoder; MoE counts the active experts; a sliding-window layer attends to
    its window only); a generic 8B model's where the config lacks a field (None: all of
    them)."""
    cfg = text_config

    def get(name: str, default: float) -> float:
        value = getattr(cfg, name, None)
        return float(value) if isinstance(value, (int, float)) and value else default

    hidden = get("hidden_size", 4096)
    layers = get("num_hidden_layers", 32)
    heads = get("num_attention_heads", 32)
    head_dim = get("head_dim", hidden / heads)
    kv_heads = get("num_key_value_heads", heads)
    inter = get("intermediate_size", 14336)
    experts = get("num_experts_per_tok", 0)
    if experts:
        inter = experts * get("moe_intermediate_size", inter) + \
            get("n_shared_experts", 0) * get("moe_intermediate_size", inter)
    vocab = get("vocab_size", 128256)
    attn_params = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    params = layers * (attn_params + 3 * hidden * inter) + vocab * hidden
    # A sliding-window layer (`layer_types`, gpt-oss / Gemma 3) reads at most its window:
    # its attention is per token, not per context token.
    types = getattr(cfg, "layer_types", None)
    window = get("sliding_window", 0)
    windowed = sum(1 for t in types if t == "sliding_attention") \
        if isinstance(types, (list, tuple)) and window else 0
    per_layer = 4.0 * heads * head_dim
    return PrefillFlops(linear=2.0 * params + per_layer * windowed * window,
                        attention=per_layer * (layers - windowed))


class PrefillModel:
    def __init__(self, flops: PrefillFlops, device_flops: float, chunk_tokens: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flops = flops
        self.chunk_tokens = max(1, int(chunk_tokens))   # max_num_batched_tokens
        self._prior = (PRIOR_OVERHEAD_MS, 1e3 / device_flops)  # (ms, ms per FLOP)
        self.overhead_ms, self.ms_per_flop = self._prior
        self._clock = clock
        self._samples: Deque[Tuple[float, float]] = deque(maxlen=WINDOW)  # (FLOPs, ms)
        # Steps built, not yet done, by number: (built at, FLOPs, clean), in build order.
        self._pending: Dict[int, Tuple[float, float, bool]] = {}
        self._last_done: Optional[float] = None
        self._since_fit = 0
        self.step_ms = PRIOR_OVERHEAD_MS      # recent mean step duration (any step)
        # Recent mean duration of the steps that loaded nothing in the step (None before one).
        self.clean_step_ms: Optional[float] = None
        self.steps = 0

    def work(self, tokens: int, context: int) -> float:
        """FLOPs of computing `tokens` new tokens after `context` tokens."""
        n = max(0, tokens)
        return self.flops.linear * n + self.flops.attention * n * (context + n / 2.0)

    def step_built(self, step: int, requests: List[Tuple[int, int]], clean: bool) -> None:
        """Step number `step` was scheduled: (new tokens, context before them) per request;
        clean: nothing in it loads KV in the step."""
        work = sum(self.work(n, c) for n, c in requests)
        self._pending[step] = (self._clock(), work, clean and bool(requests))
        while len(self._pending) > _MAX_PENDING:
            # A step whose output never came (vLLM runs no forward pass for an empty one).
            del self._pending[next(iter(self._pending))]

    def compute_step_ms(self) -> float:
        """What a step of this engine computes, for an in-step copy to hide behind: the recent
        mean duration of the steps that loaded nothing in the step (any step's before the
        first of them). Not of every step: a step that waited for an in-step copy is longer
        by the wait, and a rule judged against such steps lets more stalls through the
        longer they make the steps. (Not the fit's prediction either: its straight line over
        every step shape missed a busy batch's 120 ms steps by 45 % in
        test_load_planner.py.)"""
        return self.step_ms if self.clean_step_ms is None else self.clean_step_ms

    def step_done(self, step: int) -> None:
        """Step number `step`'s output arrived (the workers send its number back)."""
        now = self._clock()
        pending = self._pending.pop(step, None)
        last, self._last_done = self._last_done, now
        if pending is None:
            return
        built, work, clean = pending
        start = built if last is None else max(built, last)
        ms = (now - start) * 1e3
        self.steps += 1
        self.step_ms += (ms - self.step_ms) * 0.1
        if clean and ms > 0:
            c = self.clean_step_ms
            self.clean_step_ms = ms if c is None else c + (ms - c) * 0.1
            self._samples.append((work, ms))
            self._since_fit += 1
            if self._since_fit >= 8:
                self._fit()

    def _fit(self) -> None:
        """Least squares of ms = overhead + ms_per_flop * FLOPs over the samples, with the
        prior as PRIOR_WEIGHT pseudo-samples at each of the two parameters."""
        self._since_fit = 0
        o0, k0 = self._prior
        # FLOPs normalised by at least one full chunk's: the prior's pull on the slope is
        # weighed at the size of prefill the planner predicts, so steps far smaller than a
        # chunk (decodes, 1-token hits; their time is mostly the fixed cost) cannot set the
        # slope -- their noise, extrapolated to a 32K prefill, predicted 20x its real time.
        scale = max(max((w for w, _ in self._samples), default=0.0),
                    self.work(self.chunk_tokens, 0)) or 1.0
        lam = PRIOR_WEIGHT
        # Normal equations of [1, x] with ridge terms toward (o0, k0 * scale).
        s1 = len(self._samples) + lam
        sx = sum(w / scale for w, _ in self._samples)
        sxx = sum((w / scale) ** 2 for w, _ in self._samples) + lam
        sy = sum(ms for _, ms in self._samples) + lam * o0
        sxy = sum(w / scale * ms for w, ms in self._samples) + lam * k0 * scale
        det = s1 * sxx - sx * sx
        if det <= 0:
            return
        overhead = (sy * sxx - sx * sxy) / det
        slope = (s1 * sxy - sx * sy) / det / scale
        if slope <= 0 or not math.isfinite(slope):
            return  # no usable signal yet: keep the last fit
        self.overhead_ms = max(0.0, overhead)
        self.ms_per_flop = slope

    def queue_ms(self, tokens: int, flops: float) -> float:
        """Milliseconds to compute a queue of prefill work: `tokens` new tokens of several
        requests together, `flops` their work() summed, in chunks of chunk_tokens."""
        if tokens <= 0:
            return 0.0
        steps = math.ceil(tokens / self.chunk_tokens)
        return steps * self.overhead_ms + self.ms_per_flop * max(0.0, flops)

    def predict_ms(self, tokens: int, context: int) -> float:
        """Milliseconds to compute `tokens` tokens after `context` tokens, in chunks of
        chunk_tokens (one step's overhead each)."""
        n = max(1, tokens)
        steps = math.ceil(n / self.chunk_tokens)
        return steps * self.overhead_ms + self.ms_per_flop * self.work(n, context)
