#include "bench/tiers/tree_flags.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(std::string, root, "", "Directory of the L2 tree (required)");
ABSL_FLAG(uint64_t, files, 1000000, "Block files in the tree");
ABSL_FLAG(uint64_t, payload, 4096, "Payload bytes per block file (1 B .. 1 GiB)");
ABSL_FLAG(std::string, salt, "l2-restart", "Namespace salt of the blocks");
ABSL_FLAG(uint64_t, stream, 42, "Seed of the block keys");

namespace kvstrata::bench {

std::optional<TreeFlags> ParseTreeFlags(int argc, char** argv, const char* tool) {
  absl::ParseCommandLine(argc, argv);
  TreeFlags flags{absl::GetFlag(FLAGS_root), absl::GetFlag(FLAGS_files),
                  absl::GetFlag(FLAGS_payload), absl::GetFlag(FLAGS_salt),
                  absl::GetFlag(FLAGS_stream)};
  const char* bad = flags.root.empty() ? "--root=DIR is required"
                    : flags.files == 0 ? "--files must be > 0"
                    : flags.payload == 0 || flags.payload > (uint64_t{1} << 30)
                        ? "--payload out of range"
                        : nullptr;
  if (bad == nullptr) return flags;
  std::fprintf(stderr, "%s: %s (--help lists the flags)\n", tool, bad);
  return std::nullopt;
}

}  // namespace kvstrata::bench
