#!/usr/bin/env bash
# The one command run on the GPU machine, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_run.sh
#
# Expects .bundle/ from scripts/bundle.sh (bin/kvstratad, bin/transfer_gpu_test,
# bin/copy_bench, bin/lookup_latency, lib/) and .bundle/wheels/kvstrata-*.whl from scripts/bundle_python.sh;
# .whl/*.whl (optional, bundle_python.sh --with-transformers) are installed when
# transformers is missing. Nothing is fetched from the network: the wheels go into
# $KVSTRATA_SITE (default /tmp/kvsite), put first on PYTHONPATH.
#
# Steps, each with a time limit, continuing after a failure; outputs in $OUT:
#   nvidia_smi.txt, transfer_gpu_test.json, copy_bench.json, pytest_junit.xml,
#   load_latency.json, lookup_latency_<N>cpu.txt (the lookup fast path pinned to N = 2, 4,
#   8, 16 CPUs with taskset; no GPU involved: how the 8-client figures scale with cores),
#   gpu_run.log (every step's full output), summary.txt.
# Exits non-zero when any step failed. Total under ~9 minutes (KVSTRATA_GPU_BUDGET_S); the
# transfer_gpu_test step may take 200 s (its concurrency tests ran 5-6 s each on an H100).
set -uo pipefail
export PYTHONUNBUFFERED=1

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
python="${PYTHON:-python3}"
site="${KVSTRATA_SITE:-/tmp/kvsite}"
budget="${KVSTRATA_GPU_BUDGET_S:-540}"
bundle="${KVSTRATA_BUNDLE:-$repo/.bundle}"
log="$out/gpu_run.log"
self="$repo/scripts/gpu_run.sh"

names=()
results=()
durations=()
notes=()
failed=0
t_start=$SECONDS

# step NAME LIMIT_S TAIL_LINES COMMAND...: runs COMMAND with a time limit (SIGINT first,
# so pytest still writes its report; SIGKILL 20 s later), appends its output to the log
# and prints its last TAIL_LINES lines.
step() {
  local name="$1" limit="$2" tail_lines="$3"
  shift 3
  local left=$((budget - (SECONDS - t_start)))
  if ((left < 15)); then
    record "$name" SKIPPED 0 "time budget of ${budget}s used up"
    return 1
  fi
  ((limit > left - 5)) && limit=$((left - 5))
  local tmp started rc status
  tmp="$(mktemp)"
  started=$SECONDS
  echo "=== $name (limit ${limit}s)"
  printf '\n===== %s: %s (limit %ss)\n' "$name" "$*" "$limit" >>"$log"
  timeout -s INT -k 20 "$limit" "$@" >"$tmp" 2>&1
  rc=$?
  cat "$tmp" >>"$log"
  tail -n "$tail_lines" "$tmp"
  rm -f "$tmp"
  case $rc in
    0) status=ok ;;
    124|137) status=TIMEOUT ;;
    *) status="FAIL($rc)" ;;
  esac
  record "$name" "$status" $((SECONDS - started)) ""
  [[ $rc -eq 0 ]]
}

record() {
  names+=("$1")
  results+=("$2")
  durations+=("$3")
  notes+=("$4")
  [[ "$2" == ok ]] || failed=1
}

