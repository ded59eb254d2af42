#!/usr/bin/env bash
# A static fio for machines that have none and no network (the GPU machines:
# bench/tiers/run_gpu_l2_fio.sh): from fio's sources (FIO_SRC, a checkout of
# https://github.com/axboe/fio), configured without the optional engines' libraries, linked
# statically (libc, zlib). psync and io_uring (raw syscalls) are what l2_fio runs.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="${FIO_SRC:?set FIO_SRC to a checkout of the fio sources}"
(cd "$src" && ./configure --build-static --disable-numa --disable-rdma --disable-gfapi \
  --disable-libnfs --disable-pmem --disable-http --disable-rados --disable-rbd --disable-tcmalloc \
  --disable-xnvme --disable-isal --disable-libblkio --disable-libzbc --disable-dfs --disable-native \
  >/dev/null && make -j "${KVSTRATA_BUNDLE_JOBS:-2}" >/dev/null)
mkdir -p "$repo/.fiocarry"
install -m 0755 "$src/fio" "$repo/.fiocarry/fio"
strip "$repo/.fiocarry/fio"
"$repo/.fiocarry/fio" --version
