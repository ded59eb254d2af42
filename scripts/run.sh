#!/usr/bin/env bash
# Installs the dependencies, builds, and runs kvstratad in the foreground with the
# embedded default configuration (no GPU needed). Ctrl-C stops it. Extra arguments go to
# kvstratad, e.g. --config=/etc/kvstrata/kvstrata.toml or --set=l1.capacity=8GiB.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh" --cpp
bash "$repo/scripts/build.sh"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
echo "run: $build/daemon/server/kvstratad $*   (in another shell: $build/client/cli/kvstrata status)"
exec "$build/daemon/server/kvstratad" "$@"
