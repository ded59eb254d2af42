#!/usr/bin/env bash
# Builds a self-contained Release bundle for a GPU machine without our dependencies
# (Ubuntu 24.04: glibc >= ours, no gRPC/protobuf/absl): the daemon, the CLI,
# transfer_gpu_test, copy_bench and lookup_latency, stripped, with every non-glibc shared library they
# need in .bundle/lib and bin/ wrappers that point LD_LIBRARY_PATH there.
#   scripts/bundle.sh            # -> .bundle/{bin,libexec,lib}
# Env: KVSTRATA_BUNDLE_BUILD_DIR (default build-bundle/), KVSTRATA_BUNDLE_JOBS (default 1),
# KVSTRATA_BUNDLE_BUILD_TYPE (default Release; e.g. RelWithDebInfo to reuse scripts/build.sh's
# build/ with KVSTRATA_BUNDLE_BUILD_DIR=build instead of a fresh Release build).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUNDLE_BUILD_DIR:-$repo/build-bundle}"
jobs="${KVSTRATA_BUNDLE_JOBS:-1}"
build_type="${KVSTRATA_BUNDLE_BUILD_TYPE:-Release}"
out="$repo/.bundle"
targets=(${KVSTRATA_BUNDLE_TARGETS:-kvstratad kvstrata transfer_gpu_test copy_bench lookup_latency l2_fio})

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DKVSTRATA_ENABLE_CUDA=ON \
  -DKVSTRATA_BUILD_TESTS=ON -DKVSTRATA_BUILD_BENCH=ON >/dev/null
grep -q '^KVSTRATA_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt"
ninja -C "$build" -j "$jobs" "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/libexec" "$out/lib"
for target in "${targets[@]}"; do
  binary="$(find "$build" -type f -name "$target" -perm -u+x | head -n 1)"
  [[ -n "$binary" ]] || { echo "bundle: $target not built" >&2; exit 1; }
  install -m 0755 "$binary" "$out/libexec/$target"
  strip --strip-unneeded "$out/libexec/$target"
  cat >"$out/bin/$target" <<WRAPPER
#!/bin/sh
# Runs $target with the bundle's libraries (see scripts/bundle.sh).
here="\$(cd "\$(dirname "\$0")" && pwd)"
LD_LIBRARY_PATH="\$here/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/../libexec/$target" "\$@"
WRAPPER
  chmod 0755 "$out/bin/$target"
done

# glibc's own libraries come from the target system; everything else travels, libstdc++
# and libgcc_s included (Ubuntu's may be older than what we built against).
glibc='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil)[.-]'
for target in "${targets[@]}"; do
  ldd "$out/libexec/$target" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    [[ "$name" =~ $glibc ]] && continue
    [[ -e "$out/lib/$name" ]] && continue
    cp -L "$path" "$out/lib/$name"
    chmod 0644 "$out/lib/$name"
    strip --strip-unneeded "$out/lib/$name"
  done
done

# Checks: nothing missing, and the daemon starts with only the bundle's libraries.
missing="$(for f in "$out"/libexec/*; do LD_LIBRARY_PATH="$out/lib" ldd "$f"; done | grep 'not found' || true)"
[[ -z "$missing" ]] || { echo "bundle: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; }
outside="$(for f in "$out"/libexec/*; do LD_LIBRARY_PATH="$out/lib" ldd "$f"; done |
  awk '/=> \// { print $1, $3 }' | grep -Ev "^[^ ]+ $out/lib/" | grep -Ev "$glibc" || true)"
[[ -z "$outside" ]] || { echo "bundle: libraries not bundled:" >&2; echo "$outside" >&2; exit 1; }
env -u LD_LIBRARY_PATH "$out/bin/kvstratad" --version
echo "bundle: $out ($(du -sh "$out" | cut -f1)): ${targets[*]}"
