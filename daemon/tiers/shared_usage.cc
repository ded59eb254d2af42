#include "daemon/tiers/shared_usage.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

bool ValidHolderId(absl::string_view id) {
  return !id.empty() && id.size() <= 100 && std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

// A decimal number of at most 19 digits without leading zeros, nothing else (SimpleAtoi
// takes spaces and '+'): the one way FormatUsageLedger writes it.
template <typename Int>
bool Number(absl::string_view s, Int* out) {
  return !s.empty() && s.size() <= 19 && (s.size() == 1 || s[0] != '0') &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         absl::SimpleAtoi(s, out);
}

// A holder line renewed within kHolderExpiry of `now_unix_ms` (older: a daemon that died).
bool Live(const UsageHolder& h, int64_t now_unix_ms) {
  return h.unix_ms >= now_unix_ms - absl::ToInt64Milliseconds(SharedUsage::kHolderExpiry);
}

}  // namespace

uint64_t UsageLedger::held() const {
  uint64_t sum = 0;
  for (const UsageHolder& h : holders) sum += h.bytes;
  return sum;
}

std::string FormatUsageLedger(const UsageLedger& ledger) {
  std::string text = absl::StrCat("kvstrata-usage 1\nbytes ", ledger.bytes, "\nscanned ",
                                  ledger.scanned_unix_ms, "\n");
  for (const UsageHolder& h : ledger.holders) {
    absl::StrAppend(&text, "holder ", h.id, " ", h.bytes, " ", h.unix_ms, "\n");
  }
  return text;
}

std::optional<UsageLedger> ParseUsageLedger(absl::string_view text) {
  if (!absl::ConsumeSuffix(&text, "\n")) return std::nullopt;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 3 || lines.size() > 3 + SharedUsage::kMaxHolders ||
      lines[0] != "kvstrata-usage 1") {
    return std::nullopt;
  }
  UsageLedger ledger;
  absl::string_view bytes = lines[1];
  absl::string_view scanned = lines[2];
  if (!absl::ConsumePrefix(&bytes, "bytes ") || !Number(bytes, &ledger.bytes) ||
      !absl::ConsumePrefix(&scanned, "scanned ") || !Number(scanned, &ledger.scanned_unix_ms)) {
    return std::nullopt;
  }
  for (size_t i = 3; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    UsageHolder h;
    if (f.size() != 4 || f[0] != "holder" || !ValidHolderId(f[1]) || !Number(f[2], &h.bytes) ||
        !Number(f[3], &h.unix_ms)) {
      return std::nullopt;
    }
    h.id = std::string(f[1]);
    for (const UsageHolder& other : ledger.holders) {
      if (other.id == h.id) return std::nullopt;
    }
    ledger.holders.push_back(std::move(h));
  }
  return ledger;
}

SharedUsage::SharedUsage(BlockFileSystem* fs, const std::string& root, std::string holder)
    : fs_(fs), path_(absl::StrCat(root, "/", kFileName)), holder_(std::move(holder)) {}

std::string SharedUsage::MakeHolderId() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string id;
  for (char c : absl::string_view(host)) {
    if (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-') id.push_back(c);
  }
  id = id.substr(0, 64);
  std::random_device random;
  absl::StrAppend(&id, id.empty() ? "" : ".", ::getpid(), ".",
                  absl::StrFormat("%08x", static_cast<uint32_t>(random())));
  return id;
}

void SharedUsage::SetHolder(UsageLedger& ledger, uint64_t held, int64_t now_unix_ms) const {
  if (holder_.empty()) return;
  auto& holders = ledger.holders;
  holders.erase(std::remove_if(holders.begin(), holders.end(),
                               [&](const UsageHolder& h) { return h.id == holder_; }),
                holders.end());
  if (held == 0) return;
  if (holders.size() >= kMaxHolders) {  // Make room: the line updated longest ago goes.
    holders.erase(std::min_element(
        holders.begin(), holders.end(),
        [](const UsageHolder& a, const UsageHolder& b) { return a.unix_ms < b.unix_ms; }));
  }
  holders.push_back(UsageHolder{holder_, held, now_unix_ms});
}

absl::StatusOr<UsageLedger> SharedUsage::Update(
    const std::function<UsageLedger(const UsageLedger&)>& change) {
  UsageLedger result;
  absl::Status s =
      fs_->UpdateLockedFile(path_, [&](absl::string_view current) -> std::optional<std::string> {
        std::optional<UsageLedger> parsed = ParseUsageLedger(current);
        const UsageLedger before = parsed.value_or(UsageLedger{});
        result = change(before);
        if (parsed.has_value() && result == before) return std::nullopt;
        return FormatUsageLedger(result);
      });
  if (!s.ok()) return s;
  return result;
}

absl::StatusOr<SharedUsage::Grant> SharedUsage::Reserve(uint64_t want, uint64_t limit,
                                                        uint64_t held, int64_t now_unix_ms) {
  bool granted = false;
  absl::StatusOr<UsageLedger> after = Update([&](const UsageLedger& before) {
    UsageLedger next = before;
    granted = before.bytes <= limit && want <= limit - before.bytes;
    if (granted) next.bytes += want;
    SetHolder(next, granted ? held + want : held, now_unix_ms);
    return next;
  });
  if (!after.ok()) return after.status();
  return Grant{granted, *after};
}

absl::StatusOr<UsageLedger> SharedUsage::Release(uint64_t bytes, uint64_t held,
                                                 int64_t now_unix_ms) {
  return Update([&](const UsageLedger& before) {
    UsageLedger next = before;
    next.bytes -= std::min(bytes, before.bytes);
    SetHolder(next, held, now_unix_ms);
    return next;
  });
}

absl::StatusOr<UsageLedger> SharedUsage::Hold(uint64_t held, int64_t now_unix_ms) {
  return Update([&](const UsageLedger& before) {
    UsageLedger next = before;
    SetHolder(next, held, now_unix_ms);
    return next;
  });
}

absl::StatusOr<UsageLedger> SharedUsage::Read() {
  return Update([](const UsageLedger& before) { return before; });
}

absl::StatusOr<UsageLedger> SharedUsage::Reconcile(const UsageLedger& at_start, uint64_t scanned,
                                                   int64_t now_unix_ms) {
  return Update([&](const UsageLedger& before) {
    UsageLedger next;
    for (const UsageHolder& h : before.holders) {
      if (Live(h, now_unix_ms)) next.holders.push_back(h);
    }
    next.bytes = scanned + Unseen(at_start, before, now_unix_ms);
    next.scanned_unix_ms = now_unix_ms;
    return next;
  });
}

uint64_t SharedUsage::Unseen(const UsageLedger& at_start, const UsageLedger& now,
                             int64_t now_unix_ms) {
  uint64_t held = 0;
  for (const UsageHolder& h : at_start.holders) {
    if (Live(h, now_unix_ms)) held += h.bytes;
  }
  return held + (now.bytes > at_start.bytes ? now.bytes - at_start.bytes : 0);
}

}  // namespace kvstrata
