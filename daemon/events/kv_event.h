// KvEvent: one event of vLLM's KV event schema (vllm/distributed/kv_events.py), the form
// llm-d's KV-Cache Indexer consumes: BlockStored, BlockRemoved or AllBlocksCleared.
// KvEventBatch: what one ZMQ message (and one PollEvents entry) carries. Value types.
#ifndef KVSTRATA_DAEMON_EVENTS_KV_EVENT_H_
#define KVSTRATA_DAEMON_EVENTS_KV_EVENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/index/block_entry.h"

namespace kvstrata {

enum class KvEventKind { kBlockStored, kBlockRemoved, kAllBlocksCleared };

struct KvEvent {
  KvEventKind kind = KvEventKind::kBlockStored;
  std::vector<uint64_t> block_hashes;         // ExternalBlockHash of each block
  std::optional<uint64_t> parent_block_hash;  // BlockStored; unknown to the daemon: nullopt
  std::vector<uint32_t> token_ids;            // BlockStored; unknown to the daemon: empty
  uint32_t block_size = 0;                    // BlockStored: tokens per block
  std::optional<int64_t> lora_id;             // BlockStored
  std::optional<std::string> lora_name;       // BlockStored
  std::string medium;  // BlockStored / BlockRemoved: the tier's (TierDescriptor)
  // vLLM 0.33's optional fields (omitted from the wire when unset, as msgspec's
  // omit_defaults does): the KV cache group and its spec kind (unknown to the daemon),
  // and the tier's locality relative to this daemon (TierDescriptor::locality).
  std::optional<uint32_t> group_idx;
  std::optional<std::string> kv_cache_spec_kind;  // BlockStored
  std::optional<std::string> locality;
  uint32_t namespace_id = 0;  // not on the ZMQ wire; PollEvents filters on it
};

struct KvEventBatch {
  uint64_t seq = 0;
  double ts = 0;  // seconds since the Unix epoch
  std::string model;
  std::vector<KvEvent> events;
};

// The 64-bit integer vLLM publishes for a block hash: the last 8 bytes of the key read
// big-endian, zero-padded on the left when the key is shorter (vLLM's int conversion of
// its 32-byte hashes and llm-d's conversion of byte hashes give the same number).
uint64_t ExternalBlockHash(std::string_view key_bytes);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_KV_EVENT_H_
