// How much memory this process may use: the machine's MemTotal (/proc/meminfo) and every
// cgroup v2 `memory.max` from the process's own cgroup up to the root, whichever is least.
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
  std::string source;  // "MemTotal" or the memory.max file that set it.
};

// The "MemTotal:" line of /proc/meminfo in bytes; nullopt when absent.
std::optional<uint64_t> ParseMemTotal(absl::string_view meminfo);
// The cgroup v2 path ("0::/path") of /proc/self/cgroup; nullopt without one.
std::optional<std::string> ParseCgroupV2Path(absl::string_view self_cgroup);
// A memory.max file's value; nullopt for "max" or anything unparsable.
std::optional<uint64_t> ParseMemoryMax(absl::string_view text);

// The limit for this process (bytes = 0 when nothing could be read). Reads files only.
MemoryLimit ReadMemoryLimit(const std::string& proc_root = "/proc",
                            const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_MEMORY_LIMIT_H_
