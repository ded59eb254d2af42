// A namespace: everything that decides whether two engines' KV blocks are
// interchangeable. Blocks of different namespaces never match. The fingerprint is a
// 128-bit XXH3 hash of a canonical, versioned encoding of every field, written as 32 hex
// characters: the same spec gives the same fingerprint on every daemon and every run, so
// it can name directories on shared storage. Value type; thread-compatible.
#ifndef KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_SPEC_H_
#define KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvstrata {

// The numeric values of these enums equal the wire enums in proto/kvstrata/v1/common.proto.
enum class EngineKind : uint32_t { kUnspecified = 0, kVllm = 1, kSglang = 2, kOther = 3 };
enum class DType : uint32_t {
  kUnspecified = 0,
  kFloat16 = 1,
  kBfloat16 = 2,
  kFloat32 = 3,
  kFp8E4m3 = 4,
  kFp8E5m2 = 5,
  kUint8 = 6,
};
enum class KvLayout : uint32_t {
  kUnspecified = 0,
  kVllmNhd = 1,
  kVllmHnd = 2,
  kVllmCrossLayer = 3,
  kSglangLayerFirst = 4,
  kSglangPageFirst = 5,
  kSglangPageFirstDirect = 6,
  kOpaque = 7,
};
enum class AttentionKind : uint32_t { kUnspecified = 0, kMha = 1, kMla = 2 };

struct NamespaceSpec {
  EngineKind engine_kind = EngineKind::kUnspecified;
  std::string model;
  DType dtype = DType::kUnspecified;
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_size = 0;
  uint32_t tokens_per_block = 0;
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  uint32_t pp_size = 1;
  uint32_t pp_rank = 0;
  KvLayout kv_layout = KvLayout::kUnspecified;
  AttentionKind attention_kind = AttentionKind::kUnspecified;
  std::string salt;
  uint64_t opaque_block_bytes = 0;
  // The KV cache group of a hybrid engine ("" for one group): printable ASCII, at most
  // kMaxKvGroupBytes. Part of the fingerprint only when set (older fingerprints stay valid).
  std::string kv_group;
  // The tenant that registered it ("" on a single-tenant daemon): set by the daemon from
  // the caller, never taken from the wire, so two tenants' identical specs never share
  // blocks. Part of the fingerprint only when set (older fingerprints stay valid).
  std::string scope;
};

// Longest kv_group.
inline constexpr size_t kMaxKvGroupBytes = 128;

// Largest block the daemon accepts (1 GiB).
inline constexpr uint64_t kMaxBlockBytes = 1ULL << 30;

// INVALID_ARGUMENT naming the first bad field. Fills in defaults (tp/pp size 0 -> 1).
absl::Status ValidateAndNormalize(NamespaceSpec& spec);

// Bytes of one stored block. REQUIRES: spec passed ValidateAndNormalize.
uint64_t BytesPerBlock(const NamespaceSpec& spec);

// The canonical encoding ("kvstrata-ns-v1" followed by length-prefixed fields).
std::string CanonicalEncoding(const NamespaceSpec& spec);

// 32 lowercase hex characters.
std::string Fingerprint(const NamespaceSpec& spec);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_SPEC_H_
