"""An optional timeline of each request's KVStrata steps, for profiling a serving engine.

With KVSTRATA_VLLM_TRACE=<file> set in vLLM's environment, the scheduler and the workers
append one JSON line per step to that file: {"t": CLOCK_MONOTONIC seconds (one clock for
every process of the host), "pid", "ev", "req", ...}. Events: lookup (ms, units), alloc,
load_submit (ms: the submit call), load_done (the completion seen by a worker),
load_reported (the scheduler learnt the load finished), store_submit (ms, units). Unset
(the default), every call is a no-op. Each line is one O_APPEND write, so the lines of
the scheduler and worker processes do not interleave.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

_PATH = os.environ.get("KVSTRATA_VLLM_TRACE") or None
_lock = threading.Lock()


def event(name: str, req_id: str, **fields: Any) -> None:
    if _PATH is None:
        return
    line = json.dumps({"t": time.monotonic(), "pid": os.getpid(), "ev": name, "req": req_id,
                       **fields}) + "\n"
    with _lock:
        fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