set_note() {  # set_note TEXT: the detail column of the last recorded step
  notes[${#notes[@]}-1]="$1"
}

require() {  # require NAME PATH: records a failed step when a bundle file is missing
  if [[ ! -x "$2" ]]; then
    record "$1" MISSING 0 "$2 not found (run scripts/bundle.sh)"
    echo "=== $1: $2 not found"
    return 1
  fi
}

install_python() {
  rm -rf "$site"
  mkdir -p "$site"
  shopt -s nullglob
  local wheels=("$bundle"/wheels/kvstrata-*.whl) extra=("$repo"/.whl/*.whl)
  shopt -u nullglob
  if [[ ${#wheels[@]} -eq 0 ]]; then
    echo "no $bundle/wheels/kvstrata-*.whl: run scripts/bundle_python.sh after scripts/bundle.sh"
    return 1
  fi
  if "$python" -m pip --version >/dev/null 2>&1; then
    "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --upgrade \
      --target "$site" "${wheels[@]}" || return 1
  else  # No pip: a pure-Python wheel is a zip of the package.
    local w
    for w in "${wheels[@]}"; do "$python" -m zipfile -e "$w" "$site" || return 1; done
  fi
  if [[ ${#extra[@]} -gt 0 ]] && ! "$python" -c 'import transformers' >/dev/null 2>&1; then
    echo "installing ${#extra[@]} wheels from .whl/ (transformers for the prefill baseline)"
    "$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --upgrade \
      --target "$site" "${extra[@]}" || echo "warning: .whl/ install failed; the benchmark falls back"
  fi
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$python" - <<'EOF'
import sys, grpc, google.protobuf, kvstrata, kvstrata.cuda
print("python", sys.version.split()[0], "grpcio", grpc.__version__,
      "protobuf", google.protobuf.__version__, "kvstrata", kvstrata.__version__, kvstrata.__file__)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda,
          "devices", torch.cuda.device_count(), torch.cuda.is_available() and torch.cuda.get_device_name(0))
    if torch.cuda.is_available():
        print("gpu uuid", kvstrata.gpu_uuid(0))
except ImportError as err:
    print("torch missing:", err)
try:
    import transformers
    print("transformers", transformers.__version__)
except Exception as err:
    print("transformers not usable (the benchmark uses its built-in Llama):", err)
EOF
}

nvidia_smi() {  # nvidia_smi FILE: GPU summary and the full nvidia-smi table into FILE
  local query=index,name,uuid,driver_version,memory.total,memory.used
  query+=,pcie.link.gen.current,pcie.link.width.current
  nvidia-smi --query-gpu="$query" --format=csv >"$1" 2>&1 && nvidia-smi >>"$1" 2>&1
  local rc=$?
  cat "$1"
  return $rc
}

lookup_scaling() {  # lookup_scaling DIR: lookup_latency's fast-path rows on 2..16 CPUs
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket)' | tee "$1/lscpu.txt"
  local cpus n rc=0
  cpus=$(nproc)
  for n in 2 4 8 16; do
    ((n <= cpus)) || continue
    echo "--- taskset -c 0-$((n - 1))"
    taskset -c "0-$((n - 1))" "$bundle/bin/lookup_latency" 3000 fast >"$1/lookup_latency_${n}cpu.txt" 2>&1 || rc=1
    tail -n 5 "$1/lookup_latency_${n}cpu.txt"
  done
  return $rc
}

# Sub-commands, so that the steps can run them under `timeout`.
case "${1:-}" in
  --install-python) install_python; exit ;;
  --nvidia-smi) nvidia_smi "$2"; exit ;;
  --lookup-scaling) lookup_scaling "$2"; exit ;;
esac
: >"$log"

# ---------------------------------------------------------------------- steps

step "nvidia-smi" 20 12 bash "$self" --nvidia-smi "$out/nvidia_smi.txt"
step "python env" 60 12 bash "$self" --install-python
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

if require "transfer_gpu_test" "$bundle/bin/transfer_gpu_test"; then
  step "transfer_gpu_test" 200 15 "$bundle/bin/transfer_gpu_test" \
    --gtest_output="json:$out/transfer_gpu_test.json"
  [[ -f "$out/transfer_gpu_test.json" ]] && set_note "$("$python" - "$out/transfer_gpu_test.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d.get('tests', 0)} tests, {d.get('failures', 0)} failures, {d.get('disabled', 0)} disabled")
EOF
)"
fi

if require "copy_bench" "$bundle/bin/copy_bench"; then
  step "copy_bench" 60 20 "$bundle/bin/copy_bench" --out "$out/copy_bench.json"
fi

if require "kvstratad" "$bundle/bin/kvstratad"; then
  export KVSTRATA_DAEMON="$bundle/bin/kvstratad" KVSTRATA_REQUIRE_GPU=1
  step "pytest tests/gpu/python" 240 40 \
    "$python" -m pytest tests/gpu/python -q -ra --continue-on-collection-errors \
    --junitxml="$out/pytest_junit.xml"
  [[ -f "$out/pytest_junit.xml" ]] && set_note "$("$python" - "$out/pytest_junit.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
s = root if root.tag == "testsuite" else root.find("testsuite")
a = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
print(f"{a['tests']} tests, {a['failures']} failed, {a['errors']} errors, {a['skipped']} skipped")
EOF
)"

  step "load_latency bench" 120 12 \
    "$python" bench/gpu/load_latency.py --out "$out/load_latency.json"
  [[ -f "$out/load_latency.json" ]] && set_note "$("$python" - "$out/load_latency.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d.get("summary") or [{"tokens": r["tokens"], "load_ms": r["load_median_s"] * 1e3}
                            for r in d.get("load", {}).get("sizes", [])]
print("; ".join(f"{r['tokens'] // 1024}K: load {r['load_ms']:.1f} ms"
                + (f", {r['speedup']:.1f}x" if "speedup" in r else "") for r in rows))
EOF
)"
fi

if require "lookup_latency" "$bundle/bin/lookup_latency" && [[ -x "$bundle/bin/kvstratad" ]]; then
  step "lookup_latency on 2-16 CPUs" 150 40 \
    bash "$self" --lookup-scaling "$out"
fi

# ---------------------------------------------------------------------- summary

{
  echo
  echo "== kvstrata GPU run: $(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - t_start)) s"
  printf '%-26s %-11s %6s  %s\n' step status seconds detail
  for i in "${!names[@]}"; do
    printf '%-26s %-11s %6s  %s\n' "${names[$i]}" "${results[$i]}" "${durations[$i]}" "${notes[$i]}"
  done
  if ((failed)); then echo "RESULT: FAILED (details in $log)"; else echo "RESULT: ok"; fi
} | tee "$out/summary.txt"
exit "$failed"
