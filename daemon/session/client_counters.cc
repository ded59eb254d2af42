#include "daemon/session/client_counters.h"

#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

bool NameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

absl::Status ValidateClientCounters(const ClientCounterValues& report) {
  if (report.size() > kMaxClientCountersPerReport) {
    return absl::InvalidArgumentError(absl::StrCat("counters has ", report.size(),
                                                   " entries; a heartbeat carries at most ",
                                                   kMaxClientCountersPerReport));
  }
  for (const auto& [name, value] : report) {
    if (name.empty() || name.size() > kMaxClientCounterNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("counters name '", absl::CEscape(name.substr(0, kMaxClientCounterNameBytes)),
                       name.size() > kMaxClientCounterNameBytes ? "...'" : "'", " is ", name.size(),
                       " bytes; a counter name is 1..", kMaxClientCounterNameBytes, " bytes"));
    }
    for (char c : name) {
      if (!NameChar(c)) {
        return absl::InvalidArgumentError(absl::StrCat("counters name '", absl::CEscape(name),
                                                       "' has a character outside [a-z0-9_]"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ClientCounters::Report(uint64_t session_id, const ClientCounterValues& report) {
  MutexLock lock(&mu_);
  size_t new_names = 0;
  for (const auto& [name, value] : report) new_names += totals_.contains(name) ? 0 : 1;
  if (totals_.size() + new_names > kMaxClientCounterNames) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "counters: the daemon keeps at most ", kMaxClientCounterNames,
        " distinct counter names and has ", totals_.size(), "; this report adds ", new_names));
  }
  ClientCounterValues& last = last_[session_id];
  for (const auto& [name, value] : report) {
    uint64_t& total = totals_[name];  // a counter reported at 0 is listed at 0
    uint64_t& before = last[name];
    if (value <= before) continue;  // unchanged, or lower: ignored (cumulative counters)
    total = SaturatingAdd(total, value - before);
    before = value;
  }
  return absl::OkStatus();
}

void ClientCounters::OnSessionEnded(uint64_t session_id) {
  MutexLock lock(&mu_);
  last_.erase(session_id);
}

ClientCounterValues ClientCounters::Totals() const {
  MutexLock lock(&mu_);
  return totals_;
}

}  // namespace kvstrata
