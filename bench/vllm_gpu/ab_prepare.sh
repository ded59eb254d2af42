#!/usr/bin/env bash
# Prepares a same-run GPU A/B against an older commit (here, with network; no GPU needed):
# build-ab/tree holds that commit's scripts/, bench/ and connector_vllm/ and its own
# .bundle (kvstratad and the kvstrata CLI built with CUDA, and its client wheel), so the
# device call runs the older commit exactly as it was, beside this tree (bench/vllm_gpu/ab.sh).
#
#   bash bench/vllm_gpu/ab_prepare.sh 1a7faf7        # ~10 min on 2 cores (daemon targets only)
#   device call, carry [".bundle", "build-ab"], after bash scripts/gpu_vllm.sh --part 1..3:
#     bash bench/vllm_gpu/ab.sh --roles kvstrata --sizes 1024,8192,32768 --no-users --eager --repeats 5
set -euo pipefail
commit="${1:?usage: ab_prepare.sh COMMIT}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wt="${KVSTRATA_AB_WORKTREE:-/tmp/kvstrata-ab-$commit}"
[[ -d "$wt" ]] || git -C "$repo" worktree add -f "$wt" "$commit"
# The older tree is bundled by this tree's bundle.sh (only the daemon and the CLI).
cp "$repo/scripts/bundle.sh" "$wt/scripts/bundle.ab.sh"
KVSTRATA_BUNDLE_TARGETS="kvstratad kvstrata" KVSTRATA_BUNDLE_BUILD_DIR="$wt/build-ab" \
  KVSTRATA_BUNDLE_BUILD_TYPE="${KVSTRATA_BUNDLE_BUILD_TYPE:-RelWithDebInfo}" \
  KVSTRATA_BUNDLE_JOBS="${KVSTRATA_BUNDLE_JOBS:-2}" bash "$wt/scripts/bundle.ab.sh"
rm -f "$wt/scripts/bundle.ab.sh"
(cd "$wt" && bash scripts/bundle_python.sh)
out="$repo/build-ab"
rm -rf "$out" && mkdir -p "$out/tree"
cp -a "$wt/scripts" "$wt/bench" "$wt/connector_vllm" "$wt/.bundle" "$out/tree/"
rm -rf "$out/tree/.bundle/lib"  # the same system libraries as .bundle/lib: ab.sh copies those (64 MiB a call)
rm -rf "$out/tree/connector_vllm/build" "$out/tree/bench/results"
find "$out/tree" -name __pycache__ -prune -exec rm -rf {} +
echo "$commit $(git -C "$wt" log -1 --format=%s | cut -c1-80)" >"$out/COMMIT"
echo "ab_prepare: $out ($(du -sh "$out" | cut -f1)) from $(cat "$out/COMMIT")"
