"""PagePlanner: batch_exists answers only the leading pages worth prefetching.

SGLang asks the backend how many leading pages of a request it holds (batch_exists, from
its prefetch thread) and prefetches that many into its host pool; the rest it computes.
That answer is the one thing SGLang lets a backend decide, so the load planner
(kvstrata.planning, the same one kvstrata_vllm uses) sits here: the lookup's per-page tiers
are priced per tier against the prefill of those pages' tokens, and the answer is the
leading pages whose load beats computing them (docs/load-planner.md).

- Compute: the model's arithmetic (kvstrata.planning.prefill_flops of SGLang's model
  config, read from SGLang's server arguments in this process) at the planner's prior
  device rate. SGLang shows a storage backend none of its steps, so the rate is never
  fitted: the prior assumes a fast device, which errs toward computing.
- Tiers: each tier's speed measured from this backend's own batch_get times (the tier of a
  page is the one batch_exists saw; a batch is charged to its lowest tier), a get still
  running at twice its prediction counting at once (a stalled tier is priced out while its
  first get is stuck), and from the promotions of the pages it cut (PromotionWatch): the
  pages below L1 that are not answered are promoted into L1 in the background by a leased
  lookup, so the next request finds them in L1, and the tier is still measured.
- Queue: pages answered and not fetched yet (SGLang's prefetch I/O thread fetches one
  request's pages after another's) are loaded before this request's; pages SGLang never
  fetches (a revoked prefetch) leave the queue after QUEUE_TTL_S.
- Deadlines: an answer with pages below L1 carries the deadline of its plan
  (kvstrata.planning.GiveUp); the get of that batch loads its pages as they reach L1 and
  gives up at it (staged_get.py).
- Context: the tokens before the batch are known only when SGLang passes the prefix keys
  (extra-config "hicache_storage_pass_prefix_keys": true); otherwise a batch is priced as
  if it started the sequence, which makes computing look cheaper (errs toward computing).

Thread-safe: SGLang's prefetch thread plans, its I/O thread times the gets.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple

from kvstrata import Tier
from kvstrata.planning import (CPU_FLOPS, GPU_FLOPS, GiveUp, LoadPlanner, Plan, PrefillFlops,
                               PrefillModel, PromotionWatch, TierSpeeds, give_up_schedule,
                               overdue, prefill_flops)

from .keys import page_keys

log = logging.getLogger("kvstrata_sglang")
QUEUE_TTL_S = 30.0        # answered pages SGLang has not fetched by then left the queue
MAX_QUEUED = 1 << 16      # pages remembered (the oldest are forgotten first)
MAX_DEADLINES = 4096      # answered batches whose deadline is remembered
_L1 = int(Tier.L1)


@dataclass(frozen=True)
class EngineModel:
    """What the planner knows of the engine: the model's arithmetic and where it runs."""
    flops: PrefillFlops
    device: Optional[str]     # SGLang's --device ("cuda", "cpu", ...); None: no engine here
    chunk_tokens: int         # SGLang's chunked-prefill size (tokens per step)
    source: str               # where the model config came from (for the log)


def _server_args() -> Any:
    """SGLang's server arguments in this process (None outside an engine: tests, tools)."""
    try:  # SGLang 0.5.23
        from sglang.srt.runtime_context import get_server_args
        args = get_server_args()
        if args is not None:
            return args
    except Exception:  # noqa: BLE001 - any SGLang without it, or an unset context
        pass
    try:  # SGLang 0.5.17
        from sglang.srt.server_args import get_global_server_args
        return get_global_server_args()
    except Exception:  # noqa: BLE001
        return None


def engine_model() -> EngineModel:
    """The engine's model arithmetic from SGLang's model config (ModelConfig of the server
    arguments: its hf_text_config); a generic 8B model on a GPU without an engine."""
    args = _server_args()
    if args is None:
        return EngineModel(prefill_flops(None), None, 8192, "a generic 8B model (no SGLang "
                           "server arguments in this process)")
    device = str(getattr(args, "device", "cuda") or "cuda")
    chunk = getattr(args, "chunked_prefill_size", None)
    chunk = int(chunk) if isinstance(chunk, int) and chunk > 0 else 8192
    text_config, source = None, "a generic 8B model (SGLang's model config unreadable)"
    try:
        from sglang.srt.configs.model_config import ModelConfig
        text_config = ModelConfig.from_server_args(args).hf_text_config
        source = f"SGLang's model config of {getattr(args, 'model_path', '?')}"
    except Exception as err:  # noqa: BLE001 - the planner must not stop the engine
        log.warning("kvstrata: load planner: SGLang's model config: %s; pricing a generic "
                    "8B model", err)
    return EngineModel(prefill_flops(text_config), device, chunk, source)


