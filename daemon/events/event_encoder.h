// Encodes a KvEventBatch as the msgpack payload of one ZMQ message, vLLM's wire format:
// the batch is always the array [ts, [events...], data_parallel_rank]; each event is
//   array (default, msgspec array_like): ["BlockStored", block_hashes, parent_block_hash,
//       token_ids, block_size, lora_id, medium, lora_name], ["BlockRemoved", block_hashes,
//       medium], ["AllBlocksCleared"];
//   map (msgspec tagged struct):          {"type": "BlockStored", "block_hashes": ..., ...}
//       with the same field names and values.
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
