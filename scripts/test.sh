#!/usr/bin/env bash
# Installs the dependencies, builds everything, and runs every test: the C++ unit and
# integration tests (CTest) and the Python client tests (pytest), all against real
# kvstratad processes on real Unix sockets. GPU tests skip with a message without a GPU.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
bash "$repo/scripts/setup.sh"
bash "$repo/scripts/build.sh"

status=0
echo "test: C++ tests (ctest)"
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 300) || status=1
echo "test: Python tests (pytest)"
KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
  "$repo/.venv/bin/python" -m pytest -q "$repo/tests/integration/python" || status=1
echo "test: vLLM connector tests (pytest in .venv-vllm: vLLM 0.33's real Scheduler, CPU)"
if bash "$repo/scripts/setup_vllm.sh"; then
  KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
    "$repo/.venv-vllm/bin/python" -m pytest -q "$repo/tests/e2e/vllm" || status=1
else
  echo "test: scripts/setup_vllm.sh failed" >&2
  status=1
fi
exit $status
