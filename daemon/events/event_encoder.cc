#include "daemon/events/event_encoder.h"

#include <functional>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "msgpack/pack.hpp"
#include "msgpack/sbuffer.hpp"

namespace kvstrata {
namespace {

// msgpack-cxx's packer writes each integer in its smallest form, as msgspec does.
using Packer = msgpack::packer<msgpack::sbuffer>;

Packer& PackStr(Packer& out, std::string_view s) {
  out.pack_str(static_cast<uint32_t>(s.size()));
  return out.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

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

// One field of an event: its name and how to write its value; `set` false for an optional
// field at its default (None), which msgspec's omit_defaults leaves out.
struct Field {
  std::string_view name;
  bool set;
  std::function<void(Packer&)> write;
};

void WriteHashes(Packer& out, const std::vector<uint64_t>& hashes) {
  out.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) out.pack_uint64(h);
}

template <typename T, typename F>
Field Optional(std::string_view name, const std::optional<T>& value, F write) {
  return Field{name, value.has_value(), [&value, write](Packer& out) { write(out, *value); }};
}

// The fields of `e` after the tag, in vLLM 0.33's declaration order. The required ones
// (no default in the struct) are always `set`, even when their value is None.
std::vector<Field> Fields(const KvEvent& e) {
  std::vector<Field> f;
  if (e.kind == KvEventKind::kAllBlocksCleared) return f;
  auto str = [](Packer& out, const std::string& v) { PackStr(out, v); };
  auto uint = [](Packer& out, uint64_t v) { out.pack_uint64(v); };
  f.push_back({"block_hashes", true, [&e](Packer& out) { WriteHashes(out, e.block_hashes); }});
  if (e.kind == KvEventKind::kBlockStored) {
    f.push_back({"parent_block_hash", true, [&e](Packer& out) {
                   e.parent_block_hash.has_value() ? out.pack_uint64(*e.parent_block_hash)
                                                   : out.pack_nil();
                 }});
    f.push_back({"token_ids", true, [&e](Packer& out) {
                   out.pack_array(static_cast<uint32_t>(e.token_ids.size()));
                   for (uint32_t t : e.token_ids) out.pack_uint64(t);
                 }});
    f.push_back({"block_size", true, [&e](Packer& out) { out.pack_uint64(e.block_size); }});
    f.push_back({"lora_id", true, [&e](Packer& out) {
                   e.lora_id.has_value() ? out.pack_int64(*e.lora_id) : out.pack_nil();
                 }});
  }
  f.push_back({"medium", true, [&e](Packer& out) { PackStr(out, e.medium); }});
  if (e.kind == KvEventKind::kBlockStored) {
    f.push_back({"lora_name", true, [&e](Packer& out) {
                   e.lora_name.has_value() ? PackStr(out, *e.lora_name) : out.pack_nil();
                 }});
    f.push_back({"extra_keys", false, nullptr});
  }
  f.push_back(Optional("group_idx", e.group_idx, uint));
  if (e.kind == KvEventKind::kBlockStored) {
    f.push_back(Optional("kv_cache_spec_kind", e.kv_cache_spec_kind, str));
    f.push_back({"kv_cache_spec_sliding_window", false, nullptr});
  }
  f.push_back(Optional("locality", e.locality, str));
  // ownership, session_id, lookahead_token_ids: never set by the daemon.
  return f;
}

// map: {"type": tag, name: value...} with the set fields only (msgspec tagged struct,
// omit_defaults). array: [tag, value...] up to the last set field, unset ones before it
// written as nil (msgspec array_like with omit_defaults).
void WriteEvent(Packer& out, const KvEvent& e, bool map) {
  std::vector<Field> fields = Fields(e);
  size_t count = 0, last = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].set) {
      ++count;
      last = i + 1;
    }
  }
  if (map) {
    out.pack_map(static_cast<uint32_t>(count + 1));
    PackStr(out, "type");
    PackStr(out, Tag(e.kind));
    for (const Field& f : fields) {
      if (!f.set) continue;
      PackStr(out, f.name);
      f.write(out);
    }
    return;
  }
  out.pack_array(static_cast<uint32_t>(last + 1));
  PackStr(out, Tag(e.kind));
  for (size_t i = 0; i < last; ++i) {
    if (fields[i].set) {
      fields[i].write(out);
    } else {
      out.pack_nil();
    }
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
  msgpack::sbuffer buffer;
  Packer out(buffer);
  out.pack_array(3);
  out.pack_double(batch.ts);
  out.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) WriteEvent(out, e, encoding == EventEncoding::kMap);
  out.pack_int64(data_parallel_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvstrata
