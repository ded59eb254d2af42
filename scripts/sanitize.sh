#!/usr/bin/env bash
# Builds and tests KVStrata under the sanitizers, each in its own build directory:
#   build-asan  -DKVSTRATA_SANITIZE=address  (ASan + UBSan): every CTest test, the
#               `integration` ones included (they spawn the sanitized kvstratad)
#   build-tsan  -DKVSTRATA_SANITIZE=thread   (TSan): the `unit` and `integration` labels
#   build-fuzz  -DKVSTRATA_SANITIZE=fuzzer   (clang, libFuzzer + ASan + UBSan): each target
#               of tests/fuzz for KVSTRATA_FUZZ_SECONDS (default 30) from its seed corpus
#               (tests/fuzz/corpus/<target>); a longer run: KVSTRATA_FUZZ_SECONDS=3600
# Benchmarks and CUDA are off. Prints one summary line per build; exits non-zero when a
# configure, build or test step fails.
#
#   bash scripts/sanitize.sh                 # all three
#   bash scripts/sanitize.sh asan            # or: tsan, fuzz
#   KVSTRATA_SANITIZE_JOBS=1 bash scripts/sanitize.sh   # ninja/ctest parallelism
#
# A sanitizer report makes the process exit non-zero (halt_on_error=1), so CTest sees a
# failure; the report itself is in the test's output (ctest --output-on-failure) and the
# daemon's (integration tests print the daemon log when they fail).
#
# TSan: the distribution's gRPC, protobuf and abseil are not instrumented, so TSan cannot
# see their internal synchronisation (futexes, atomics in uninstrumented code) and reports
# races inside them. scripts/tsan.supp suppresses reports that are entirely inside those
# libraries (called_from_lib / their symbol prefixes) — never our own code.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${KVSTRATA_SANITIZE_JOBS:-$(nproc)}"
which="${1:-all}"

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="report_objects=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$repo/scripts/tsan.supp"

declare -a summary=()
status=0

# GCC 12 warns (-Wtsan, an error under our -Werror) that TSan does not model
# std::atomic_thread_fence, which abseil's flag headers inline (SequenceLock). Keep it a
# warning: a fence TSan cannot see can only cause false reports there, never hide ours.
tsan_flags=""
if c++ --version 2>/dev/null | grep -q "Free Software Foundation"; then
  tsan_flags="-Wno-error=tsan"
fi

# run_build <name> <sanitizer> <ctest label regex or empty for all> [extra CXX flags]
run_build() {
  local name="$1" sanitizer="$2" labels="$3" cxx_flags="${4:-}"
  local dir="$repo/build-$name" log="$repo/build-$name/sanitize.log"
  local started=$SECONDS
  mkdir -p "$dir"
  echo "sanitize: [$name] configure + build ($dir, -j$jobs)"
  if ! cmake -S "$repo" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKVSTRATA_SANITIZE="$sanitizer" -DKVSTRATA_BUILD_BENCH=OFF \
      -DKVSTRATA_ENABLE_CUDA=OFF -DCMAKE_CXX_FLAGS="$cxx_flags" >"$dir/configure.log" 2>&1; then
    tail -n 30 "$dir/configure.log"
    summary+=("$name: FAIL (configure; see $dir/configure.log)"); status=1; return
  fi
  if ! ninja -C "$dir" -j "$jobs" >"$dir/build.log" 2>&1; then
    grep -E -A5 'error|FAILED' "$dir/build.log" | head -n 60
    summary+=("$name: FAIL (build; see $dir/build.log)"); status=1; return
  fi
  echo "sanitize: [$name] ctest ${labels:+-L '$labels'}"
  local args=(--test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600)
  [ -n "$labels" ] && args+=(-L "$labels")
  ctest "${args[@]}" >"$log" 2>&1
  local rc=$?
  local line
  line="$(grep -E 'tests passed' "$log" | tail -n 1)"
  if [ $rc -ne 0 ]; then
    grep -E -B2 -A40 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
      "$log" | head -n 200
    grep -E '^\s+[0-9]+ - ' "$log" | head -n 40
    summary+=("$name: FAIL — ${line:-ctest exit $rc} ($((SECONDS - started)) s; log $log)")
    status=1
  else
    summary+=("$name: PASS — ${line} ($((SECONDS - started)) s; log $log)")
  fi
}

# run_fuzz: builds the libFuzzer targets with clang and runs each for a while; new inputs
# go to a scratch corpus, the seeds stay as they are; a crash leaves its input in build-fuzz/.
run_fuzz() {
  local dir="$repo/build-fuzz" seconds="${KVSTRATA_FUZZ_SECONDS:-30}" started=$SECONDS
  local targets=(block_header_fuzz namespace_json_fuzz config_fuzz socket_frames_fuzz rpc_request_fuzz
    usage_ledger_fuzz journal_line_fuzz s3_credentials_fuzz s3_xml_fuzz object_usage_fuzz
    object_journal_fuzz)
  local failed=()
  if ! command -v clang++ >/dev/null; then
    summary+=("fuzz: FAIL (clang++ not found: apt-get install clang)"); status=1; return
  fi
  mkdir -p "$dir"
  echo "sanitize: [fuzz] configure + build ($dir, -j$jobs)"
  if ! CC=clang CXX=clang++ cmake -S "$repo" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKVSTRATA_SANITIZE=fuzzer -DKVSTRATA_BUILD_BENCH=OFF -DKVSTRATA_ENABLE_CUDA=OFF \
      >"$dir/configure.log" 2>&1 || ! ninja -C "$dir" -j "$jobs" "${targets[@]}" >"$dir/build.log" 2>&1; then
    tail -n 40 "$dir/configure.log" "$dir/build.log"
    summary+=("fuzz: FAIL (configure or build; see $dir)"); status=1; return
  fi
  for target in "${targets[@]}"; do
    local scratch="$dir/corpus/$target"
    mkdir -p "$scratch"
    echo "sanitize: [fuzz] $target for ${seconds}s"
    if ! (cd "$dir" && "$dir/tests/fuzz/$target" -max_total_time="$seconds" -max_len=65536 \
        "$scratch" "$repo/tests/fuzz/corpus/$target" >"$dir/$target.log" 2>&1); then
      tail -n 40 "$dir/$target.log"
      failed+=("$target")
    fi
  done
  if [ ${#failed[@]} -gt 0 ]; then
    summary+=("fuzz: FAIL — ${failed[*]} ($((SECONDS - started)) s; logs in $dir)"); status=1
  else
    summary+=("fuzz: PASS — ${#targets[@]} targets × ${seconds}s ($((SECONDS - started)) s)")
  fi
}

case "$which" in
  asan) run_build asan address "" ;;
  tsan) run_build tsan thread "^(unit|integration)$" "$tsan_flags" ;;
  fuzz) run_fuzz ;;
  all)
    run_build asan address ""
    run_build tsan thread "^(unit|integration)$" "$tsan_flags"
    run_fuzz
    ;;
  *) echo "usage: $0 [asan|tsan|fuzz|all]" >&2; exit 2 ;;
esac

echo "sanitize: summary"
for line in "${summary[@]}"; do echo "  $line"; done
exit $status
