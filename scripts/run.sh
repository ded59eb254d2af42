#!/usr/bin/env bash
# Installs the dependencies, builds kvstratad and the kvstrata CLI (only those), and runs
# kvstratad in the foreground with the embedded default configuration (no GPU needed).
# Ctrl-C stops it. Extra arguments go to kvstratad, e.g.
# --config=/etc/kvstrata/kvstrata.toml or --set=l1.capacity=8GiB.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" --cpp
# Only what runs here (the daemon, and the CLI to talk to it): not the tests or benchmarks.
KVSTRATA_BUILD_TARGETS="kvstratad kvstrata" bash "$repo/scripts/build.sh"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
echo "run: $build/daemon/server/kvstratad $*   (in another shell: $build/client/cli/kvstrata status)"
exec "$build/daemon/server/kvstratad" "$@"
