#!/usr/bin/env bash
# clang-format over every C++/CUDA source of the project (.clang-format at the root).
#   bash scripts/format.sh          # rewrite in place
#   bash scripts/format.sh --check  # list files that differ, exit 1 if any
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
if [ "${1:-}" = "--check" ]; then
  differ=0
  for f in "${files[@]}"; do
    if ! clang-format --style=file "$f" | cmp -s - "$f"; then echo "needs format: $f"; differ=1; fi
  done
  exit $differ
fi
clang-format --style=file -i "${files[@]}"
