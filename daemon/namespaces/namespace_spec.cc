#include "daemon/namespaces/namespace_spec.h"

#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstrata {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("namespace spec: ", field, " ", why));
}

absl::Status CheckRange(absl::string_view field, uint64_t value, uint64_t min, uint64_t max) {
  if (value < min || value > max) {
    return Invalid(field, absl::StrCat("= ", value, " is outside [", min, ", ", max, "]"));
  }
  return absl::OkStatus();
}

uint32_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBfloat16:
      return 2;
    default:
      return 1;
  }
}

absl::Status ValidateGeometry(const NamespaceSpec& spec) {
  if (spec.kv_layout == KvLayout::kOpaque) {
    return CheckRange("opaque_block_bytes", spec.opaque_block_bytes, 1, kMaxBlockBytes);
  }
  if (spec.opaque_block_bytes != 0)
    return Invalid("opaque_block_bytes", "is only for opaque layout");
  for (auto [field, value, max] : {std::tuple{"num_layers", spec.num_layers, 4096u},
                                   std::tuple{"num_kv_heads", spec.num_kv_heads, 4096u},
                                   std::tuple{"head_size", spec.head_size, 65536u},
                                   std::tuple{"tokens_per_block", spec.tokens_per_block, 65536u}}) {
    if (absl::Status s = CheckRange(field, value, 1, max); !s.ok()) return s;
  }
  if (BytesPerBlock(spec) > kMaxBlockBytes) {
    return Invalid("geometry",
                   absl::StrCat("gives ", BytesPerBlock(spec), " bytes per block, more than 1GiB"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAndNormalize(NamespaceSpec& spec) {
  if (spec.engine_kind == EngineKind::kUnspecified || spec.engine_kind > EngineKind::kOther) {
    return Invalid("engine_kind", "must be set to a known engine");
  }
  if (spec.model.empty() || spec.model.size() > 512)
    return Invalid("model", "must be 1..512 bytes");
  if (spec.dtype == DType::kUnspecified || spec.dtype > DType::kUint8) {
    return Invalid("dtype", "must be set to a known type");
  }
  if (spec.kv_layout == KvLayout::kUnspecified || spec.kv_layout > KvLayout::kOpaque) {
    return Invalid("kv_layout", "must be set to a known layout");
  }
  if (spec.attention_kind > AttentionKind::kMla) return Invalid("attention_kind", "is unknown");
  if (spec.attention_kind == AttentionKind::kUnspecified) spec.attention_kind = AttentionKind::kMha;
  if (spec.salt.size() > 256) return Invalid("salt", "must be at most 256 bytes");
  if (spec.scope.size() > 63) return Invalid("scope", "must be at most 63 bytes");
  if (spec.kv_group.size() > kMaxKvGroupBytes) {
    return Invalid("kv_group", absl::StrCat("must be at most ", kMaxKvGroupBytes, " bytes"));
  }
  for (char c : spec.kv_group) {
    if (c < 0x20 || c > 0x7e) return Invalid("kv_group", "must be printable ASCII");
  }
  if (spec.tp_size == 0) spec.tp_size = 1;
  if (spec.pp_size == 0) spec.pp_size = 1;
  if (absl::Status s = CheckRange("tp_size", spec.tp_size, 1, 4096); !s.ok()) return s;
  if (absl::Status s = CheckRange("pp_size", spec.pp_size, 1, 4096); !s.ok()) return s;
  if (spec.tp_rank >= spec.tp_size) return Invalid("tp_rank", "must be below tp_size");
  if (spec.pp_rank >= spec.pp_size) return Invalid("pp_rank", "must be below pp_size");
  return ValidateGeometry(spec);
}

uint64_t BytesPerBlock(const NamespaceSpec& spec) {
  if (spec.kv_layout == KvLayout::kOpaque) return spec.opaque_block_bytes;
  uint64_t components = spec.attention_kind == AttentionKind::kMla ? 1 : 2;
  return components * spec.num_layers * spec.num_kv_heads * spec.head_size * spec.tokens_per_block *
         DTypeBytes(spec.dtype);
}

std::string CanonicalEncoding(const NamespaceSpec& spec) {
  std::string out = "kvstrata-ns-v1";
  auto add = [&out](absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out, "|", name, ":", value.size(), ":", value);
  };
  add("engine", absl::StrCat(static_cast<uint32_t>(spec.engine_kind)));
  add("model", spec.model);
  add("dtype", absl::StrCat(static_cast<uint32_t>(spec.dtype)));
  add("layers", absl::StrCat(spec.num_layers));
  add("kv_heads", absl::StrCat(spec.num_kv_heads));
  add("head_size", absl::StrCat(spec.head_size));
  add("tokens", absl::StrCat(spec.tokens_per_block));
  add("tp", absl::StrCat(spec.tp_size, "/", spec.tp_rank));
  add("pp", absl::StrCat(spec.pp_size, "/", spec.pp_rank));
  add("layout", absl::StrCat(static_cast<uint32_t>(spec.kv_layout)));
  add("attention", absl::StrCat(static_cast<uint32_t>(spec.attention_kind)));
  add("salt", spec.salt);
  add("opaque_bytes", absl::StrCat(spec.opaque_block_bytes));
  if (!spec.scope.empty()) add("scope", spec.scope);
  if (!spec.kv_group.empty()) add("kv_group", spec.kv_group);
  return out;
}

std::string Fingerprint(const NamespaceSpec& spec) {
  std::string encoding = CanonicalEncoding(spec);
  XXH128_hash_t hash = XXH3_128bits(encoding.data(), encoding.size());
  return absl::StrFormat("%016x%016x", hash.high64, hash.low64);
}

}  // namespace kvstrata
