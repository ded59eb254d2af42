// SubmitStore / SubmitLoad on the fast-path socket (docs/wire-protocol.md, "Job frames"):
// the same persistent Unix stream connections as the lookup frames (lookup_wire.h), told
// apart by their magic. One request frame is answered by one response frame. All integers
// little-endian. Pure functions; thread-safe.
//
// Request  (48 bytes + key_count * key_bytes + key_count * 4):
//   u32 magic "KVSJ" | u16 version (1) | u16 kind (1 store, 2 load) | u64 session_id |
//   u32 namespace_id | u32 key_count | u32 key_bytes (1..32) | u32 event (stores: as
//   SubmitStoreRequest.wait_event; loads: as SubmitLoadRequest.layer_flag_value) |
//   u64 registration_id | u64 lease_id (loads) |
//   keys, key_count * key_bytes bytes | block_ids, key_count u32.
// Response (20 bytes + message_bytes):
//   u32 magic "KVSJ" | u32 status (0 OK, else a gRPC status code number) | u64 job_id |
//   u32 message_bytes | message.
// Version 2 request frames are version 1's with one more promise: the job's completion comes
// back on the same connection, as a completion frame, whenever it finishes (before or after
// the response; a completion that cannot be written there goes to the session's queue).
// Completion (40 bytes + failed_count * 4 + error_bytes):
//   u32 magic "KVSC" | u16 kind (1 store, 2 load) | u16 reserved (0) | u64 session_id |
//   u64 job_id | u64 elapsed_us | u32 failed_count | u32 error_bytes |
//   failed block indices, failed_count u32 | error, error_bytes bytes.
#ifndef KVSTRATA_DAEMON_RPC_FAST_PATH_JOB_WIRE_H_
#define KVSTRATA_DAEMON_RPC_FAST_PATH_JOB_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "daemon/rpc/fast_path/lookup_wire.h"

namespace kvstrata::job_wire {

inline constexpr uint32_t kMagic = 0x4A53564B;  // The bytes "KVSJ" read as little-endian.
inline constexpr uint16_t kVersion = 1;
inline constexpr uint16_t kVersionCompletionsHere = 2;    // Completions on this connection.
inline constexpr uint32_t kCompletionMagic = 0x4353564B;  // "KVSC" read as little-endian.
inline constexpr size_t kCompletionHeaderBytes = 40;
inline constexpr uint16_t kKindStore = 1;
inline constexpr uint16_t kKindLoad = 2;
inline constexpr size_t kRequestHeaderBytes = 48;
inline constexpr size_t kResponseHeaderBytes = 20;

struct RequestHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = kKindLoad;
  uint64_t session_id = 0;
  uint32_t namespace_id = 0;
  uint32_t key_count = 0;
  uint32_t key_bytes = 0;
  uint32_t event = 0;  // Stores: wait_event; loads: layer_flag_value.
  uint64_t registration_id = 0;
  uint64_t lease_id = 0;
};

struct ResponseHeader {
  uint32_t magic = kMagic;
  uint32_t status = 0;
  uint64_t job_id = 0;
  uint32_t message_bytes = 0;
};

struct CompletionHeader {
  uint32_t magic = kCompletionMagic;
  uint16_t kind = kKindLoad;
  uint16_t reserved = 0;
  uint64_t session_id = 0;
  uint64_t job_id = 0;
  uint64_t elapsed_us = 0;
  uint32_t failed_count = 0;
  uint32_t error_bytes = 0;
};

// `out` holds kRequestHeaderBytes.
inline void EncodeRequestHeader(const RequestHeader& h, char* out) {
  using lookup_wire::internal::Put;
  out = Put(Put(Put(Put(out, h.magic), h.version), h.kind), h.session_id);
  out = Put(Put(Put(Put(out, h.namespace_id), h.key_count), h.key_bytes), h.event);
  Put(Put(out, h.registration_id), h.lease_id);
}

// `in` holds kRequestHeaderBytes. Checks nothing.
inline RequestHeader DecodeRequestHeader(const char* in) {
  using lookup_wire::internal::Get;
  RequestHeader h;
  in = Get(Get(Get(Get(in, &h.magic), &h.version), &h.kind), &h.session_id);
  in = Get(Get(Get(Get(in, &h.namespace_id), &h.key_count), &h.key_bytes), &h.event);
  Get(Get(in, &h.registration_id), &h.lease_id);
  return h;
}

// `out` holds kResponseHeaderBytes.
inline void EncodeResponseHeader(const ResponseHeader& h, char* out) {
  using lookup_wire::internal::Put;
  Put(Put(Put(Put(out, h.magic), h.status), h.job_id), h.message_bytes);
}

// `in` holds kResponseHeaderBytes. Checks nothing.
inline ResponseHeader DecodeResponseHeader(const char* in) {
  using lookup_wire::internal::Get;
  ResponseHeader h;
  Get(Get(Get(Get(in, &h.magic), &h.status), &h.job_id), &h.message_bytes);
  return h;
}

// `out` holds kCompletionHeaderBytes.
inline void EncodeCompletionHeader(const CompletionHeader& h, char* out) {
  using lookup_wire::internal::Put;
  out = Put(Put(Put(Put(out, h.magic), h.kind), h.reserved), h.session_id);
  Put(Put(Put(Put(out, h.job_id), h.elapsed_us), h.failed_count), h.error_bytes);
}

// `in` holds kCompletionHeaderBytes. Checks nothing.
inline CompletionHeader DecodeCompletionHeader(const char* in) {
  using lookup_wire::internal::Get;
  CompletionHeader h;
  in = Get(Get(Get(Get(in, &h.magic), &h.kind), &h.reserved), &h.session_id);
  Get(Get(Get(Get(in, &h.job_id), &h.elapsed_us), &h.failed_count), &h.error_bytes);
  return h;
}

}  // namespace kvstrata::job_wire

#endif  // KVSTRATA_DAEMON_RPC_FAST_PATH_JOB_WIRE_H_
