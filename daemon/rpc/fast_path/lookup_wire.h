// The fast path's frames (docs/wire-protocol.md, "The fast path"): a plain Unix
// stream socket beside the gRPC one, persistent connections, one request frame answered by
// one response frame. All integers little-endian. Shared by kvstratad (FastPathServer) and
// the C++ client (LookupClient). Pure functions; thread-safe.
//
// Request  (32 bytes + key_count * key_bytes):
//   u32 magic "KVSL" | u16 version (1) | u16 flags (bit 0: acquire a lease; bit 1: with
//   it, do not promote the hits below L1 -- LookupRequest.skip_promotion) |
//   u64 session_id | u32 namespace_id | u32 key_count | u32 key_bytes (1..32) |
//   u32 lease_ttl_ms (0: the daemon's default) | keys, key_count * key_bytes bytes.
// Response (36 bytes + tier_count + message_bytes):
//   u32 magic "KVSL" | u32 status (0 OK, else a gRPC status code number) | u32 hit_blocks |
//   u32 tier_count | u64 lease_id | u64 lease_expires_unix_ms | u32 message_bytes |
//   tier_count bytes (one per hit: 1 L1, 2 L2, 3 L3 as common.proto Tier) | message.
//
// Version 2 looks up one chain in several namespaces (every tensor-parallel rank's, every KV
// cache group's) in one round trip. The request header's namespace_id field is the number
// of namespaces (1..kMaxNamespaces), and that many u32 namespace ids follow the header,
// before the keys. The namespaces are asked in order, each for the keys every one before it
// holds. The response has version 1's header: hit_blocks = the leading keys every namespace
// holds, tier_count = hit_blocks, lease_id = 0; when status is OK, one u64 lease id per
// namespace of the request (0: no lease, e.g. nothing held or not asked) comes before the
// tiers, and each tier byte is the slowest tier any namespace holds that key in.
//
// Release frame (leases a client ends unused; docs/wire-protocol.md):
//   Request (24 bytes + lease_count * 8): u32 magic "KVSR" | u16 version (1) | u16 flags (0) |
//   u64 session_id | u32 lease_count (1..kMaxReleaseLeases) | u32 reserved (0) | u64 ids.
//   Response: a lookup response header, hit_blocks = the leases released (one that already
//   ended, or is another session's, is skipped), tier_count 0, then the message.
#ifndef KVSTRATA_DAEMON_RPC_FAST_PATH_LOOKUP_WIRE_H_
#define KVSTRATA_DAEMON_RPC_FAST_PATH_LOOKUP_WIRE_H_

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvstrata::lookup_wire {

inline constexpr uint32_t kMagic = 0x4C53564B;  // The bytes "KVSL" read as little-endian.
inline constexpr uint16_t kVersion = 1;
inline constexpr uint16_t kVersionNamespaces = 2;  // several namespaces, one chain
inline constexpr uint32_t kMaxNamespaces = 64;
inline constexpr uint16_t kFlagAcquireLease = 1;
inline constexpr uint16_t kFlagSkipPromotion = 2;
inline constexpr uint16_t kKnownFlags = kFlagAcquireLease | kFlagSkipPromotion;
inline constexpr size_t kRequestHeaderBytes = 32;
inline constexpr size_t kResponseHeaderBytes = 36;
inline constexpr uint32_t kMaxMessageBytes = 4096;  // Longer error messages are cut.

inline constexpr uint32_t kReleaseMagic = 0x5253564B;  // "KVSR" read as little-endian.
inline constexpr uint16_t kReleaseVersion = 1;
inline constexpr size_t kReleaseHeaderBytes = 24;
inline constexpr uint32_t kMaxReleaseLeases = 4096;

struct ReleaseHeader {
  uint32_t magic = kReleaseMagic;
  uint16_t version = kReleaseVersion;
  uint16_t flags = 0;
  uint64_t session_id = 0;
  uint32_t lease_count = 0;
  uint32_t reserved = 0;
};

struct RequestHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t flags = 0;
  uint64_t session_id = 0;
  uint32_t namespace_id = 0;
  uint32_t key_count = 0;
  uint32_t key_bytes = 0;
  uint32_t lease_ttl_ms = 0;
};

