// The flags of the tools that build or use a generated L2 tree (make_l2_tree, l2_restart):
// --root=DIR (required) --files=N --payload=BYTES --salt=S --stream=N. Each tool defines its
// own extra flags with ABSL_FLAG and calls ParseTreeFlags once from main.
#ifndef KVSTRATA_BENCH_TIERS_TREE_FLAGS_H_
#define KVSTRATA_BENCH_TIERS_TREE_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace kvstrata::bench {

struct TreeFlags {
  std::string root;
  uint64_t files = 0;
  uint64_t payload = 0;  // bytes per block
  std::string salt;      // namespace salt
  uint64_t stream = 0;   // seed of the keys (BenchKey)
};

// Parses the command line (absl flags; exits on an unknown flag) and checks the tree flags;
// nullopt, after a message naming `tool`, when one is bad.
std::optional<TreeFlags> ParseTreeFlags(int argc, char** argv, const char* tool);

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_TIERS_TREE_FLAGS_H_
