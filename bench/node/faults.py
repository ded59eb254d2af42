"""The node benchmark's fault phases (issue 41, item 3): a rolling restart and an engine
killed during its loads, on a role's running replicas, after its routing modes.

R is the last replica (index replicas - 1).

restart  A sticky workload (its own seed) runs every conversation's turns but the last, so
         every replica holds conversations' prefixes (kvstrata: in the node's kvstratad;
         native: in each replica's own CPU cache). R is stopped as the role stops its
         replicas (SIGTERM to its process group; kvstrata: after the daemon is idle, so its
         stores are in), started again with the same arguments, environment and port, and
         /health is polled every 0.1 s from the start command. At once, the last turn of
         every conversation goes to R alone (the conversations R served before the restart
         and those the others served), `concurrency` in flight. Per request: TTFT and the
         cached tokens the server reports (usage.prompt_tokens_details.cached_tokens), and
         the part of them R could have found in its own GPU prefix cache since the restart
         (`own_prefix`: the longest block-aligned prefix the request shares with another
         request sent to R before its first token); only cached tokens beyond that came
         from outside R (a node cache). Reported: R's stop and start-to-/health seconds,
         the time from /health to the first token of the first response with cached tokens
         beyond its own prefix ("first hit"; and with any cached tokens), and the fraction
         of prompt tokens cached (and cached beyond own prefix) over the first N requests
         sent and over all.
         Target (kvstrata roles): first hit <= 1 s after /health.
kill     A workload over all replicas (--fault-kill-mode, sticky by default, its own seed).
         Once every conversation's first turn is done and window_s more have passed (the
         window before the kill then holds later turns only, like the window after it), at
         least --fault-kill-after-s from the start, and once R has a later turn in flight
         (its prefix is being loaded; at most 5 s more of waiting for one), the router
         marks R dead and R's whole process group gets SIGKILL (the server and vLLM's
         EngineCore child). The router sends nothing more to R: sticky conversations homed
         on R move to the live replica with the fewest conversations, a turn that failed on
         R is sent again to a live replica (the failure is counted), and the requests in
         flight drop to the live replicas' share of --concurrency (--fault-keep-load: each
         other replica keeps the load it had, so a TTFT change is the kill's, not more
         load). Reported: the other
         replicas' TTFT p50/p99 by the time of their first token in the window_s before the
         kill, the window_s after it, and the rest; the errors; kvstrata: the daemon sampled
         every 0.25 s (GetStats counters `sessions`, `active_leases`, `active_loads`,
         `active_reservations`; ListSessions: the sessions whose pid was in R's process
         group, with their registrations, leases and jobs; the daemon's Prometheus gauges
         `kvstrata_fenced_bytes`, `kvstrata_registrations_active`, `kvstrata_jobs_active`)
         until R's sessions are gone and no bytes are fenced (or --fault-settle-s after the
         kill). R is started again when a later fault phase of the role needs it.
         Target: the others' TTFT p99 in the window after the kill <= 1.2x the window before.
"""
from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import metrics
from router import Router
from stats import percentile

FAULTS = ("restart", "kill")
TARGET_FIRST_HIT_S = 1.0
TARGET_KILL_P99_RATIO = 1.2
DAEMON_GAUGES = ("kvstrata_fenced_bytes", "kvstrata_registrations_active",
                 "kvstrata_jobs_active", "kvstrata_sessions_active", "kvstrata_loads_active",
                 "kvstrata_leases_active")


def parse_faults(text: Optional[str]) -> List[str]:
    """"restart,kill" -> ["restart", "kill"] (in the order given); "" or "none" -> [];
    ValueError for an unknown fault or one named twice."""
    out: List[str] = []
    for f in (x.strip() for x in (text or "").split(",") if x.strip()):
        if f == "none":
            continue
        if f not in FAULTS:
            raise ValueError(f"--faults: unknown fault {f!r} (one of {', '.join(FAULTS)})")
        if f in out:
            raise ValueError(f"--faults: {f!r} named twice")
        out.append(f)
    return out


