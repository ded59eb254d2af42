// BlockTier: one tier of whole blocks, as the code that moves blocks between tiers sees it.
// Every tier keeps this contract and passes the one typed contract suite
// (tests/unit/tiers/block_tier_contract_test.cc): L1 through its adapter (tiering/l1_tier.h),
// every kind of the tier factory (tiers/tier_factory.h: local-file, shared-file) built as
// the daemon builds it, and the in-memory fake (daemon/testing/memory_tier.h). A new kind
// of tier (an object store, GPUDirect storage) implements the protected `...Impl` calls
// below and registers in the tier factory; nothing inside TierManager names a concrete
// tier.
//
// The front and the kinds: the public calls are non-virtual and the same for every kind.
// They check the arguments, call the kind's protected `...Impl`, and count what happened,
// so that no kind (and no caller) checks or counts on its own:
// - Checks, before any Impl call: the namespace's fingerprint is 32 lowercase hex (its id
//   may be 0: the tier then finds the namespace by its fingerprint), a key is 1..32 bytes
//   (BlockKey::kMaxBytes), `dest` / a payload is exactly ns.payload_bytes long (and that is
//   not 0), a batch's spans have one entry per key. A call that fails them reaches no Impl
//   and is counted in TierStats::rejected_calls: Write and the batch calls return
//   INVALID_ARGUMENT naming what is wrong; the calls that answer with a bool or a Presence
//   (Read, Probe, Remove, Cached) answer a miss (false, kAbsent; Clear: 0) and log why,
//   at most once per 10 s per tier.
// - Counts: TierStats::hits / misses / read_bytes (Reads), writes / write_bytes (Writes
//   that stored a block; not a key already present) are kept here; Stats() is the kind's
//   StatsImpl() with these put in. With a MetricsSink (SetMetrics; the TierStack sets its
//   lower tiers'), every Read hit records a copy up from this tier and every Write that
//   succeeded (present already or stored) a copy down, with its bytes and its latency
//   (MetricsSink::RecordTransfer: kvstrata_transfer_*{direction="l2_to_l1"}, ...). A batch
//   call records one copy per block, each with the batch's time over its keys.
// - level(), label(), shared() and Stop() are the kind's own (virtual, unchecked, uncounted).
//
// The contract every kind keeps (its Impl calls see only arguments the front checked):
// - A block is named by (namespace, key bytes): every call names the namespace by its
//   TierNamespace (the daemon's NamespaceId and its fingerprint: one id space, NamespaceIds),
//   except Clear (a fingerprint); its payload is exactly ns.payload_bytes long.
// - Write stores the payload so that Read returns exactly those bytes; writing a key that is
//   present succeeds and keeps one block (WriteImpl answers kAlreadyPresent). A refusal (no
//   room, read-only) or a failure returns an error and leaves no partial block that Read
//   could return.
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
// - ReadMany / WriteMany / ProbeMany answer what the single calls would, key by key, in
//   the keys' order; their default Impls loop over the single Impls on the caller's thread.
//   A remote kind overrides them to pipeline the keys (each key's answer stays its own).
// - Stats are a snapshot of counters that only grow (but blocks, used bytes); the front's
//   counters and the kind's are each read on their own, not under one lock.
// - shared() is true for a tier other nodes write and delete too: Cached's kPresent may be
//   stale there, so a writer that must not skip a missing block probes before trusting it.
// - Stop joins the tier's own background threads (a scan, a trim) and is final: once it
//   returned, the tier calls back nobody (no observer notices) from a thread of its own;
//   calls made on the caller's thread still work. Idempotent; the destructor stops too.
// Thread-safe (the front holds no lock: its counters are atomics). Read, Write, Probe,
// Remove, Clear and the batch calls may block on I/O on the caller's thread; metrics are
// recorded on the caller's thread too.
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/common/ids.h"
#include "daemon/common/tier.h"
#include "daemon/metrics/metrics_sink.h"
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
  uint64_t hits = 0, misses = 0;  // Reads (kept by BlockTier's front)
  // Writes that stored a block, their payload bytes, and the bytes Reads returned (the
  // front's).
  uint64_t writes = 0, write_bytes = 0, read_bytes = 0;
  uint64_t evictions = 0, write_errors = 0, read_errors = 0, quarantined = 0;
  uint64_t refused_writes = 0;  // read-only, or no room
  uint64_t rejected_calls = 0;  // calls the front refused (a bad key, size or namespace)
  bool warm = false;            // the index is complete (warm-up scan finished)
  uint64_t scanned_files = 0;
  uint64_t followed_lines = 0;  // shared tier: other daemons' journal lines read
  TierState state = TierState::kOk;
};

