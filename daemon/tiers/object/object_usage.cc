#include "daemon/tiers/object/object_usage.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

// A decimal of at most 19 digits without leading zeros (the one way Format writes it).
template <typename Int>
bool Number(absl::string_view s, Int* out) {
  return !s.empty() && s.size() <= 19 && (s.size() == 1 || s[0] != '0') &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         absl::SimpleAtoi(s, out);
}

// "<name> <number>" into `out`.
template <typename Int>
bool Field(absl::string_view line, absl::string_view name, Int* out) {
  return absl::ConsumePrefix(&line, name) && absl::ConsumePrefix(&line, " ") && Number(line, out);
}

std::optional<std::vector<absl::string_view>> Lines(absl::string_view text,
                                                    absl::string_view magic) {
  if (!absl::ConsumeSuffix(&text, "\n")) return std::nullopt;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0] != magic) return std::nullopt;
  return lines;
}

}  // namespace

std::string FormatUsageRecord(const UsageRecord& r) {
  return absl::StrCat("kvstrata-object-usage 1\nwritten ", r.written, "\ndeleted ", r.deleted,
                      "\nheld ", r.held, "\nunix_ms ", r.unix_ms, "\n");
}

std::optional<UsageRecord> ParseUsageRecord(absl::string_view text) {
  auto lines = Lines(text, "kvstrata-object-usage 1");
  UsageRecord r;
  if (!lines || lines->size() != 5 || !Field((*lines)[1], "written", &r.written) ||
      !Field((*lines)[2], "deleted", &r.deleted) || !Field((*lines)[3], "held", &r.held) ||
      !Field((*lines)[4], "unix_ms", &r.unix_ms)) {
    return std::nullopt;
  }
  return r;
}

std::string FormatUsageAudit(const UsageAudit& a) {
  std::string text =
      absl::StrCat("kvstrata-object-audit 1\nlisted ", a.listed, "\nunix_ms ", a.unix_ms, "\n");
  for (const auto& [holder, wd] : a.base) {
    absl::StrAppend(&text, "base ", holder, " ", wd.first, " ", wd.second, "\n");
  }
  return text;
}

std::optional<UsageAudit> ParseUsageAudit(absl::string_view text) {
  auto lines = Lines(text, "kvstrata-object-audit 1");
  UsageAudit a;
  if (!lines || lines->size() < 3 || !Field((*lines)[1], "listed", &a.listed) ||
      !Field((*lines)[2], "unix_ms", &a.unix_ms)) {
    return std::nullopt;
  }
  for (size_t i = 3; i < lines->size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit((*lines)[i], ' ');
    std::pair<uint64_t, uint64_t> wd;
    // Holders in increasing order, each once (as Format writes them).
    if (f.size() != 4 || f[0] != "base" || f[1].empty() || !Number(f[2], &wd.first) ||
        !Number(f[3], &wd.second) || (!a.base.empty() && f[1] <= a.base.rbegin()->first)) {
      return std::nullopt;
    }
    a.base.emplace(std::string(f[1]), wd);
  }
  return a;
}

bool ObjectUsage::View::Live(const UsageRecord& r, int64_t now_ms) const {
  return r.unix_ms >= now_ms - absl::ToInt64Milliseconds(expiry);
}

uint64_t ObjectUsage::View::Used(const std::string& holder, const UsageRecord& own,
                                 int64_t now_ms) const {
  // Signed: a holder's deletions of blocks another wrote make its own share negative.
  int64_t used = static_cast<int64_t>(audit.listed);
  auto add = [&](const std::string& id, const UsageRecord& r) {
    auto base = audit.base.find(id);
    const uint64_t w0 = base == audit.base.end() ? 0 : base->second.first;
    const uint64_t d0 = base == audit.base.end() ? 0 : base->second.second;
    used += static_cast<int64_t>(r.written - w0) - static_cast<int64_t>(r.deleted - d0);
    if (Live(r, now_ms)) used += static_cast<int64_t>(r.held);
  };
  for (const auto& [id, r] : records) {
    if (id != holder) add(id, r);
  }
  add(holder, own);
  return used > 0 ? static_cast<uint64_t>(used) : 0;
}

std::string ObjectUsage::View::Trimmer(const std::string& holder, int64_t now_ms) const {
  std::string first = holder;
  for (const auto& [id, r] : records) {
    if (id < first && Live(r, now_ms)) first = id;
  }
  return first;
}

