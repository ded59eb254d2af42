# Sourced by scripts/test_sglang.sh and scripts/test_vllm.sh: test suites run in the
# background, at most $suite_jobs at once, each one's output kept whole and printed in the
# order the suites were started.
#
#   suite_init JOBS                  a fresh log directory (removed at exit), JOBS at once
#   suite_start NAME SAY CMD [ARG...]  waits for a free slot, prints SAY, then runs CMD in the
#                                    background (its output to NAME's log, its exit status
#                                    and seconds)
#   suite_wait                       waits for every suite started
#   suite_report NAME TITLE EXPECT   prints "test: TITLE (N s)" and NAME's output; answers 0
#                                    when the suite did what EXPECT says: "" (pass) or
#                                    "fails: WHY" (a version listed as failing: it must fail)

suite_init() {
  suite_jobs="$1"
  suite_logs="$(mktemp -d)"
  trap 'rm -rf "$suite_logs"' EXIT
}

suite_start() {
  local name="$1" say="$2"
  shift 2
  while [ "$(jobs -rp | wc -l)" -ge "$suite_jobs" ]; do wait -n; done
  echo "$say"
  (
    start=$SECONDS
    "$@" >"$suite_logs/$name.log" 2>&1
    echo "$? $((SECONDS - start))" >"$suite_logs/$name.rc"
  ) &
}

suite_wait() {
  wait
}

suite_report() {
  local name="$1" title="$2" expect="$3" rc seconds
  read -r rc seconds <"$suite_logs/$name.rc"
  echo "test: $title (${seconds} s)"
  cat "$suite_logs/$name.log"
  if [ "$rc" = 0 ]; then
    case "$expect" in fails:*)
      echo "test: $title passes, but its version list marks it failing" >&2
      return 1 ;;
    esac
    return 0
  fi
  case "$expect" in
    fails:*) echo "test: $title fails, as its version list says: ${expect#fails:}" ;;
    *) echo "test: $title failed" >&2; return 1 ;;
  esac
}