struct ResponseHeader {
  uint32_t magic = kMagic;
  uint32_t status = 0;
  uint32_t hit_blocks = 0;
  uint32_t tier_count = 0;
  uint64_t lease_id = 0;
  uint64_t lease_expires_unix_ms = 0;
  uint32_t message_bytes = 0;
};

namespace internal {
template <typename T>
inline char* Put(char* out, T value) {
  if constexpr (sizeof(T) == 2) value = static_cast<T>(htole16(value));
  if constexpr (sizeof(T) == 4) value = static_cast<T>(htole32(value));
  if constexpr (sizeof(T) == 8) value = static_cast<T>(htole64(value));
  std::memcpy(out, &value, sizeof(T));
  return out + sizeof(T);
}
template <typename T>
inline const char* Get(const char* in, T* value) {
  std::memcpy(value, in, sizeof(T));
  if constexpr (sizeof(T) == 2) *value = static_cast<T>(le16toh(*value));
  if constexpr (sizeof(T) == 4) *value = static_cast<T>(le32toh(*value));
  if constexpr (sizeof(T) == 8) *value = static_cast<T>(le64toh(*value));
  return in + sizeof(T);
}
}  // namespace internal

// `out` holds kRequestHeaderBytes.
inline void EncodeRequestHeader(const RequestHeader& h, char* out) {
  using internal::Put;
  out = Put(Put(Put(Put(out, h.magic), h.version), h.flags), h.session_id);
  Put(Put(Put(Put(out, h.namespace_id), h.key_count), h.key_bytes), h.lease_ttl_ms);
}

// `in` holds kRequestHeaderBytes. Checks nothing.
inline RequestHeader DecodeRequestHeader(const char* in) {
  using internal::Get;
  RequestHeader h;
  in = Get(Get(Get(Get(in, &h.magic), &h.version), &h.flags), &h.session_id);
  Get(Get(Get(Get(in, &h.namespace_id), &h.key_count), &h.key_bytes), &h.lease_ttl_ms);
  return h;
}

// `out` holds kResponseHeaderBytes.
inline void EncodeResponseHeader(const ResponseHeader& h, char* out) {
  using internal::Put;
  out = Put(Put(Put(Put(out, h.magic), h.status), h.hit_blocks), h.tier_count);
  Put(Put(Put(out, h.lease_id), h.lease_expires_unix_ms), h.message_bytes);
}

// `in` holds kResponseHeaderBytes. Checks nothing.
inline ResponseHeader DecodeResponseHeader(const char* in) {
  using internal::Get;
  ResponseHeader h;
  in = Get(Get(Get(Get(in, &h.magic), &h.status), &h.hit_blocks), &h.tier_count);
  Get(Get(Get(in, &h.lease_id), &h.lease_expires_unix_ms), &h.message_bytes);
  return h;
}

// `out` holds kReleaseHeaderBytes.
inline void EncodeReleaseHeader(const ReleaseHeader& h, char* out) {
  using internal::Put;
  out = Put(Put(Put(Put(out, h.magic), h.version), h.flags), h.session_id);
  Put(Put(out, h.lease_count), h.reserved);
}

// `in` holds kReleaseHeaderBytes. Checks nothing.
inline ReleaseHeader DecodeReleaseHeader(const char* in) {
  using internal::Get;
  ReleaseHeader h;
  in = Get(Get(Get(Get(in, &h.magic), &h.version), &h.flags), &h.session_id);
  Get(Get(in, &h.lease_count), &h.reserved);
  return h;
}

}  // namespace kvstrata::lookup_wire

#endif  // KVSTRATA_DAEMON_RPC_FAST_PATH_LOOKUP_WIRE_H_
