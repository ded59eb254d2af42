#include "daemon/namespaces/namespace_registry.h"

#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::StatusOr<NamespaceInfo> NamespaceRegistry::Register(uint64_t session_id, NamespaceSpec spec) {
  if (absl::Status s = ValidateAndNormalize(spec); !s.ok()) return s;
  std::string fingerprint = Fingerprint(spec);
  MutexLock lock(&mu_);
  auto found = by_fingerprint_.find(fingerprint);
  if (found == by_fingerprint_.end()) {
    if (entries_.size() >= max_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("namespace limit reached (", max_, " namespaces)"));
    }
    Entry entry;
    entry.info = {static_cast<uint32_t>(entries_.size() + 1), fingerprint, spec,
                  BytesPerBlock(spec), 0};
    entries_.push_back(std::move(entry));
    found = by_fingerprint_.emplace(fingerprint, entries_.size()).first;
  }
  Entry& entry = entries_[found->second - 1];
  entry.sessions.insert(session_id);
  return Snapshot(entry);
}

NamespaceInfo NamespaceRegistry::Snapshot(const Entry& entry) const {
  NamespaceInfo info = entry.info;
  info.sessions = static_cast<uint32_t>(entry.sessions.size());
  return info;
}

std::optional<NamespaceInfo> NamespaceRegistry::Find(uint32_t id) const {
  MutexLock lock(&mu_);
  if (id == 0 || id > entries_.size()) return std::nullopt;
  return Snapshot(entries_[id - 1]);
}

std::optional<NamespaceInfo> NamespaceRegistry::FindByFingerprint(
    const std::string& fingerprint) const {
  MutexLock lock(&mu_);
  auto found = by_fingerprint_.find(fingerprint);
  if (found == by_fingerprint_.end()) return std::nullopt;
  return Snapshot(entries_[found->second - 1]);
}

bool NamespaceRegistry::IsRegisteredBy(uint32_t id, uint64_t session_id) const {
  MutexLock lock(&mu_);
  return id != 0 && id <= entries_.size() && entries_[id - 1].sessions.contains(session_id);
}

size_t NamespaceRegistry::CountRegisteredBy(uint64_t session_id) const {
  MutexLock lock(&mu_);
  size_t count = 0;
  for (const Entry& entry : entries_) count += entry.sessions.contains(session_id) ? 1 : 0;
  return count;
}

std::vector<NamespaceInfo> NamespaceRegistry::List() const {
  MutexLock lock(&mu_);
  std::vector<NamespaceInfo> out;
  out.reserve(entries_.size());
  for (const Entry& entry : entries_) out.push_back(Snapshot(entry));
  return out;
}

size_t NamespaceRegistry::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

void NamespaceRegistry::ReleaseSession(uint64_t session_id) {
  MutexLock lock(&mu_);
  for (Entry& entry : entries_) entry.sessions.erase(session_id);
}

}  // namespace kvstrata
