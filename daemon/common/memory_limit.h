// How much memory this process may use: the machine's MemTotal (/proc/meminfo), every
// cgroup v2 `memory.max` from the process's own cgroup up to the root, and every cgroup v1
// `memory.limit_in_bytes` of the memory controller's hierarchy (mounted at
// <cgroup_root>/memory) from its cgroup up to the root, whichever is least.
// The daemon checks l1.capacity against it at start, so that a pool larger than the
// machine or the container gets a message instead of an OOM kill while it is populated.
// Pure parsing functions plus one reader of /proc and /sys; thread-safe.
#ifndef KVSTRATA_DAEMON_COMMON_MEMORY_LIMIT_H_
#define KVSTRATA_DAEMON_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

namespace kvstrata {

struct MemoryLimit {
  uint64_t bytes = 0;  // The least of the limits below that are known.
  std::string source;  // "MemTotal in ..." or the memory.max / memory.limit_in_bytes file.
};

// The "MemTotal:" line of /proc/meminfo in bytes; nullopt when absent.
std::optional<uint64_t> ParseMemTotal(absl::string_view meminfo);
// The cgroup v2 path ("0::/path") of /proc/self/cgroup; nullopt without one.
std::optional<std::string> ParseCgroupV2Path(absl::string_view self_cgroup);
// The cgroup v1 memory controller's path ("7:memory:/path", "4:cpu,memory:/path") of
// /proc/self/cgroup; nullopt without one.
std::optional<std::string> ParseCgroupV1MemoryPath(absl::string_view self_cgroup);
// A memory.max file's value; nullopt for "max" or anything unparsable.
std::optional<uint64_t> ParseMemoryMax(absl::string_view text);
// A cgroup v1 memory.limit_in_bytes file's value; nullopt for "no limit" (the kernel writes
// its largest page count in bytes, 9223372036854771712 on 4 KiB pages: anything from 2^62
// up is taken as none) or anything unparsable.
std::optional<uint64_t> ParseLimitInBytes(absl::string_view text);

// The limit for this process (bytes = 0 when nothing could be read). Reads files only:
// <proc_root>/meminfo, <proc_root>/self/cgroup, and under cgroup_root (tests give fake trees).
MemoryLimit ReadMemoryLimit(const std::string& proc_root = "/proc",
                            const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_MEMORY_LIMIT_H_
