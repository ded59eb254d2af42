#include "daemon/tiering/l1_tier.h"

#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kvstrata {

std::optional<NamespaceId> L1Tier::IdOf(absl::string_view fingerprint) const {
  std::optional<NamespaceInfo> info = namespaces_->FindByFingerprint(std::string(fingerprint));
  if (!info.has_value()) return std::nullopt;
  return info->id;
}

std::optional<NamespaceId> L1Tier::IdOf(const TierNamespace& ns) const {
  if (ns.id == 0) return IdOf(ns.fingerprint);
  std::optional<NamespaceInfo> info = namespaces_->Find(ns.id);
  if (!info.has_value() || info->fingerprint != ns.fingerprint) return std::nullopt;
  return info->id;
}

BlockTier::Presence L1Tier::CachedImpl(const TierNamespace& tn, absl::string_view key) const {
  std::optional<NamespaceId> ns = IdOf(tn);
  if (!ns.has_value()) return Presence::kAbsent;
  std::string_view view(key.data(), key.size());
  absl::StatusOr<std::vector<std::optional<Tier>>> where =
      cache_->Peek(*ns, absl::MakeConstSpan(&view, 1));
  bool present = where.ok() && (*where)[0] == Tier::kL1;
  return present ? Presence::kPresent : Presence::kAbsent;
}

bool L1Tier::ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) {
  std::optional<NamespaceId> id = IdOf(ns);
  if (!id.has_value()) return false;
  std::string_view view(key.data(), key.size());
  absl::StatusOr<LoadResult> load =
      cache_->AcquireLoad(kDaemonSession, *id, absl::MakeConstSpan(&view, 1), std::nullopt);
  if (!load.ok() || load->load == 0) return false;
  const LoadSlot& slot = load->slots[0];
  bool hit = slot.status == LoadStatus::kReady && slot.length == dest.size();
  if (hit) std::memcpy(dest.data(), region_ + slot.offset, dest.size());
  (void)cache_->ReleaseLoad(kDaemonSession, load->load);
  return hit;
}

absl::StatusOr<BlockTier::WriteOutcome> L1Tier::WriteImpl(const TierNamespace& ns,
                                                          absl::string_view key,
                                                          absl::string_view payload) {
  std::optional<NamespaceId> id = IdOf(ns);
  if (!id.has_value()) {
    return absl::NotFoundError(absl::StrCat("namespace ", ns.fingerprint, " is not registered"));
  }
  std::string_view view(key.data(), key.size());
  absl::StatusOr<ReserveResult> reserved =
      cache_->ReserveStore(kDaemonSession, *id, ns.payload_bytes, absl::MakeConstSpan(&view, 1),
                           /*bypass_admission=*/true);
  if (!reserved.ok()) return reserved.status();
  const StoreSlot& slot = reserved->slots[0];
  switch (slot.status) {
    case StoreStatus::kAlreadyPresent:
      return WriteOutcome::kAlreadyPresent;
    case StoreStatus::kDropped:
    case StoreStatus::kNotAdmitted:
      return absl::ResourceExhaustedError("l1 has no room under its watermarks");
    case StoreStatus::kReserved:
      break;
  }
  std::memcpy(region_ + slot.offset, payload.data(), payload.size());
  absl::StatusOr<size_t> committed =
      cache_->CommitStore(kDaemonSession, reserved->reservation, std::nullopt);
  if (!committed.ok()) return committed.status();
  return WriteOutcome::kWritten;
}

bool L1Tier::RemoveImpl(const TierNamespace& ns, absl::string_view key) {
  std::optional<NamespaceId> id = IdOf(ns);
  if (!id.has_value()) return false;
  std::string_view view(key.data(), key.size());
  absl::StatusOr<size_t> evicted = cache_->Evict(*id, absl::MakeConstSpan(&view, 1));
  return evicted.ok() && *evicted > 0;
}

size_t L1Tier::ClearImpl(std::optional<absl::string_view> fingerprint) {
  if (!fingerprint.has_value()) return cache_->Clear(std::nullopt);
  std::optional<NamespaceId> id = IdOf(*fingerprint);
  return id.has_value() ? cache_->Clear(*id) : 0;
}

TierStats L1Tier::StatsImpl() const {
  CacheStats c = cache_->Stats();
  TierStats s;
  s.capacity_bytes = s.effective_bytes = c.capacity_bytes;
  s.used_bytes = c.used_bytes;
  s.blocks = c.blocks;
  s.evictions = c.evictions;
  s.refused_writes = c.dropped_stores + c.not_admitted;
  s.warm = true;
  return s;
}

}  // namespace kvstrata
