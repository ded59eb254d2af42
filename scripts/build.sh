#!/usr/bin/env bash
# Configures and builds everything into build/ (or $KVSTRATA_BUILD_DIR). Extra arguments
# go to CMake, e.g. -DKVSTRATA_SANITIZE=address.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
cmake -S "$repo" -B "$build" -G Ninja "$@" >/dev/null
ninja -C "$build" -j "$(nproc)"
