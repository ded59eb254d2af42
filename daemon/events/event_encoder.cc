#include "daemon/events/event_encoder.h"

#include "absl/strings/str_cat.h"
#include "daemon/events/msgpack_writer.h"

namespace kvstrata {
namespace {

std::string_view Tag(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kBlockStored:
      return "BlockStored";
    case KvEventKind::kBlockRemoved:
      return "BlockRemoved";
    case KvEventKind::kAllBlocksCleared:
      return "AllBlocksCleared";
  }
  return "AllBlocksCleared";
}

// Writes one event's fields in schema order; `map` prefixes each with its name.
class EventFields {
 public:
  EventFields(MsgpackWriter& out, bool map) : out_(out), map_(map) {}

  void Begin(const KvEvent& e) {
    uint32_t fields = 1;  // the tag
    if (e.kind == KvEventKind::kBlockStored) fields = 8;
    if (e.kind == KvEventKind::kBlockRemoved) fields = 3;
    if (map_) {
      out_.MapHeader(fields);
      out_.Str("type");
    } else {
      out_.ArrayHeader(fields);
    }
    out_.Str(Tag(e.kind));
  }
  void Name(std::string_view name) {
    if (map_) out_.Str(name);
  }

 private:
  MsgpackWriter& out_;
  bool map_;
};

void WriteHashes(MsgpackWriter& out, const std::vector<uint64_t>& hashes) {
  out.ArrayHeader(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) out.Uint(h);
}

void WriteEvent(MsgpackWriter& out, const KvEvent& e, bool map) {
  EventFields f(out, map);
  f.Begin(e);
  if (e.kind == KvEventKind::kAllBlocksCleared) return;
  f.Name("block_hashes");
  WriteHashes(out, e.block_hashes);
  if (e.kind == KvEventKind::kBlockStored) {
    f.Name("parent_block_hash");
    e.parent_block_hash.has_value() ? out.Uint(*e.parent_block_hash) : out.Nil();
    f.Name("token_ids");
    out.ArrayHeader(static_cast<uint32_t>(e.token_ids.size()));
    for (uint32_t t : e.token_ids) out.Uint(t);
    f.Name("block_size");
    out.Uint(e.block_size);
    f.Name("lora_id");
    e.lora_id.has_value() ? out.Int(*e.lora_id) : out.Nil();
  }
  f.Name("medium");
  out.Str(e.medium);
  if (e.kind == KvEventKind::kBlockStored) {
    f.Name("lora_name");
    e.lora_name.has_value() ? out.Str(*e.lora_name) : out.Nil();
  }
}

}  // namespace

absl::StatusOr<EventEncoding> ParseEventEncoding(std::string_view name) {
  if (name == "array") return EventEncoding::kArray;
  if (name == "map") return EventEncoding::kMap;
  return absl::InvalidArgumentError(
      absl::StrCat("event encoding '", std::string(name), "' is not one of: array, map"));
}

std::string EncodeEventBatch(const KvEventBatch& batch, int64_t data_parallel_rank,
                             EventEncoding encoding) {
  MsgpackWriter out;
  out.ArrayHeader(3);
  out.Double(batch.ts);
  out.ArrayHeader(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) WriteEvent(out, e, encoding == EventEncoding::kMap);
  out.Int(data_parallel_rank);
  return out.Release();
}

}  // namespace kvstrata