# ---------------------------------------------------------------------- restart: numbers

def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def annotate_own_prefix(records: List[Dict[str, Any]], prompts: Dict[Tuple[str, int], List[int]],
                        block: int) -> None:
    """Sets each record's `own_prefix`: the longest prefix, in whole blocks, its prompt
    shares with the prompt of any other request sent to the same replica before its first
    token (or, failed, its end): what the replica's own GPU prefix cache could have held
    for it, whatever order the server saw them in (prompts keyed by (conv, turn))."""
    for r in records:
        p = prompts[(r["conv"], r["turn"])]
        until = r["start_s"] + r["ttft_s"] if r.get("ttft_s") is not None else r["end_s"]
        best = 0
        for e in records:
            if e is not r and e["start_s"] < until:
                best = max(best, common_prefix(p, prompts[(e["conv"], e["turn"])]))
        r["own_prefix"] = best // block * block


def first_hits(records: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """Seconds from the records' origin (/health OK) to the first token of the first
    response with cached tokens (`first_cached_s`) and with cached tokens beyond its own
    prefix (`first_hit_s`: a hit from outside the replica's own GPU cache); None: none."""
    ok = [r for r in records if r.get("error") is None and r.get("ttft_s") is not None]

    def first(pred: Callable[[Dict[str, Any]], bool]) -> Optional[float]:
        ts = [r["start_s"] + r["ttft_s"] for r in ok if pred(r)]
        return round(min(ts), 4) if ts else None

    return {"first_cached_s": first(lambda r: (r.get("cached_tokens") or 0) > 0),
            "first_hit_s": first(lambda r: (r.get("cached_tokens") or 0)
                                 > r.get("own_prefix", 0))}


def cached_fractions(records: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """Over the successful records: prompt tokens cached, and cached beyond own prefix, as
    fractions of their prompt tokens; with the requests counted."""
    ok = [r for r in records if r.get("error") is None]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r.get("cached_tokens") or 0 for r in ok)
    beyond = sum(max(0, (r.get("cached_tokens") or 0) - r.get("own_prefix", 0)) for r in ok)
    return {"requests": len(ok),
            "cached_frac": round(cached / prompt, 4) if prompt else None,
            "beyond_own_frac": round(beyond / prompt, 4) if prompt else None}


def restart_numbers(records: List[Dict[str, Any]], first_n: int,
                    homes: Dict[str, str]) -> Dict[str, Any]:
    """The restart's figures from the restarted replica's records (own_prefix set): first
    hits, cached fractions over the first `first_n` requests sent and over all, and by
    where each conversation ran before the restart (homes: conv -> "R" or "others")."""
    by_start = sorted(records, key=lambda r: r["start_s"])
    ttft = [r["ttft_s"] for r in records if r.get("error") is None and r.get("ttft_s") is not None]
    return {**first_hits(records),
            "first_n": min(first_n, len(by_start)),
            "first_n_fractions": cached_fractions(by_start[:first_n]),
            "all_fractions": cached_fractions(records),
            "by_home": {h: cached_fractions([r for r in records if homes.get(r["conv"]) == h])
                        for h in ("R", "others")},
            "ttft_ms": {f"p{p}": None if (x := percentile(ttft, p)) is None else round(x * 1e3, 1)
                        for p in (50, 99)},
            "errors": sum(1 for r in records if r.get("error") is not None)}


# ---------------------------------------------------------------------- kill: numbers

def window_stats(records: List[Dict[str, Any]], kill_s: float, window_s: float,
                 victim: int) -> Dict[str, Any]:
    """The other replicas' TTFT around the kill, by the time of each request's first token:
    `before` [kill - window, kill), `after` [kill, kill + window), `rest` after that; p50
    and p99 in ms, requests and first turns among them; `p99_ratio` after/before."""
    others = [r for r in records if r.get("replica") != victim and r.get("error") is None
              and r.get("ttft_s") is not None]

    def stat(lo: float, hi: float) -> Dict[str, Any]:
        sel = [r for r in others if lo <= r["start_s"] + r["ttft_s"] < hi]
        v = [r["ttft_s"] for r in sel]
        ms = {f"p{p}_ms": None if (x := percentile(v, p)) is None else round(x * 1e3, 1)
              for p in (50, 99)}
        return {"n": len(sel), "turn1": sum(1 for r in sel if r["turn"] == 1), **ms}

    out = {"before": stat(kill_s - window_s, kill_s),
           "after": stat(kill_s, kill_s + window_s),
           "rest": stat(kill_s + window_s, float("inf"))}
    b, a = out["before"]["p99_ms"], out["after"]["p99_ms"]
    out["p99_ratio"] = round(a / b, 3) if a is not None and b else None
    return out


def error_counts(records: List[Dict[str, Any]], victim: int) -> Dict[str, Any]:
    bad = [r for r in records if r.get("error") is not None]
    return {"total": len(bad), "on_killed": sum(1 for r in bad if r.get("replica") == victim),
            "on_others": sum(1 for r in bad if r.get("replica") != victim),
            "examples": [r["error"][:160] for r in bad[:3]]}


def daemon_after_kill(samples: List[Dict[str, Any]], kill_s: float,
                      dead_pids: Sequence[int]) -> Dict[str, Any]:
    """From the daemon samples (t: seconds on the load's clock; GetStats counters, sessions
    with pids, gauges): the killed replica's sessions before the kill and at the first
    sample after it (registrations, leases, jobs), seconds after the kill until they were
    gone and until no bytes were fenced, and the last sample's figures."""
    dead = set(dead_pids)
    good = [s for s in samples if "error" not in s]

    def victim_sessions(s: Dict[str, Any]) -> Dict[str, int]:
        mine = [x for x in s.get("session_list", []) if x["pid"] in dead]
        return {"sessions": len(mine),
                **{k: sum(x[k] for x in mine) for k in ("registrations", "leases", "jobs")}}

    before = [s for s in good if s["t"] < kill_s]
    after = [s for s in good if s["t"] >= kill_s]
    out: Dict[str, Any] = {"samples": len(samples), "sample_errors": len(samples) - len(good)}
    if before:
        out["before_kill"] = {"t": before[-1]["t"], **victim_sessions(before[-1]),
                              "node_sessions": before[-1].get("sessions")}
    if not after:
        return out
    out["first_after_kill"] = {"t": after[0]["t"], **victim_sessions(after[0]),
                               "fenced_bytes": after[0].get("kvstrata_fenced_bytes")}
    gone = next((s["t"] for s in after if victim_sessions(s)["sessions"] == 0), None)
    out["sessions_gone_after_s"] = None if gone is None else round(gone - kill_s, 3)
    fenced = [s.get("kvstrata_fenced_bytes") for s in after]
    out["fenced_bytes_max"] = max((f for f in fenced if f is not None), default=None)
    zero = next((s["t"] for s in after if s.get("kvstrata_fenced_bytes") == 0), None)
    out["fenced_zero_after_s"] = None if zero is None else round(zero - kill_s, 3)
    last = after[-1]
    out["last"] = {"t": last["t"], **victim_sessions(last),
                   **{k: last.get(k) for k in ("sessions", "active_leases", "active_loads",
                                               "active_reservations", *DAEMON_GAUGES)}}
    return out


# ---------------------------------------------------------------------- targets, summary

def restart_target(role_uses_daemon: bool, first_hit_s: Optional[float]) -> str:
    if not role_uses_daemon:
        return "(no target: starts cold)"
    if first_hit_s is None:
        return f"target first hit <= {TARGET_FIRST_HIT_S:g} s after /health: MISS (no hit)"
    verdict = "PASS" if first_hit_s <= TARGET_FIRST_HIT_S else "MISS"
    return (f"target first hit <= {TARGET_FIRST_HIT_S:g} s after /health: {verdict} "
            f"({first_hit_s:.3g} s)")


def kill_target(ratio: Optional[float], control: bool = False) -> str:
    head = (f"target others' TTFT p99 after <= {TARGET_KILL_P99_RATIO:g}x "
            + ("the control's in the same window" if control else "before"))
    if ratio is None:
        return f"{head}: MISS (no figure: a window without requests)"
    verdict = "PASS" if ratio <= TARGET_KILL_P99_RATIO else "MISS"
    return f"{head}: {verdict} ({ratio:.3g}x)"


def _f(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return (f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}") + unit
    return f"{v}{unit}"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def render_faults(faults: Dict[str, Any]) -> List[str]:
    """summary.txt's Faults section (no lines for no fault phases)."""
    if not faults:
        return []
    lines = ["", "Faults (issue 41 item 3; R = the last replica). restart: R stopped, started "
             "again, then every conversation's last turn sent to R; 'beyond own' = cached "
             "tokens R could not have had from its own GPU cache since the restart. kill: "
             "SIGKILL to R's process group during its loads; the others' TTFT by first-token "
             "time in the windows before/after the kill."]
    for key, r in faults.items():
        if r.get("error"):
            lines.append(f"  {key:<18}failed: {r['error'].strip().splitlines()[0][:200]}")
            continue
        if r["fault"] == "restart":
            n = r["numbers"]
            fn, al = n["first_n_fractions"], n["all_fractions"]
            lines += [
                f"  {key:<18}R={r['replica']} stopped in {_f(r['stop_s'], ' s')}, /health "
                f"{_f(r['to_health_s'], ' s')} after its start command; first hit beyond own "
                f"{_f(n['first_hit_s'], ' s') if n['first_hit_s'] is not None else 'never'} "
                f"after /health (first cached token "
                f"{_f(n['first_cached_s'], ' s') if n['first_cached_s'] is not None else 'never'})",
                f"  {'':<18}first {n['first_n']} requests: cached {_pct(fn['cached_frac'])}, "
                f"beyond own {_pct(fn['beyond_own_frac'])}; all {al['requests']}: cached "
                f"{_pct(al['cached_frac'])}, beyond own {_pct(al['beyond_own_frac'])} (ran on R "
                f"before: {_pct(n['by_home']['R']['beyond_own_frac'])}, on the others: "
                f"{_pct(n['by_home']['others']['beyond_own_frac'])} beyond own); TTFT p50/p99 "
                f"{_f(n['ttft_ms']['p50'])}/{_f(n['ttft_ms']['p99'])} ms; errors {n['errors']}",
                f"  {'':<18}{r['target']}"]
        else:
            if r.get("kill_s") is None:
                lines.append(f"  {key:<18}no kill: the workload ended first (first turns done "
                             f"at {_f(r.get('first_turns_done_s'), ' s')}, then a "
                             f"{_f(r.get('window_s'), ' s')} window; more conversations: "
                             f"--fault-kill-conversations)")
                continue
            w, e = r["windows"], r["errors"]

            def win(x: Dict[str, Any]) -> str:
                return (f"{_f(x['p50_ms'])}/{_f(x['p99_ms'])} ms "
                        f"(n={x['n']}, {x['turn1']} first turns)")

            turns = sorted(r["in_flight_at_kill"].values())
            lines += [
                f"  {key:<18}SIGKILL to R={r['replica']} ({len(r['pids'])} processes) at "
                f"{_f(r['kill_s'], ' s')} ({r['mode']}) with {len(turns)} in flight on it "
                f"(turns {','.join(map(str, turns)) or '-'}); in flight after: {r['limit_after']}",
                f"  {'':<18}others' TTFT p50/p99: {r['window_s']:g} s before {win(w['before'])}; "
                f"{r['window_s']:g} s after {win(w['after'])}; rest {win(w['rest'])}",
                f"  {'':<18}errors {e['total']} ({e['on_killed']} on R, {e['on_others']} on the "
                f"others), turns sent again {r['retried']}, conversations moved off R "
                f"{r['rehomed']}" + (f"; R back on /health {_f(r['restart_to_health_s'], ' s')} "
                                     "after its start command" if r.get("restart_to_health_s")
                                     is not None else "")]
            c = r.get("control")
            if c:
                lines.append(f"  {'':<18}control (no kill, seed {c['seed']}, {_f(c['wall_s'], ' s')}):"
                             f" the same windows {win(c['windows']['before'])}; "
                             f"{win(c['windows']['after'])}; after / control p99 "
                             f"{_f(c['p99_ratio'], 'x')}")
            d = r.get("daemon")
            if d and d.get("first_after_kill"):
                b = d.get("before_kill", {})
                a, last = d["first_after_kill"], d.get("last", {})
                lines.append(
                    f"  {'':<18}kvstratad: R's sessions {_f(b.get('sessions'))} before the kill "
                    f"(registrations {_f(b.get('registrations'))}, leases {_f(b.get('leases'))}, "
                    f"jobs {_f(b.get('jobs'))}), {a['sessions']} at +{a['t'] - r['kill_s']:.2f} s, "
                    f"gone after {_f(d.get('sessions_gone_after_s'), ' s')}; fenced bytes max "
                    f"{_f(d.get('fenced_bytes_max'))}, 0 after "
                    f"{_f(d.get('fenced_zero_after_s'), ' s')}; "
                    f"at the end: sessions {_f(last.get('sessions'))}, leases "
                    f"{_f(last.get('active_leases'))}, loads {_f(last.get('active_loads'))}, "
                    f"reservations {_f(last.get('active_reservations'))}, registrations "
                    f"{_f(last.get('kvstrata_registrations_active'))}, jobs "
                    f"{_f(last.get('kvstrata_jobs_active'))}, fenced bytes "
                    f"{_f(last.get('kvstrata_fenced_bytes'))}")
            lines.append(f"  {'':<18}{r['target']}")
    return lines


# ---------------------------------------------------------------------- the daemon's side

def parse_gauges(text: str, names: Sequence[str] = DAEMON_GAUGES) -> Dict[str, float]:
    """The named samples of a Prometheus text page, summed over their label sets."""
    out: Dict[str, float] = {}
    for name, v in metrics.samples(text):
        if name in names:
            out[name] = out.get(name, 0.0) + v
    return out


def daemon_probe(endpoint: str) -> Callable[[], Dict[str, Any]]:
    """A function reading kvstratad now: GetStats counters, ListSessions (pid, client,
    registrations, leases, jobs per session) and the gauges of its Prometheus page (its
    address from GetStatus)."""
    import kvstrata  # noqa: PLC0415 - only the kvstrata roles need the client
    where: Dict[str, str] = {}

    def probe() -> Dict[str, Any]:
        with kvstrata.Client(endpoint, timeout=2.0) as client:
            if "metrics" not in where:
                addr = client.get_status().metrics_address
                where["metrics"] = f"http://{addr}/metrics" if addr else ""
            stats = client.get_stats()
            sessions = client.list_sessions().sessions
        out: Dict[str, Any] = {c.name: float(c.value) for c in stats.counters
                               if c.name in ("sessions", "active_leases", "active_loads",
                                             "active_reservations", "l1_used_bytes")}
        out["session_list"] = [{"pid": s.pid, "client": s.client_name,
                                "registrations": s.registrations, "leases": s.leases,
                                "jobs": s.jobs} for s in sessions]
        if where["metrics"]:
            try:
                with urllib.request.urlopen(where["metrics"], timeout=2.0) as resp:
                    out.update(parse_gauges(resp.read().decode(errors="replace")))
            except (urllib.error.URLError, OSError):
                pass
        return out

    return probe


class Sampler:
    """Calls `probe` every `period_s` on a thread; samples carry `t` (perf_counter - t0)
    or, for a failed probe, `error`."""

    def __init__(self, probe: Callable[[], Dict[str, Any]], t0: float,
                 period_s: float = 0.25) -> None:
        self.probe, self.t0, self.period_s = probe, t0, period_s
        self.samples: List[Dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter() - self.t0
            try:
                s = {"t": round(t, 3), **self.probe()}
            except Exception as err:  # noqa: BLE001 - a failed read is a sample too
                s = {"t": round(t, 3), "error": f"{type(err).__name__}: {err}"[:200]}
            self.samples.append(s)
            self._stop.wait(self.period_s)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> List[Dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples


# ---------------------------------------------------------------------- the drivers

async def load_with_kill(urls: List[str], model: str, router: Router, conversations: List[Any],
                         concurrency: int, max_tokens: int, request_timeout_s: float,
                         victim: int, kill_after_s: float, kill: Callable[[], List[int]],
                         keep_load: bool, t0: Optional[float] = None, window_s: float = 0.0,
                         wait_loads_s: float = 5.0) -> Dict[str, Any]:
    """The conversations through the router (loadgen.run_conversations) with a fault task
    in the same event loop: once every first turn is done, at least window_s after that
    (the window before the kill holds later turns only: their TTFT compares with the window
    after) and at least kill_after_s from the start, and once the victim has a turn >= 2
    in flight (at most wait_loads_s more), the router marks it dead, `kill` runs (returns
    the pids it killed) and, with keep_load, the requests in flight drop to the live
    replicas' share. The loadgen's result plus kill_s (None: the load ended first),
    first_turns_done_s, in_flight_at_kill, pids, limit_after."""
    from loadgen import Live, run_conversations  # noqa: PLC0415 - needs aiohttp
    live = Live()
    fault: Dict[str, Any] = {"kill_s": None, "first_turns_done_s": None,
                             "in_flight_at_kill": {}, "pids": [], "limit_after": concurrency}

    async def killer() -> None:
        while live.finished.get(1, 0) < len(conversations):  # every first turn done
            await asyncio.sleep(0.01)
        fault["first_turns_done_s"] = round(live.elapsed(), 4)
        while live.elapsed() < max(kill_after_s, fault["first_turns_done_s"] + window_s):
            await asyncio.sleep(0.01)
        deadline = live.elapsed() + wait_loads_s
        while live.elapsed() < deadline:
            mine = live.in_flight.get(victim, {})
            if any(t >= 2 for t in mine.values()):
                break
            await asyncio.sleep(0.005)
        fault["kill_s"] = round(live.elapsed(), 4)
        fault["in_flight_at_kill"] = dict(live.in_flight.get(victim, {}))
        router.mark_dead(victim)
        fault["pids"] = kill()
        if keep_load:
            n = router.replicas
            live.limit = max(1, round(concurrency * len(router.live()) / n))
            fault["limit_after"] = live.limit

    task = asyncio.ensure_future(killer())
    try:
        res = await run_conversations(urls, model, router, conversations, concurrency,
                                      max_tokens, request_timeout_s, t0=t0, live=live,
                                      retry_dead=True)
    finally:
        if not task.done():
            task.cancel()
    return {**res, **fault}


class FaultRunner:
    """One role's fault phases on its running replicas. `rs` gives urls, replicas,
    stop_one(i), start_one(i, timeout_s) -> (t_cmd, t_health), kill_one(i) -> pids and
    reap_one(i) (replicas.ReplicaSet, or a test's fake); `probe` reads the daemon (None:
    no daemon), `wait_idle` waits until it has no job in flight."""

    def __init__(self, rs: Any, spec: Dict[str, Any], role: str, served_name: str,
                 log: Callable[[str], None], probe: Optional[Callable[[], Dict[str, Any]]] = None,
                 wait_idle: Optional[Callable[[], Any]] = None,
                 uses_daemon: bool = False) -> None:
        self.rs, self.spec, self.role, self.model, self.log = rs, spec, role, served_name, log
        self.probe, self.wait_idle, self.uses_daemon = probe, wait_idle, uses_daemon
        self.opts = spec["faults"]
        self.victim = len(rs.replicas) - 1

    def conversations(self, name: str, count: int = 0) -> List[Any]:
        """The phase's conversations: the run's workload (`count` > 0: that many of them)."""
        from workload import WorkloadSpec, make_conversations  # noqa: PLC0415
        workload = dict(self.spec["workload"])
        if count > 0:
            workload["conversations"] = count
        return make_conversations(WorkloadSpec(**workload), f"{self.spec['seed']}-fault-{name}")

    def run(self, fault: str, restart_after: bool = False) -> Dict[str, Any]:
        return self.restart() if fault == "restart" else self.kill(restart_after)

    def restart(self) -> Dict[str, Any]:
        from loadgen import run_conversations  # noqa: PLC0415 - needs aiohttp
        spec, R, n = self.spec, self.victim, len(self.rs.replicas)
        turns = spec["workload"]["turns"]
        convs = self.conversations("restart")
        router = Router("sticky", n)
        self.log(f"{self.role}:restart: turns 1-{turns - 1} of {len(convs)} conversations, sticky")
        pre = asyncio.run(run_conversations(self.rs.urls, self.model, router, convs,
                                            spec["concurrency"], spec["workload"]["max_tokens"],
                                            spec["request_timeout_s"], max_turn=turns - 1))
        homes = {c.conv_id: ("R" if router.home(c.conv_id) == R else "others") for c in convs}
        idle_s = self.wait_idle() if self.wait_idle is not None else None
        stop_s = self.rs.stop_one(R)
        t_cmd, t_health = self.rs.start_one(R, spec["start_timeout_s"])
        ready = [c for c in convs if c.next_turn == turns]  # earlier turns all answered
        prompts = {(c.conv_id, c.next_turn): c.prompt() for c in ready}
        to_r = Router("rr", n)
        for i in range(n):
            if i != R:
                to_r.mark_dead(i)
        res = asyncio.run(run_conversations(self.rs.urls, self.model, to_r, ready,
                                            spec["concurrency"], spec["workload"]["max_tokens"],
                                            spec["request_timeout_s"], t0=t_health))
        recs = res["requests"]
        annotate_own_prefix(recs, prompts, spec["block_size"])
        for r in recs:
            r["home"] = homes[r["conv"]]
        from metrics import scrape  # noqa: PLC0415
        numbers = restart_numbers(recs, self.opts["first_n"] or spec["concurrency"], homes)
        out = {"fault": "restart", "role": self.role, "replica": R,
               "seed": f"{spec['seed']}-fault-restart",
               "pre": {"wall_s": pre["wall_s"], "requests": len(pre["requests"]),
                       "errors": sum(1 for r in pre["requests"] if r.get("error")),
                       "sent_per_replica": pre["sent_per_replica"]},
               "homes": {h: sum(1 for v in homes.values() if v == h) for h in ("R", "others")},
               "daemon_idle_s": None if idle_s is None else round(idle_s, 2),
               "stop_s": round(stop_s, 2), "to_health_s": round(t_health - t_cmd, 3),
               "wall_s": res["wall_s"], "numbers": numbers,
               "metrics_R": scrape(self.rs.urls[R]),  # counters since the restart
               "target": restart_target(self.uses_daemon, numbers["first_hit_s"]),
               "requests": [{k: v for k, v in r.items() if k != "token_ids"} for r in recs]}
        self.log(f"{self.role}:restart: /health {out['to_health_s']} s after the start command; "
                 f"first hit {numbers['first_hit_s']} s after /health; {out['target']}")
        return out

    def control_run(self, count: int) -> Dict[str, Any]:
        """The kill phase's workload without the kill (conversations of their own seed, the
        same sizes and routing): the others' TTFT in the kill's windows as they would have
        been, so the kill is not blamed for how the workload itself moves over time."""
        spec, n, o = self.spec, len(self.rs.replicas), self.opts
        from loadgen import run_conversations  # noqa: PLC0415 - needs aiohttp
        seed = f"{spec['seed']}-fault-kill-control"
        convs = self.conversations("kill-control", count)
        self.log(f"{self.role}:kill control: {len(convs)} conversations ({o['kill_mode']}), no kill")
        res = asyncio.run(run_conversations(self.rs.urls, self.model, Router(o["kill_mode"], n),
                                            convs, spec["concurrency"],
                                            spec["workload"]["max_tokens"],
                                            spec["request_timeout_s"]))
        return {"seed": seed, "wall_s": res["wall_s"], "requests": res["requests"]}

    def kill(self, restart_after: bool) -> Dict[str, Any]:
        spec, R, n, o = self.spec, self.victim, len(self.rs.replicas), self.opts
        convs = self.conversations("kill", o.get("kill_conversations", 0))
        router = Router(o["kill_mode"], n)
        self.log(f"{self.role}:kill: {len(convs)} conversations ({o['kill_mode']}), SIGKILL to "
                 f"replica {R} after {o['kill_after_s']} s")
        control = None
        if o.get("kill_control"):
            control = self.control_run(len(convs))
        t0 = time.perf_counter()
        sampler = Sampler(self.probe, t0).start() if self.probe is not None else None
        try:
            res = asyncio.run(load_with_kill(
                self.rs.urls, self.model, router, convs, spec["concurrency"],
                spec["workload"]["max_tokens"], spec["request_timeout_s"], R,
                o["kill_after_s"], lambda: self.rs.kill_one(R), o["keep_load"], t0=t0,
                window_s=o["window_s"]))
            killed = res["kill_s"] is not None
            if killed:
                self.rs.reap_one(R)
            if sampler is not None and killed:  # until R's sessions are gone, nothing fenced
                deadline = t0 + res["kill_s"] + o["settle_s"]
                dead = set(res["pids"])
                while time.perf_counter() < deadline:
                    s = [x for x in sampler.samples[-3:] if "error" not in x]
                    if s and s[-1]["t"] > res["kill_s"] and \
                            not any(x["pid"] in dead for x in s[-1].get("session_list", [])) \
                            and not s[-1].get("kvstrata_fenced_bytes"):
                        break
                    time.sleep(0.25)
        finally:
            samples = sampler.stop() if sampler is not None else []
        recs = res["requests"]
        out: Dict[str, Any] = {
            "fault": "kill", "role": self.role, "replica": R, "mode": o["kill_mode"],
            "seed": f"{spec['seed']}-fault-kill", "kill_after_s": o["kill_after_s"],
            "window_s": o["window_s"], "wall_s": res["wall_s"], "kill_s": res["kill_s"],
            "first_turns_done_s": res["first_turns_done_s"],
            "in_flight_at_kill": res["in_flight_at_kill"], "pids": res["pids"],
            "limit_after": res["limit_after"], "sent_per_replica": res["sent_per_replica"],
            "rehomed": router.rehomed,
            "retried": sum(1 for r in recs if r.get("error") is not None
                           and r["replica"] == R and any(
                               x is not r and x["conv"] == r["conv"] and x["turn"] == r["turn"]
                               for x in recs)),
            "errors": error_counts(recs, R),
            "requests": [{k: v for k, v in r.items() if k != "token_ids"} for r in recs]}
        if res["kill_s"] is None:
            out["target"] = kill_target(None)
            return out
        out["windows"] = window_stats(recs, res["kill_s"], o["window_s"], R)
        ratio = out["windows"]["p99_ratio"]
        if control is not None:
            cw = window_stats(control["requests"], res["kill_s"], o["window_s"], R)
            a, c = out["windows"]["after"]["p99_ms"], cw["after"]["p99_ms"]
            ratio = round(a / c, 3) if a is not None and c else None
            out["control"] = {"seed": control["seed"], "wall_s": control["wall_s"],
                              "windows": cw, "p99_ratio": ratio}
        out["target"] = kill_target(ratio, control is not None)
        if samples:
            out["daemon"] = daemon_after_kill(samples, res["kill_s"], res["pids"])
            out["daemon_samples"] = [{k: v for k, v in s.items() if k != "session_list"}
                                     for s in samples]
        if restart_after:
            t_cmd, t_health = self.rs.start_one(R, spec["start_timeout_s"])
            out["restart_to_health_s"] = round(t_health - t_cmd, 3)
        self.log(f"{self.role}:kill: at {res['kill_s']} s; others' TTFT p99 before/after "
                 f"{out['windows']['before']['p99_ms']}/{out['windows']['after']['p99_ms']} ms; "
                 f"errors {out['errors']['total']}; {out['target']}")
        return out
