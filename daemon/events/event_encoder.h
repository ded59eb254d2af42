// Encodes a KvEventBatch as the msgpack payload of one ZMQ message, vLLM's wire format:
// the batch is always the array [ts, [events...], data_parallel_rank] (msgspec
// array_like); each event, in vLLM 0.33's field order, is
//   map (default; what vLLM 0.26 and 0.33 publish: msgspec tagged struct, omit_defaults):
//       {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": ..., "token_ids":
//       ..., "block_size": ..., "lora_id": ..., "medium": ..., "lora_name": ...,
//       ["group_idx", "kv_cache_spec_kind", "locality" when set]},
//       {"type": "BlockRemoved", "block_hashes": ..., "medium": ..., [group_idx, locality]},
//       {"type": "AllBlocksCleared"};
//   array (msgspec array_like, the older positional form): ["BlockStored", block_hashes,
//       parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys,
//       group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window, locality], cut after
//       the last set field (unset ones before it are nil); ["BlockRemoved", block_hashes,
//       medium, group_idx, locality] likewise; ["AllBlocksCleared"].
// Block hashes are unsigned 64-bit integers. Thread-compatible (pure function).
#ifndef KVSTRATA_DAEMON_EVENTS_EVENT_ENCODER_H_
#define KVSTRATA_DAEMON_EVENTS_EVENT_ENCODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/events/kv_event.h"

namespace kvstrata {

enum class EventEncoding { kArray, kMap };

// INVALID_ARGUMENT for anything but "array" or "map".
absl::StatusOr<EventEncoding> ParseEventEncoding(std::string_view name);

std::string EncodeEventBatch(const KvEventBatch& batch, int64_t data_parallel_rank,
                             EventEncoding encoding);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_EVENT_ENCODER_H_
