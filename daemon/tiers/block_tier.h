// BlockTier: one tier of whole blocks, as the code that moves blocks between tiers sees it.
// Every tier keeps this contract and passes the one typed contract suite
// (tests/unit/tiers/block_tier_contract_test.cc): L1 through its adapter (tiering/l1_tier.h),
// FileTier as L2 and as L3, and the in-memory fake (daemon/testing/memory_tier.h). A new
// kind of tier (an object store, GPUDirect storage) implements this and is handed to
// TierManager::AddTier; nothing inside TierManager names a concrete tier.
//
// The contract:
// - A block is named by (namespace, key bytes): every call names the namespace by its
//   TierNamespace (the daemon's NamespaceId and its fingerprint: one id space, NamespaceIds),
//   except Clear (a fingerprint); its payload is exactly ns.payload_bytes long.
// - Write stores the payload so that Read returns exactly those bytes; writing a key that is
//   present succeeds and keeps one block. A refusal (no room, read-only, bad size) or a
//   failure returns an error and leaves no partial block that Read could return.
// - Read fills `dest` (exactly ns.payload_bytes) and returns true, or returns false: a miss
//   (absent, removed, failed verification). Never wrong bytes, never a partial hit.
// - Cached answers from memory only, never blocking on I/O: kPresent = a Read is expected
//   to hit (a shared tier: the file was seen within its short presence_ttl); kStale (a
//   shared tier) = indexed but not seen lately: another node may have removed it, so a
//   lookup probes it, and counts it only where the probe does not answer in time (a load
//   just reads it); kAbsent = known to miss for now; kUnknown = only Probe can tell.
// - Probe may do I/O and records its answer, so Cached knows it afterwards.
// - Remove deletes one block (true when this call removed it); Clear deletes every block of
//   one namespace, or of all, and returns how many.
// - Stats are a consistent snapshot of counters that only grow (but blocks, used bytes).
// - shared() is true for a tier other nodes write and delete too: Cached's kPresent may be
//   stale there, so a writer that must not skip a missing block probes before trusting it.
// - Stop joins the tier's own background threads (a scan, a trim) and is final: once it
//   returned, the tier calls back nobody (no observer notices) from a thread of its own;
//   calls made on the caller's thread still work. Idempotent; the destructor stops too.
// Thread-safe. Read, Write, Probe, Remove and Clear may block on I/O on the caller's thread.
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/common/ids.h"
#include "daemon/common/tier.h"
#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata {

// A namespace as the tiers name it.
struct TierNamespace {
  std::string fingerprint;  // 32 lowercase hex
  NamespaceSpec spec;       // written beside the blocks (namespace.json) by file tiers
  uint64_t payload_bytes = 0;
  // The daemon's id of it (NamespaceIds: the registry's); 0 = the caller does not know it,
  // and the tier asks its NamespaceIds for the fingerprint's.
  NamespaceId id = 0;
};

enum class TierState { kOk, kDegraded, kReadOnly };
absl::string_view TierStateName(TierState state);  // "ok", "degraded", "read-only"

struct TierStats {
  uint64_t capacity_bytes = 0;    // configured
  uint64_t effective_bytes = 0;   // after a full-disk shrink
  uint64_t used_bytes = 0;        // local: indexed files; shared: last scan + own writes since
  uint64_t blocks = 0;            // blocks in the index
  uint64_t hits = 0, misses = 0;  // reads
  uint64_t writes = 0, write_bytes = 0, read_bytes = 0;
  uint64_t evictions = 0, write_errors = 0, read_errors = 0, quarantined = 0;
  uint64_t refused_writes = 0;  // read-only, or no room
  bool warm = false;            // the index is complete (warm-up scan finished)
  uint64_t scanned_files = 0;
  uint64_t followed_lines = 0;  // shared tier: other daemons' journal lines read
  TierState state = TierState::kOk;
};

class BlockTier {
 public:
  enum class Presence { kPresent, kStale, kAbsent, kUnknown };

  virtual ~BlockTier() = default;

  virtual Tier level() const = 0;
  virtual Presence Cached(const TierNamespace& ns, absl::string_view key) const = 0;
  virtual bool Probe(const TierNamespace& ns, absl::string_view key) = 0;
  virtual bool Read(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) = 0;
  virtual absl::Status Write(const TierNamespace& ns, absl::string_view key,
                             absl::string_view payload) = 0;
  virtual bool Remove(const TierNamespace& ns, absl::string_view key) = 0;
  virtual size_t Clear(std::optional<absl::string_view> fingerprint) = 0;
  virtual TierStats Stats() const = 0;
  virtual bool shared() const { return false; }
  virtual void Stop() {}
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_
