// `kvstrata top`: a live view of hit rates, throughput and tier usage. Each frame shows
// the rates over the last interval, from two samples of GetStatus (tiers: capacity,
// usage, hits, misses, evictions) and of GetStats' running totals (lookups, blocks asked
// and hit, dropped stores, bytes moved per direction; a caller GetStats refuses gets the
// GetStatus rates alone). --iterations=N prints N frames and exits (0 = until
// interrupted); --json prints one JSON object per frame and line.
#include <unistd.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/cli/table.h"

namespace kvstrata {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

struct Sample {
  absl::Time at;
  v1::GetStatusResponse status;
  std::optional<std::map<std::string, double>> totals;  // GetStats' counters, by name
};

absl::StatusOr<Sample> TakeSample(CommandContext& c) {
  auto status =
      c.client->Call(&v1::Admin::Stub::GetStatus, c.client->admin(), v1::GetStatusRequest());
  if (!status.ok()) return status.status();
  Sample sample{absl::Now(), std::move(*status), std::nullopt};
  auto stats = c.client->Call(&v1::Admin::Stub::GetStats, c.client->admin(), v1::GetStatsRequest());
  if (stats.ok()) {
    sample.totals.emplace();
    for (const v1::Counter& counter : stats->counters()) {
      (*sample.totals)[counter.name()] = static_cast<double>(counter.value());
    }
  }
  return sample;
}

Value Number(double v) {
  Value out;
  out.set_number_value(v);
  return out;
}
Value Null() {
  Value out;
  out.set_null_value(google::protobuf::NULL_VALUE);
  return out;
}
Value Text(const std::string& s) {
  Value out;
  out.set_string_value(s);
  return out;
}
std::optional<double> Ratio(double part, double whole) {
  if (whole <= 0) return std::nullopt;
  return part / whole;
}
std::string Percent(std::optional<double> r) {
  return r.has_value() ? absl::StrFormat("%.1f%%", *r * 100) : "-";
}
std::string Rate(double v) { return absl::StrFormat("%.1f", v); }
Value Optional(std::optional<double> v) { return v.has_value() ? Number(*v) : Null(); }

// One frame: rates between `prev` and `cur`, as a Struct (printed as JSON or tables).
Struct Frame(const Sample& prev, const Sample& cur) {
  const double dt = std::max(1e-3, absl::ToDoubleSeconds(cur.at - prev.at));
  Struct f;
  auto& fields = *f.mutable_fields();
  fields["interval_s"] = Number(dt);
  fields["uptime_ms"] = Number(static_cast<double>(cur.status.uptime_ms()));
  fields["sessions"] = Number(cur.status.sessions());
  fields["namespaces"] = Number(cur.status.namespaces());
  fields["source"] = Text(cur.totals && prev.totals ? "status+stats" : "status");
  Value tiers;
  double hits = 0, misses = 0;
  for (const v1::TierInfo& t : cur.status.tiers()) {
    const v1::TierInfo* before = nullptr;
    for (const v1::TierInfo& p : prev.status.tiers()) {
      if (p.name() == t.name()) before = &p;
    }
    double dh = before ? double(t.hits()) - double(before->hits()) : 0;
    double dm = before ? double(t.misses()) - double(before->misses()) : 0;
    double de = before ? double(t.evictions()) - double(before->evictions()) : 0;
    if (t.tier() == v1::TIER_L1_DRAM) hits += dh, misses += dm;
    Struct row;
    auto& r = *row.mutable_fields();
    r["tier"] = Text(t.name());
    r["state"] = Text(t.state());
    r["capacity_bytes"] = Number(double(t.capacity_bytes()));
    r["used_bytes"] = Number(double(t.used_bytes()));
    r["usage"] = Optional(Ratio(double(t.used_bytes()), double(t.capacity_bytes())));
    r["blocks"] = Number(double(t.blocks()));
    r["hit_blocks_per_s"] = Number(dh / dt);
    r["hit_rate"] = Optional(Ratio(dh, dh + dm));
    r["evictions_per_s"] = Number(de / dt);
    r["queue_depth"] = Number(double(t.queue_depth()));
    *tiers.mutable_list_value()->add_values()->mutable_struct_value() = row;
  }
  fields["tiers"] = tiers;
  fields["hit_rate"] = Optional(Ratio(hits, hits + misses));
  if (cur.totals && prev.totals) {
    auto delta = [&](const std::string& name) {
      auto at = [&](const std::map<std::string, double>& totals) {
        auto it = totals.find(name);
        return it == totals.end() ? 0.0 : it->second;
      };
      return (at(*cur.totals) - at(*prev.totals)) / dt;
    };
    double asked = delta("lookup_blocks");
    fields["lookups_per_s"] = Number(delta("lookups"));
    fields["blocks_asked_per_s"] = Number(asked);
    fields["hit_rate"] = Optional(Ratio(delta("hit_blocks"), asked));
    fields["dropped_stores_per_s"] = Number(delta("dropped_stores"));
    // One route per counter "transfer_bytes_<route>" the daemon reports (its tier table's:
    // gpu_to_l1, l1_to_gpu, l1_to_<tier>, <tier>_to_l1).
    Struct throughput;
    for (const auto& [name, total] : *cur.totals) {
      if (!absl::StartsWith(name, "transfer_bytes_")) continue;
      (*throughput.mutable_fields())[name.substr(std::string("transfer_bytes_").size())] =
          Number(delta(name));
    }
    *fields["throughput_bytes_per_s"].mutable_struct_value() = throughput;
  } else {
    fields["lookups_per_s"] = Null();
    fields["throughput_bytes_per_s"] = Null();
  }
  return f;
}

void PrintHuman(const v1::GetStatusResponse& status, const Struct& frame) {
  const auto& f = frame.fields();
  std::cout << "kvstratad " << status.version() << "  uptime " << HumanDuration(status.uptime_ms())
            << "  sessions " << status.sessions() << "  namespaces " << status.namespaces()
            << "  (rates over " << absl::StrFormat("%.1f", f.at("interval_s").number_value())
            << "s)\n\n";
  auto opt = [&](const Value& v) -> std::optional<double> {
    if (v.kind_case() == Value::kNumberValue) return v.number_value();
    return std::nullopt;
  };
  std::cout << "hit rate " << Percent(opt(f.at("hit_rate")));
  if (f.at("lookups_per_s").kind_case() == Value::kNumberValue) {
    std::cout << "   lookups/s " << Rate(f.at("lookups_per_s").number_value())
              << "   blocks asked/s " << Rate(f.at("blocks_asked_per_s").number_value())
              << "   dropped stores/s " << Rate(f.at("dropped_stores_per_s").number_value());
  } else {
    std::cout << "   (Admin.GetStats refused: no lookup or throughput rates)";
  }
  std::cout << "\n\n";
  Table tiers({"TIER", "STATE", "CAPACITY", "USED", "USE%", "BLOCKS", "HITS/S", "HIT%", "EVICT/S",
               "QUEUE"});
  for (const Value& v : f.at("tiers").list_value().values()) {
    const auto& t = v.struct_value().fields();
    tiers.AddRow({t.at("tier").string_value(), t.at("state").string_value(),
                  HumanBytes(uint64_t(t.at("capacity_bytes").number_value())),
                  HumanBytes(uint64_t(t.at("used_bytes").number_value())),
                  Percent(opt(t.at("usage"))),
                  absl::StrCat(uint64_t(t.at("blocks").number_value())),
                  Rate(t.at("hit_blocks_per_s").number_value()), Percent(opt(t.at("hit_rate"))),
                  Rate(t.at("evictions_per_s").number_value()),
                  absl::StrCat(uint64_t(t.at("queue_depth").number_value()))});
  }
  tiers.Print(std::cout);
  if (f.at("throughput_bytes_per_s").kind_case() == Value::kStructValue) {
    std::cout << "\n";
    Table throughput({"DIRECTION", "BYTES/S"});
    const auto& routes = f.at("throughput_bytes_per_s").struct_value().fields();
    std::map<std::string, double> sorted;  // by name: gpu_to_l1, l1_to_gpu, l1_to_l2, ...
    for (const auto& [route, v] : routes) sorted[route] = v.number_value();
    for (const auto& [route, v] : sorted) {
      throughput.AddRow({route, absl::StrCat(HumanBytes(uint64_t(v)), "/s")});
    }
    throughput.Print(std::cout);
  }
}

int Top(CommandContext& c) {
  if (c.iterations < 0) {
    std::cerr << "kvstrata: --iterations must be >= 0 (0 = until interrupted)\n";
    return kExitUsage;
  }
  if (c.interval < absl::Milliseconds(100) || c.interval > absl::Hours(1)) {
    std::cerr << "kvstrata: --interval must be between 100ms and 1h\n";
    return kExitUsage;
  }
  if (!c.args.empty()) {
    std::cerr << "kvstrata: top takes no arguments\n";
    return kExitUsage;
  }
  const bool refresh = !c.json && isatty(STDOUT_FILENO) && c.iterations != 1;
  absl::StatusOr<Sample> prev = TakeSample(c);
  if (!prev.ok()) return PrintError(prev.status());
  for (int64_t i = 0; c.iterations == 0 || i < c.iterations; ++i) {
    absl::SleepFor(c.interval);
    absl::StatusOr<Sample> cur = TakeSample(c);
    if (!cur.ok()) return PrintError(cur.status());
    Struct frame = Frame(*prev, *cur);
    if (c.json) {
      std::string line;
      google::protobuf::util::JsonPrintOptions options;
      options.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(frame, &line, options);
      std::cout << line << "\n" << std::flush;
    } else {
      if (refresh) std::cout << "\x1b[H\x1b[2J";
      if (i > 0 && !refresh) std::cout << "\n";
      PrintHuman(cur->status, frame);
      std::cout << std::flush;
    }
    prev = std::move(cur);
  }
  return kExitOk;
}

}  // namespace

void AddTopCommand(std::map<std::string, Command>& commands) {
  commands["top"] = {"live hit rates, throughput and tier usage (--interval, --iterations)", Top};
}

}  // namespace kvstrata
