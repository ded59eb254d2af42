// `kvstrata` commands on cached blocks: stats, lookup, evict, clear, drain, pin, unpin.
// Keys are given in hex (the engine's block hashes, as `kvstrata lookup` prints them).
#include <unistd.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/cli/table.h"

namespace kvstrata {
namespace {

// args = FINGERPRINT KEYHEX...; fills the request's fingerprint and keys.
template <typename Request>
absl::Status ParseTarget(const std::vector<std::string>& args, Request& request) {
  if (args.size() < 2) {
    return absl::InvalidArgumentError("expected FINGERPRINT KEYHEX... (see `kvstrata namespaces`)");
  }
  request.set_fingerprint(args[0]);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& hex = args[i];
    bool is_hex =
        hex.size() % 2 == 0 && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
    if (!is_hex) return absl::InvalidArgumentError(absl::StrCat("'", hex, "' is not a hex key"));
    request.add_keys(absl::HexStringToBytes(hex));
  }
  return absl::OkStatus();
}

// The daemon's tiers by wire number (Admin.ListTiers: label of each); empty when the
// daemon does not say (then numbers are shown as "tier<N>").
std::map<int, std::string> TierLabels(CommandContext& c) {
  std::map<int, std::string> labels;
  auto r = c.client->Call(&v1::Admin::Stub::ListTiers, c.client->admin(), v1::ListTiersRequest());
  if (!r.ok()) return labels;
  for (const v1::TierInfo& t : r->tiers()) labels[static_cast<int>(t.tier())] = t.name();
  return labels;
}

// --tier as the wire number: "" or "all" = every tier; else the label of one of the
// daemon's tiers (Admin.ListTiers); `allow_l1` false for drain (its targets are lower
// tiers). INVALID_ARGUMENT names the labels the daemon has.
absl::StatusOr<v1::Tier> ParseTier(CommandContext& c, bool allow_l1) {
  const std::string& name = c.tier;
  if (name.empty() || name == "all") return v1::TIER_UNSPECIFIED;
  if (name == "l1" && allow_l1) return v1::TIER_L1_DRAM;
  std::vector<std::string> known = {"all"};
  for (const auto& [wire, label] : TierLabels(c)) {
    if (wire == v1::TIER_L1_DRAM && !allow_l1) continue;
    if (label == name) return static_cast<v1::Tier>(wire);
    known.push_back(label);
  }
  return absl::InvalidArgumentError(absl::StrCat("--tier='", name, "': expected one of ",
                                                 absl::StrJoin(known, ", "),
                                                 " (this daemon's tiers: kvstrata tiers)"));
}

int Usage(const absl::Status& status) {
  std::cerr << "kvstrata: " << status.message() << "\n";
  return kExitUsage;
}

// The load planner's decisions (the connectors' plan_* counters, docs/load-planner.md) and
// the loads that gave up at their deadline (load_gave_up*), then any other counter the
// clients report.
void PrintClientCounters(const v1::GetStatsResponse& r) {
  std::map<std::string, uint64_t> counters;
  for (const v1::Counter& counter : r.client_counters()) counters[counter.name()] = counter.value();
  static constexpr const char* kDecisions[] = {"in_step", "async", "partial", "recompute"};
  uint64_t decisions = 0;
  bool reported = false;
  for (const char* kind : kDecisions) {
    auto it = counters.find(absl::StrCat("plan_", kind));
    reported = reported || it != counters.end();
    decisions += it == counters.end() ? 0 : it->second;
  }
  std::cout << "\nLoad planner (the connectors' decisions, every session since the daemon "
               "started)\n";
  if (!reported) {
    std::cout << "no connector has reported load planner decisions\n";
  } else {
    Table table({"DECISION", "HITS", "SHARE"});
    for (const char* kind : kDecisions) {
      const uint64_t n = counters[absl::StrCat("plan_", kind)];
      table.AddRow({std::string(kind), absl::StrCat(n),
                    decisions == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * n / decisions)});
    }
    table.Print(std::cout);
    std::cout << "tokens left to compute: " << counters["plan_unloaded_tokens"] << "\n";
    std::cout << "loads that gave up at their deadline: " << counters["load_gave_up"] << " ("
              << counters["load_gave_up_tokens"] << " tokens computed instead)\n";
  }
  Table others({"CLIENT COUNTER", "VALUE"});
  bool any = false;
  for (const auto& [name, value] : counters) {
    if (absl::StartsWith(name, "plan_") || absl::StartsWith(name, "load_gave_up")) continue;
    others.AddRow({name, absl::StrCat(value)});
    any = true;
  }
  if (any) {
    std::cout << "\n";
    others.Print(std::cout);
  }
}

