// LocalFileTier: the "local-file" kind (the default l2): a FileTier over a directory only
// this daemon writes, normally on NVMe. Its index is complete once the background warm-up
// scan after start is done (until then a key it lacks is kUnknown), and it evicts with the
// configured policy (lru, arc, s3fifo) before a write would pass the high watermark, down to
// the low one; a file being read is not evicted. See file_tier.h for the store both kinds
// share. Thread-safe.
#ifndef KVSTRATA_DAEMON_TIERS_LOCAL_FILE_TIER_H_
#define KVSTRATA_DAEMON_TIERS_LOCAL_FILE_TIER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/eviction/eviction_policy.h"
#include "daemon/tiers/file_tier.h"

namespace kvstrata {

class LocalFileTier final : public FileTier {
 public:
  // Built by FileTier::Open (options.shared false), which starts it.
  LocalFileTier(FileTierOptions options, std::unique_ptr<EvictionPolicy> policy);
  ~LocalFileTier() override { Stop(); }

 protected:
  void Background() override { WarmUp(); }
  bool IndexComplete() const override { return warm_.load(std::memory_order_acquire); }
  Presence IndexedPresenceLocked(const FileMeta&) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Presence::kPresent;
  }
  std::optional<FileInfo> StatForProbe(const std::string& path) override { return fs_->Stat(path); }
  void IndexedLocked(const BlockKey& key) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnindexedLocked(const BlockKey& key) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadingLocked(const BlockKey& key) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The only writer: an indexed file is there.
  bool StillThere(const TierNamespace&, absl::string_view) override { return true; }
  bool EvictForLocked(uint64_t incoming, std::vector<std::string>* doomed) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  // The warm-up scan (file_tier_scan.cc): every block file under the root into the index,
  // temp files of dead writers removed, then the cap enforced.
  void WarmUp();

  const std::unique_ptr<EvictionPolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, BlockKey> by_id_ ABSL_GUARDED_BY(mu_);  // the policy's ids
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_LOCAL_FILE_TIER_H_