def planner_wanted(mode: str, model: EngineModel) -> bool:
    """load_planner: "on", "off", or "auto" (on where SGLang runs on an accelerator; off
    for a CPU engine and outside an engine, e.g. a host pool driven by tests or tools)."""
    return mode == "on" or (mode == "auto" and model.device not in (None, "cpu"))


@dataclass
class _Get:
    tier: Optional[int]       # None: batch_exists saw none of its pages (no sample)
    nbytes: int
    started: float
    predicted_ms: float


class PagePlanner:
    def __init__(self, link: Any, page_tokens: int, page_bytes: int, model: EngineModel,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.page_tokens = page_tokens
        self.page_bytes = page_bytes
        self._clock = clock
        # The prior device rate: a fast one unless SGLang runs on the CPU.
        prefill = PrefillModel(model.flops, CPU_FLOPS if model.device == "cpu" else GPU_FLOPS,
                               model.chunk_tokens, clock=clock)
        self.planner = LoadPlanner(prefill, TierSpeeds(clock=clock))
        self.watch = PromotionWatch(link, self.planner.tiers, clock=clock)
        self._lock = threading.Lock()
        self._answered: "OrderedDict[bytes, Tuple[int, float]]" = OrderedDict()  # the queue
        self._gets: Dict[int, _Get] = {}
        self._next_get = 0
        # A batch's first key -> its deadline and its pages' tiers (answered, not fetched).
        self._deadlines: "OrderedDict[bytes, Tuple[GiveUp, Tuple[int, ...], float]]" = \
            OrderedDict()

    @property
    def tiers(self) -> TierSpeeds:
        return self.planner.tiers

    # ------------------------------------------------------------------ batch_exists

    def plan(self, keys: Sequence[bytes], tiers: Sequence[int],
             prefix_keys: Optional[Sequence[str]]) -> Plan:
        """How many of the leading `tiers` (the lookup's hit, one per page of `keys`) to
        answer. prefix_keys: SGLang's page hashes before the batch (None: unknown)."""
        first = self._first(prefix_keys)
        hit = len(tiers)
        # The request's own pages (this batch, the earlier ones) are no queue in front of it.
        own = set(keys[:hit])
        if prefix_keys:
            own.update(page_keys(list(prefix_keys)))
        with self._lock:
            now = self._clock()
            self._censor(now)
            self.planner.set_queue(self._queued(now, own))
            # The request computes at least one token after the pages it asks about.
            return self.planner.plan([int(t) for t in tiers], first, self.page_tokens,
                                     first + hit * self.page_tokens + 1, self.page_bytes,
                                     in_step_ok=False)

    def _first(self, prefix_keys: Optional[Sequence[str]]) -> int:
        return len(prefix_keys) * self.page_tokens if prefix_keys else 0

    def give_up(self, plan: Plan, tiers: Sequence[int],
                prefix_keys: Optional[Sequence[str]]) -> Optional[GiveUp]:
        """The deadline of a plan that loads pages below L1 (None otherwise)."""
        if not any(int(t) != _L1 for t in tiers[:plan.units]):
            return None
        first = self._first(prefix_keys)
        return give_up_schedule(self.planner.prefill, plan, [int(t) for t in tiers], first,
                                self.page_tokens, first + len(tiers) * self.page_tokens + 1)

    def answered(self, keys: Sequence[bytes], tiers: Sequence[int],
                 give_up: Optional[GiveUp] = None) -> None:
        """SGLang will fetch these pages (the answer of batch_exists): the queue; the get
        of the batch gives up at `give_up` (give_up_of)."""
        now = self._clock()
        with self._lock:
            for k, t in zip(keys, tiers):
                self._answered[k] = (int(t), now)
                self._answered.move_to_end(k)
            while len(self._answered) > MAX_QUEUED:
                self._answered.popitem(last=False)
            if give_up is not None and keys:
                self._deadlines[keys[0]] = (give_up, tuple(int(t) for t in tiers), now)
                self._deadlines.move_to_end(keys[0])
            cutoff = now - QUEUE_TTL_S
            while self._deadlines and (len(self._deadlines) > MAX_DEADLINES or
                                       next(iter(self._deadlines.values()))[2] < cutoff):
                self._deadlines.popitem(last=False)

    def give_up_of(self, keys: Sequence[bytes]) -> Optional[Tuple[GiveUp, Tuple[int, ...]]]:
        """The deadline and the pages' tiers batch_exists gave the batch that starts with
        keys[0] (None: the get waits for every page, as the daemon does)."""
        with self._lock:
            got = self._deadlines.pop(keys[0], None) if keys else None
        return None if got is None else (got[0], got[1])

    def _queued(self, now: float, own: Set[bytes]) -> Dict[int, int]:
        """Bytes per tier answered and not fetched yet, the request's own pages aside."""
        cutoff = now - QUEUE_TTL_S
        while self._answered:
            k, (_, at) = next(iter(self._answered.items()))
            if at >= cutoff:
                break
            del self._answered[k]
        out: Dict[int, int] = {}
        for k, (t, _) in self._answered.items():
            if k not in own:
                out[t] = out.get(t, 0) + self.page_bytes
        return out

    def probe_cut(self, namespace: Any, keys: Sequence[bytes], tiers: Sequence[int]) -> int:
        """The pages cut (`keys`, their tiers) are not prefetched and nothing promotes them:
        a probe promotes the leading pages of their first run below L1 (up to the watch's
        PROBE_BYTES, at most every PROBE_EVERY_S per tier) and times it. Returns the pages
        it promotes."""
        u = 0
        while u < len(tiers) and int(tiers[u]) == _L1:
            u += 1
        if u >= len(tiers):
            return 0
        end = u
        while end < len(tiers) and int(tiers[end]) == int(tiers[u]):
            end += 1
        return self.watch.probe(int(tiers[u]), [namespace], keys[u:end], self.page_bytes)

    def watch_promotion(self, namespace: Any, keys: Sequence[bytes], tiers: Sequence[int],
                        started: float) -> None:
        """The cut pages `keys` (their tiers) were promoted by a leased lookup at `started`:
        time the first run below L1 (PromotionWatch)."""
        u = 0
        while u < len(tiers) and int(tiers[u]) == _L1:
            u += 1
        if u >= len(tiers):
            return
        end = u
        while end < len(tiers) and int(tiers[end]) == int(tiers[u]):
            end += 1
        self.watch.watch(int(tiers[u]), namespace, keys[end - 1],
                         (end - u) * self.page_bytes, started)

    # ------------------------------------------------------------------ batch_get

    def get_started(self, keys: Sequence[bytes]) -> int:
        """A get of these pages starts: they leave the queue; its tier is the lowest one
        batch_exists saw among them (none seen: its time is no sample). Returns its id."""
        with self._lock:
            seen = [t for t, _ in filter(None, (self._answered.pop(k, None) for k in keys))]
            tier = max(seen) if seen else None
            nbytes = len(keys) * self.page_bytes
            predicted = self.planner.tiers.predict_ms(tier, nbytes) if seen else 0.0
            self._next_get += 1
            self._gets[self._next_get] = _Get(tier, nbytes, self._clock(), predicted)
            return self._next_get

    def get_ended(self, get_id: int, timed: bool) -> None:
        """The get is over; timed: it reached the daemon (its time is a sample)."""
        with self._lock:
            g = self._gets.pop(get_id, None)
        if g is not None and g.tier is not None and timed:
            self.tiers.add(g.tier, g.nbytes, (self._clock() - g.started) * 1e3,
                           key=f"get:{get_id}")

    def _censor(self, now: float) -> None:
        """Gets running well past their prediction count as at least that slow now."""
        for get_id, g in self._gets.items():
            ms = (now - g.started) * 1e3
            if g.tier is not None and overdue(ms, g.predicted_ms):
                self.tiers.add(g.tier, g.nbytes, ms, key=f"get:{get_id}")

    def close(self) -> None:
        self.watch.close()