ObjectUsage::ObjectUsage(S3Client* s3, std::string control, std::string holder,
                         absl::Duration expiry)
    : s3_(s3), control_(std::move(control)), holder_(std::move(holder)), expiry_(expiry) {}

std::string ObjectUsage::RecordKey(absl::string_view holder) const {
  return absl::StrCat(control_, "/usage/", holder);
}
std::string ObjectUsage::AuditKey() const { return absl::StrCat(control_, "/audit"); }

absl::StatusOr<ObjectUsage::View> ObjectUsage::Read() {
  const std::string prefix = absl::StrCat(control_, "/usage/");
  absl::StatusOr<std::vector<S3Object>> listed = s3_->List(prefix);
  if (!listed.ok()) return listed.status();
  std::vector<S3Request> gets(listed->size() + 1);
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < listed->size(); ++i) gets[i].key = (*listed)[i].key;
  gets.back().key = AuditKey();
  for (S3Request& g : gets) {
    g.keep_body = true;
    batch.push_back(&g);
  }
  s3_->Run(batch);
  View view;
  view.expiry = expiry_;
  for (size_t i = 0; i < listed->size(); ++i) {
    if (gets[i].status == 0) return s3_->Failure(gets[i]);
    std::optional<UsageRecord> r = gets[i].ok() ? ParseUsageRecord(gets[i].text) : std::nullopt;
    if (r.has_value()) view.records[gets[i].key.substr(prefix.size())] = *r;
  }
  const S3Request& audit = gets.back();
  if (audit.ok()) {
    view.audit = ParseUsageAudit(audit.text).value_or(UsageAudit{});
  } else if (!audit.not_found()) {
    return s3_->Failure(audit);
  }
  return view;
}

absl::Status ObjectUsage::Publish(const UsageRecord& own) {
  const std::string text = FormatUsageRecord(own);
  S3Request put;
  put.method = S3Request::Method::kPut;
  put.key = RecordKey(holder_);
  put.body = {text};
  s3_->Run(put);
  return put.ok() ? absl::OkStatus() : s3_->Failure(put);
}

absl::StatusOr<ObjectUsage::Grant> ObjectUsage::Reserve(UsageRecord& own, uint64_t want,
                                                        uint64_t limit, int64_t now_ms) {
  own.unix_ms = now_ms;
  absl::StatusOr<View> before = Read();
  if (!before.ok()) return before.status();
  const uint64_t used = before->Used(holder_, own, now_ms);
  if (used > limit || want > limit - used) return Grant{false, used};
  own.held += want;
  if (absl::Status s = Publish(own); !s.ok()) {
    own.held -= want;
    return s;
  }
  absl::StatusOr<View> after = Read();
  const uint64_t now_used = after.ok() ? after->Used(holder_, own, now_ms) : limit + 1;
  if (now_used <= limit) return Grant{true, now_used};
  own.held -= want;  // Another daemon claimed at once: withdraw.
  (void)Publish(own);
  if (!after.ok()) return after.status();
  return Grant{false, now_used - want};
}

absl::Status ObjectUsage::Audit(const View& before, uint64_t listed, int64_t now_ms) {
  UsageAudit audit;
  audit.listed = listed;
  audit.unix_ms = now_ms;
  std::vector<std::string> folded;
  for (const auto& [id, r] : before.records) {
    auto base = before.audit.base.find(id);
    const bool unchanged =
        base != before.audit.base.end() && base->second == std::make_pair(r.written, r.deleted);
    if (id != holder_ && !before.Live(r, now_ms) && unchanged) {
      folded.push_back(id);  // Dead and idle since the last audit: the listing has it all.
      continue;
    }
    audit.base[id] = {r.written, r.deleted};
  }
  const std::string text = FormatUsageAudit(audit);
  S3Request put;
  put.method = S3Request::Method::kPut;
  put.key = AuditKey();
  put.body = {text};
  s3_->Run(put);
  if (!put.ok()) return s3_->Failure(put);
  std::vector<S3Request> deletes(folded.size());
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < folded.size(); ++i) {
    deletes[i].method = S3Request::Method::kDelete;
    deletes[i].key = RecordKey(folded[i]);
    batch.push_back(&deletes[i]);
  }
  s3_->Run(batch);
  return absl::OkStatus();
}

}  // namespace kvstrata