class BlockTier {
 public:
  enum class Presence { kPresent, kStale, kAbsent, kUnknown };

  BlockTier() = default;
  BlockTier(const BlockTier&) = delete;
  BlockTier& operator=(const BlockTier&) = delete;
  virtual ~BlockTier() = default;

  // Where copies to and from this tier are recorded (nullptr: nowhere, the default). Set
  // before serving; not owned, outlives the tier. Meant for the tiers below L1 (a copy is
  // recorded between this tier and L1 above it); L1's own adapter is given none.
  void SetMetrics(MetricsSink* metrics) { metrics_.store(metrics, std::memory_order_release); }

  // The front (checks and counts, then the kind's Impl; see the top of this file).
  Presence Cached(const TierNamespace& ns, absl::string_view key) const;
  bool Probe(const TierNamespace& ns, absl::string_view key);
  bool Read(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest);
  absl::Status Write(const TierNamespace& ns, absl::string_view key, absl::string_view payload);
  bool Remove(const TierNamespace& ns, absl::string_view key);
  size_t Clear(std::optional<absl::string_view> fingerprint);
  TierStats Stats() const;

  // Batches: one answer per key, in order; INVALID_ARGUMENT (nothing done) when any
  // argument is bad. ReadMany fills dests[i] for keys[i] (true: a hit). WriteMany's inner
  // statuses are each key's Write answer.
  absl::StatusOr<std::vector<bool>> ReadMany(const TierNamespace& ns,
                                             absl::Span<const absl::string_view> keys,
                                             absl::Span<const absl::Span<char>> dests);
  absl::StatusOr<std::vector<absl::Status>> WriteMany(const TierNamespace& ns,
                                                      absl::Span<const absl::string_view> keys,
                                                      absl::Span<const absl::string_view> payloads);
  absl::StatusOr<std::vector<bool>> ProbeMany(const TierNamespace& ns,
                                              absl::Span<const absl::string_view> keys);

  // The kind's own. level(): the tier's id in the daemon's tier table (common/tier_table.h);
  // label(): its label there (logs).
  virtual Tier level() const = 0;
  virtual std::string label() const { return "tier" + std::to_string(TierIndex(level())); }
  virtual bool shared() const { return false; }
  virtual void Stop() {}

 protected:
  enum class WriteOutcome { kWritten, kAlreadyPresent };

  // What each kind implements (the contract above), called only with checked arguments.
  virtual Presence CachedImpl(const TierNamespace& ns, absl::string_view key) const = 0;
  virtual bool ProbeImpl(const TierNamespace& ns, absl::string_view key) = 0;
  virtual bool ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) = 0;
  virtual absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace& ns, absl::string_view key,
                                                 absl::string_view payload) = 0;
  virtual bool RemoveImpl(const TierNamespace& ns, absl::string_view key) = 0;
  virtual size_t ClearImpl(std::optional<absl::string_view> fingerprint) = 0;
  // The kind's stats; the front puts in the counters it keeps (hits, misses, read_bytes,
  // writes, write_bytes, rejected_calls).
  virtual TierStats StatsImpl() const = 0;
  // Defaults: the single Impl once per key, in order, on the caller's thread. The front
  // checked every key and gives one dest / payload per key; an override returns one answer
  // per key, in order (the front counts a missing answer as a miss, or an INTERNAL error).
  virtual std::vector<bool> ReadManyImpl(const TierNamespace& ns,
                                         absl::Span<const absl::string_view> keys,
                                         absl::Span<const absl::Span<char>> dests);
  virtual std::vector<absl::StatusOr<WriteOutcome>> WriteManyImpl(
      const TierNamespace& ns, absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> payloads);
  virtual std::vector<bool> ProbeManyImpl(const TierNamespace& ns,
                                          absl::Span<const absl::string_view> keys);

 private:
  // A refused call: counted, and logged at most once per 10 s. Returns `error`.
  absl::Status Reject(absl::string_view call, absl::Status error) const;
  void CountRead(bool hit, uint64_t bytes, absl::Duration took) const;
  void CountWrite(const absl::StatusOr<WriteOutcome>& outcome, uint64_t bytes,
                  absl::Duration took) const;

  std::atomic<MetricsSink*> metrics_{nullptr};
  mutable std::atomic<uint64_t> hits_{0}, misses_{0}, read_bytes_{0};
  mutable std::atomic<uint64_t> writes_{0}, write_bytes_{0}, rejected_{0};
  mutable std::atomic<int64_t> last_reject_log_ns_{0};  // steady clock
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_TIER_H_
