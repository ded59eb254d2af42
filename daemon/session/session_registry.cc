#include "daemon/session/session_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

absl::Status UnknownSession(uint64_t id) {
  return absl::NotFoundError(absl::StrCat("session ", id, " is unknown or has ended"));
}

// The session when it exists and is `tenant`'s (any other is unknown); else nullptr.
template <typename Sessions>
auto Owned(Sessions& sessions, uint64_t id, TenantId tenant)
    -> decltype(&sessions.begin()->second) {
  auto it = sessions.find(id);
  return it == sessions.end() || it->second.tenant != tenant ? nullptr : &it->second;
}

}  // namespace

SessionRegistry::SessionRegistry(SessionLimits limits, Clock clock)
    : limits_(limits), clock_(std::move(clock)) {}

void SessionRegistry::AddListener(SessionEndListener* listener) { listeners_.push_back(listener); }

absl::StatusOr<SessionInfo> SessionRegistry::Open(TenantId tenant, std::string client_name,
                                                  uint32_t pid, std::string hostname,
                                                  absl::Duration requested_heartbeat_timeout) {
  if (client_name.empty() || client_name.size() > 128) {
    return absl::InvalidArgumentError("client_name must be 1..128 bytes");
  }
  if (hostname.size() > 255)
    return absl::InvalidArgumentError("hostname must be at most 255 bytes");
  absl::Duration timeout = requested_heartbeat_timeout == absl::ZeroDuration()
                               ? limits_.default_heartbeat_timeout
                               : std::clamp(requested_heartbeat_timeout, absl::Milliseconds(100),
                                            limits_.max_heartbeat_timeout);
  MutexLock lock(&mu_);
  if (sessions_.size() >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session limit reached (", limits_.max_sessions, " sessions)"));
  }
  uint64_t id = 0;
  while (id == 0 || sessions_.contains(id)) id = absl::Uniform<uint64_t>(random_);
  absl::Time now = clock_();
  SessionInfo info{id, tenant, std::move(client_name), pid, std::move(hostname), timeout, now, now};
  sessions_.emplace(id, info);
  return info;
}

absl::Status SessionRegistry::Heartbeat(uint64_t session_id, TenantId tenant) {
  return Heartbeat(session_id, tenant, [] { return absl::OkStatus(); });
}

absl::Status SessionRegistry::Heartbeat(uint64_t session_id, TenantId tenant,
                                        absl::FunctionRef<absl::Status()> while_live) {
  MutexLock lock(&mu_);
  SessionInfo* session = Owned(sessions_, session_id, tenant);
  if (session == nullptr) return UnknownSession(session_id);
  if (absl::Status s = while_live(); !s.ok()) return s;
  session->last_heartbeat = clock_();
  return absl::OkStatus();
}

absl::Status SessionRegistry::Check(uint64_t session_id, TenantId tenant) const {
  MutexLock lock(&mu_);
  return Owned(sessions_, session_id, tenant) != nullptr ? absl::OkStatus()
                                                         : UnknownSession(session_id);
}

absl::Status SessionRegistry::Close(uint64_t session_id, TenantId tenant) {
  {
    MutexLock lock(&mu_);
    if (Owned(sessions_, session_id, tenant) == nullptr) return UnknownSession(session_id);
    sessions_.erase(session_id);
  }
  NotifyEnded({session_id});
  return absl::OkStatus();
}

std::vector<uint64_t> SessionRegistry::ExpireStale() {
  std::vector<uint64_t> expired;
  {
    MutexLock lock(&mu_);
    absl::Time now = clock_();
    for (const auto& [id, info] : sessions_) {
      if (now - info.last_heartbeat > info.heartbeat_timeout) expired.push_back(id);
    }
    for (uint64_t id : expired) sessions_.erase(id);
  }
  NotifyEnded(expired);
  return expired;
}

void SessionRegistry::CloseAll() {
  std::vector<uint64_t> all;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, info] : sessions_) all.push_back(id);
    sessions_.clear();
  }
  NotifyEnded(all);
}

std::vector<SessionInfo> SessionRegistry::List(std::optional<TenantId> tenant) const {
  MutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  for (const auto& [id, info] : sessions_) {
    if (!tenant.has_value() || info.tenant == *tenant) out.push_back(info);
  }
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.opened < b.opened; });
  return out;
}

size_t SessionRegistry::size() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

void SessionRegistry::NotifyEnded(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    for (SessionEndListener* listener : listeners_) listener->OnSessionEnded(id);
  }
}

}  // namespace kvstrata
