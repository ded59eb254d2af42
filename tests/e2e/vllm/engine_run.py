"""One real vLLM engine run (vLLM's CPU build), in its own process; prints a JSON result.

    python engine_run.py MODEL_DIR PROMPTS_JSON [--endpoint SOCKET] [--pause-after N]

Greedy-generates each prompt of PROMPTS_JSON (a list of strings) one after another, with
KVStrataConnector when --endpoint is given. With --pause-after N it prints "PAUSED" after
the first N prompts and waits for a line on stdin before going on (the test kills or
restarts the daemon meanwhile). The last stdout line is JSON: per prompt the generated
token ids and num_cached_tokens (vLLM's local plus external prefix-cache hits).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # scheduler + worker here
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("--endpoint")
    ap.add_argument("--pause-after", type=int, default=-1)
    ap.add_argument("--max-tokens", type=int, default=12)
    args = ap.parse_args()
    from vllm import LLM, SamplingParams

    kwargs = {}
    if args.endpoint:
        kwargs["kv_transfer_config"] = {
            "kv_connector": "KVStrataConnector", "kv_connector_module_path": "kvstrata_vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"endpoint": args.endpoint,
                                          "reconnect_interval_s": 0.5}}
    # gpu_memory_utilization is a fraction of the NUMA node's memory on vLLM's CPU backend: 0.05
    # (0.88 GiB of a 17.6 GiB node) left the KV cache no room (ValueError at start).
    llm = LLM(model=args.model, dtype="float32", max_model_len=2048, enforce_eager=True,
              max_num_seqs=4, gpu_memory_utilization=0.1, seed=0, **kwargs)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    results = []
    for i, prompt in enumerate(json.load(open(args.prompts))):
        if i == args.pause_after:
            print("PAUSED", flush=True)
            sys.stdin.readline()
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        results.append({"tokens": list(out.outputs[0].token_ids),
                        "cached": int(out.num_cached_tokens or 0)})
    print(json.dumps(results), flush=True)
    os._exit(0)  # Skip vLLM's slow interpreter teardown; everything is printed.


if __name__ == "__main__":
    main()