int Stats(CommandContext& c) {
  auto r = c.client->Call(&v1::Admin::Stub::GetStats, c.client->admin(), v1::GetStatsRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  Table table({"COUNTER", "VALUE"});
  for (const v1::Counter& counter : r->counters()) {
    table.AddRow({counter.name(), absl::StrCat(counter.value())});
  }
  table.Print(std::cout);
  PrintClientCounters(*r);
  return kExitOk;
}

int Lookup(CommandContext& c) {
  v1::AdminLookupRequest request;
  if (absl::Status s = ParseTarget(c.args, request); !s.ok()) return Usage(s);
  auto r = c.client->Call(&v1::Admin::Stub::AdminLookup, c.client->admin(), request);
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  const std::map<int, std::string> labels = TierLabels(c);
  Table table({"KEY", "TIER"});
  for (int i = 0; i < r->locations_size(); ++i) {
    table.AddRow(
        {absl::BytesToHexString(request.keys(i)), TierName(r->locations(i).tier(), labels)});
  }
  table.Print(std::cout);
  std::cout << r->hit_blocks() << " of " << request.keys_size() << " keys are leading hits\n";
  return kExitOk;
}

int Evict(CommandContext& c) {
  v1::EvictRequest request;
  if (absl::Status s = ParseTarget(c.args, request); !s.ok()) return Usage(s);
  absl::StatusOr<v1::Tier> tier = ParseTier(c, /*allow_l1=*/true);
  if (!tier.ok()) return Usage(tier.status());
  request.set_tier(*tier);
  auto r = c.client->Call(&v1::Admin::Stub::Evict, c.client->admin(), request);
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  // A key counts once however many tiers held it; the copies per tier follow.
  std::cout << "evicted " << r->evicted_blocks() << " blocks";
  std::vector<std::string> parts;
  if (*tier == v1::TIER_UNSPECIFIED || *tier == v1::TIER_L1_DRAM) {
    parts.push_back(absl::StrCat("l1 ", r->l1_blocks()));
  }
  // Each lower tier's files, in the daemon's order: the one asked for, or those that had
  // some.
  for (const auto& [wire, label] : TierLabels(c)) {
    auto files = r->tier_blocks().find(label);
    if (wire == v1::TIER_L1_DRAM || files == r->tier_blocks().end()) continue;
    if (files->second > 0 || *tier == static_cast<v1::Tier>(wire)) {
      parts.push_back(absl::StrCat(label, " ", files->second));
    }
  }
  std::cout << " (" << absl::StrJoin(parts, ", ") << ")";
  if (r->pinned_blocks() > 0) std::cout << "; " << r->pinned_blocks() << " pinned, kept";
  std::cout << "\n";
  return kExitOk;
}

template <bool kPin>
int PinOrUnpin(CommandContext& c) {
  v1::PinRequest request;
  if (absl::Status s = ParseTarget(c.args, request); !s.ok()) return Usage(s);
  auto method = kPin ? &v1::Admin::Stub::Pin : &v1::Admin::Stub::Unpin;
  auto r = c.client->Call(method, c.client->admin(), request);
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  std::cout << (kPin ? "pinned " : "unpinned ") << r->blocks() << " blocks\n";
  return kExitOk;
}

void PrintProgressBar(const v1::Progress& p, bool tty) {
  double fraction = p.total_units() == 0 ? 1.0 : double(p.done_units()) / double(p.total_units());
  int filled = static_cast<int>(fraction * 30);
  std::string bar = absl::StrFormat("[%s%s] %3.0f%%  %d/%d %s", std::string(filled, '#'),
                                    std::string(30 - filled, ' '), fraction * 100, p.done_units(),
                                    p.total_units(), p.unit());
  if (tty) {  // one line redrawn in place
    std::cout << "\r" << bar << (p.done() ? "\n" : "") << std::flush;
  } else if (p.done()) {  // a pipe or a file: the final line only
    std::cout << bar << "\n";
  }
}

// Prints a Progress stream (bar, or one JSON object per message) until it ends.
template <typename Stream>
int FollowProgress(CommandContext& c, Stream& stream) {
  const bool tty = isatty(STDOUT_FILENO);
  v1::Progress progress;
  while (stream->Read(&progress)) {
    if (c.json) {
      PrintJson(progress);
    } else {
      PrintProgressBar(progress, tty);
      if (progress.done()) std::cout << progress.message() << "\n";
    }
  }
  grpc::Status status = stream->Finish();
  return status.ok() ? kExitOk : PrintError(c.client->ToAbsl(status));
}

int Clear(CommandContext& c) {
  v1::ClearRequest request;
  if (c.args.size() == 1 && c.args[0] != "all") request.set_fingerprint(c.args[0]);
  if (c.args.size() != 1) {
    return Usage(absl::InvalidArgumentError("expected FINGERPRINT, or `all` for every namespace"));
  }
  absl::StatusOr<v1::Tier> tier = ParseTier(c, /*allow_l1=*/true);
  if (!tier.ok()) return Usage(tier.status());
  request.set_tier(*tier);
  grpc::ClientContext context;
  c.client->Prepare(context);
  auto stream = c.client->admin().Clear(&context, request);
  return FollowProgress(c, stream);
}

int Drain(CommandContext& c) {
  if (!c.args.empty()) return Usage(absl::InvalidArgumentError("drain takes no arguments"));
  absl::StatusOr<v1::Tier> tier = ParseTier(c, /*allow_l1=*/false);
  if (!tier.ok()) return Usage(tier.status());
  v1::DrainRequest request;
  request.set_target(*tier);
  grpc::ClientContext context;
  c.client->Prepare(context);
  auto stream = c.client->admin().Drain(&context, request);
  return FollowProgress(c, stream);
}

}  // namespace

void AddCacheCommands(std::map<std::string, Command>& commands) {
  commands["stats"] = {
      "cache counters (hits, misses, evictions, drops, leases), the load planner's decisions",
      Stats};
  commands["lookup"] = {"FINGERPRINT KEYHEX...: which tier holds each key", Lookup};
  commands["evict"] = {"FINGERPRINT KEYHEX...: evict blocks (not those in use or pinned)", Evict};
  commands["clear"] = {"FINGERPRINT | all: drop every block not in use, with progress", Clear};
  commands["drain"] = {
      "write every L1 block down to the lower tiers (--tier=LABEL: one), with progress", Drain};
  commands["pin"] = {"FINGERPRINT KEYHEX...: never evict these blocks", PinOrUnpin<true>};
  commands["unpin"] = {"FINGERPRINT KEYHEX...: make pinned blocks evictable again",
                       PinOrUnpin<false>};
}

}  // namespace kvstrata
