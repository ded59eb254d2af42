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
echo "test: deploy/ checks (pytest: systemd unit, Kubernetes overlays, Grafana dashboard)"
KVSTRATA_DAEMON="$build/daemon/server/kvstratad" KVSTRATA_CLI="$build/client/cli/kvstrata" \
  "$repo/.venv/bin/python" -m pytest -q "$repo/tests/deploy" || status=1
exit $status
