// Copies of whole KV blocks between an engine's host tensors and the mapped L1 region.
//
// StreamCopy: memcpy with non-temporal (streaming) stores for copies of at least
// kStreamMinBytes on x86-64 CPUs with AVX2, a plain memcpy otherwise. glibc's memcpy
// switches to streaming stores only for copies larger than a fraction of the last-level
// cache (so a single 256 MiB memcpy streams, but 64 KiB block copies do not, and pay a
// read-for-ownership of every destination line); KV blocks moved between the engine and
// the cache are not read back by this CPU soon, so streaming is the right strategy for them
// whatever their size. On the 2-vCPU benchmark VM: 64 KiB blocks out of the region at
// 7.3 GB/s with memcpy, 17 GB/s with StreamCopy (single-thread 256 MiB memcpy: 13 GB/s).
// Ends with a store fence: the bytes are globally visible when it returns (before a
// CommitStore tells the daemon they are there).
//
// Thread safety: thread-safe (no state).
#ifndef KVSTRATA_CLIENT_CPP_BLOCK_COPY_H_
#define KVSTRATA_CLIENT_CPP_BLOCK_COPY_H_

#include <cstddef>
#include <cstdint>

namespace kvstrata {

inline constexpr size_t kStreamMinBytes = 16 << 10;

void StreamCopy(void* dst, const void* src, size_t bytes);

}  // namespace kvstrata

// C entry point for the Python client, which loads this file built alone as a shared library
// (client/python/setup.py) with ctypes: StreamCopy of `count` pieces given as consecutive
// (destination address, source address, bytes) triples. Pieces must not overlap.
extern "C" void kvstrata_stream_copy_pieces(const uint64_t* triples, size_t count);

#endif  // KVSTRATA_CLIENT_CPP_BLOCK_COPY_H_
