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
    entry.info.id = static_cast<uint32_t>(entries_.size() + 1);
    entry.info.fingerprint = fingerprint;
    entries_.push_back(std::move(entry));
    found = by_fingerprint_.emplace(fingerprint, entries_.size()).first;
  }
  Entry& entry = entries_[found->second - 1];
  if (!entry.registered) {  // new, or an id a tier was given first: the spec arrives now
    entry.info.spec = spec;
    entry.info.bytes_per_block = BytesPerBlock(spec);
    entry.registered = true;
    ++registered_;
  }
  entry.sessions.insert(session_id);
  return Snapshot(entry);
}

NamespaceId NamespaceRegistry::IdOf(absl::string_view fingerprint) {
  MutexLock lock(&mu_);
  auto found = by_fingerprint_.find(fingerprint);
  if (found != by_fingerprint_.end()) return found->second;
  if (entries_.size() >= max_) return 0;
  Entry entry;
  entry.info.id = static_cast<uint32_t>(entries_.size() + 1);
  entry.info.fingerprint = std::string(fingerprint);
  entries_.push_back(std::move(entry));
  by_fingerprint_.emplace(std::string(fingerprint), entries_.back().info.id);
  return entries_.back().info.id;
}

NamespaceInfo NamespaceRegistry::Snapshot(const Entry& entry) const {
  NamespaceInfo info = entry.info;
  info.sessions = static_cast<uint32_t>(entry.sessions.size());
  return info;
}

const NamespaceRegistry::Entry* NamespaceRegistry::RegisteredLocked(uint32_t id) const {
  if (id == 0 || id > entries_.size() || !entries_[id - 1].registered) return nullptr;
  return &entries_[id - 1];
}

std::optional<NamespaceInfo> NamespaceRegistry::Find(uint32_t id) const {
  MutexLock lock(&mu_);
  const Entry* entry = RegisteredLocked(id);
  if (entry == nullptr) return std::nullopt;
  return Snapshot(*entry);
}

std::optional<NamespaceInfo> NamespaceRegistry::FindByFingerprint(
    const std::string& fingerprint) const {
  MutexLock lock(&mu_);
  auto found = by_fingerprint_.find(fingerprint);
  if (found == by_fingerprint_.end()) return std::nullopt;
  const Entry* entry = RegisteredLocked(found->second);
  if (entry == nullptr) return std::nullopt;
  return Snapshot(*entry);
}

bool NamespaceRegistry::IsRegisteredBy(uint32_t id, uint64_t session_id) const {
  MutexLock lock(&mu_);
  const Entry* entry = RegisteredLocked(id);
  return entry != nullptr && entry->sessions.contains(session_id);
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
  out.reserve(registered_);
  for (const Entry& entry : entries_) {
    if (entry.registered) out.push_back(Snapshot(entry));
  }
  return out;
}

size_t NamespaceRegistry::size() const {
  MutexLock lock(&mu_);
  return registered_;
}

void NamespaceRegistry::ReleaseSession(uint64_t session_id) {
  MutexLock lock(&mu_);
  for (Entry& entry : entries_) entry.sessions.erase(session_id);
}

}  // namespace kvstrata
