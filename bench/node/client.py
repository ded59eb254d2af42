"""One streamed completion over vLLM's OpenAI-compatible HTTP API, timed.

The prompt goes as token ids (`/v1/completions` takes a list of ints as `prompt`: no chat
template, no tokenizer round trip), greedy, `ignore_eos` (every answer max_tokens long),
`logprobs: 1` with `return_tokens_as_token_ids` (each streamed token as "token_id:<id>" with
its logprob: the answer's ids, which the next turn appends, and the first token's logprob,
compared across roles; `return_token_ids` would also echo the whole prompt's ids) and a
final usage chunk with `prompt_tokens_details.cached_tokens` (the server runs with
--enable-prompt-tokens-details: vLLM's prefix-cache hit plus a connector's external hit for
this request). The event stream is split into lines here, so no line is too long for it.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

import aiohttp


@dataclass
class Completion:
    """What one request returned and how long it took (error set if it failed)."""
    replica: int
    prompt_tokens: int
    ttft_s: Optional[float] = None
    latency_s: Optional[float] = None
    token_ids: List[int] = field(default_factory=list)
    first_logprob: Optional[float] = None
    cached_tokens: Optional[int] = None
    error: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        for k in ("ttft_s", "latency_s", "first_logprob"):
            if d[k] is not None:
                d[k] = round(d[k], 6)
        return d


def request_body(model: str, prompt: List[int], max_tokens: int,
                 kv_transfer_params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "logprobs": 1, "return_tokens_as_token_ids": True,
            "stream": True, "stream_options": {"include_usage": True}}
    if kv_transfer_params is not None:
        body["kv_transfer_params"] = kv_transfer_params  # read by the engine's KV connector
    return body


async def complete(session: aiohttp.ClientSession, url: str, model: str, prompt: List[int],
                   max_tokens: int, replica: int, timeout_s: float,
                   kv_transfer_params: Optional[Dict[str, Any]] = None) -> Completion:
    """POST url/v1/completions (streamed); TTFT is the time to the first chunk that carries
    a token. Never raises for a failed request: the Completion's error says what failed."""
    out = Completion(replica=replica, prompt_tokens=len(prompt))
    t0 = time.perf_counter()
    try:
        async with session.post(f"{url}/v1/completions",
                                json=request_body(model, prompt, max_tokens,
                                                  kv_transfer_params),
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return out
            buf = b""
            async for data in resp.content.iter_any():
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                        _take_chunk(out, json.loads(line[5:]), t0)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        out.error = f"{type(err).__name__}: {err}"[:300]
        return out
    out.latency_s = time.perf_counter() - t0
    if out.error is None and len(out.token_ids) != max_tokens:
        out.error = f"{len(out.token_ids)} tokens returned, {max_tokens} asked"
    return out


def _take_chunk(out: Completion, chunk: Dict[str, Any], t0: float) -> None:
    if "error" in chunk:
        out.error = str(chunk["error"])[:300]
        return
    for choice in chunk.get("choices") or []:
        lp = choice.get("logprobs") or {}
        ids = [int(t.rsplit(":", 1)[1]) for t in lp.get("tokens") or []]
        if not ids:
            continue
        if out.ttft_s is None:
            out.ttft_s = time.perf_counter() - t0
            out.first_logprob = (lp.get("token_logprobs") or [None])[0]
        out.token_ids += ids
    usage = chunk.get("usage")
    if usage:
        out.cached_tokens = int((usage.get("prompt_tokens_details") or {})
                                .get("cached_tokens") or 0)
