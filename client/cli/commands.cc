#include "client/cli/commands.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/cli/output.h"
#include "client/cli/table.h"

namespace kvstrata {
namespace {

void PrintTiers(const google::protobuf::RepeatedPtrField<v1::TierInfo>& tiers) {
  Table table({"TIER", "KIND", "STATE", "CAPACITY", "USED", "BLOCKS", "HITS", "MISSES", "EVICTED",
               "QUEUE", "DROPPED", "ERRORS", "POLICY", "PATH"});
  for (const v1::TierInfo& t : tiers) {
    const bool lower = t.tier() != v1::TIER_L1_DRAM;
    std::string state = t.state();
    if (lower && t.enabled() && !t.index_warm() && t.state() != "unavailable")
      state += " (warming)";
    table.AddRow({t.name(), t.kind().empty() ? "-" : t.kind(), state,
                  HumanBytes(t.capacity_bytes()), HumanBytes(t.used_bytes()),
                  absl::StrCat(t.blocks()), absl::StrCat(t.hits()), absl::StrCat(t.misses()),
                  absl::StrCat(t.evictions()), lower ? absl::StrCat(t.queue_depth()) : "-",
                  lower ? absl::StrCat(t.dropped_writes()) : "-",
                  lower ? absl::StrCat(t.write_errors() + t.read_errors()) : "-",
                  t.eviction_policy(), t.path().empty() ? "-" : t.path()});
  }
  table.Print(std::cout);
}

int Status(CommandContext& c) {
  auto r = c.client->Call(&v1::Admin::Stub::GetStatus, c.client->admin(), v1::GetStatusRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  std::cout << "kvstratad " << r->version() << "  instance " << r->instance_id() << "  pid "
            << r->pid() << "\n";
  Table facts({"uptime", HumanDuration(r->uptime_ms())});
  facts.AddRow({"cuda", r->cuda_enabled() ? "on" : "off (no GPU or built without CUDA)"});
  facts.AddRow({"metrics", r->metrics_address().empty()
                               ? "off"
                               : absl::StrCat("http://", r->metrics_address(), "/metrics")});
  facts.AddRow({"sessions", absl::StrCat(r->sessions())});
  facts.AddRow({"namespaces", absl::StrCat(r->namespaces())});
  facts.AddRow({"config", r->config_path().empty() ? "(embedded default)" : r->config_path()});
  facts.Print(std::cout);
  std::cout << "\n";
  Table listeners({"LISTENER", "ADDRESS", "TLS", "TOKEN"});
  for (const v1::Listener& l : r->listeners()) {
    listeners.AddRow(
        {l.kind(), l.address(), l.tls() ? "yes" : "no", l.token_auth() ? "yes" : "no"});
  }
  listeners.Print(std::cout);
  std::cout << "\n";
  PrintTiers(r->tiers());
  return kExitOk;
}

int Tiers(CommandContext& c) {
  auto r = c.client->Call(&v1::Admin::Stub::ListTiers, c.client->admin(), v1::ListTiersRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  PrintTiers(r->tiers());
  return kExitOk;
}

int Config(CommandContext& c) {
  auto r = c.client->Call(&v1::Admin::Stub::GetConfig, c.client->admin(), v1::GetConfigRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  if (c.toml) {
    std::cout << r->toml() << "\n";
    return kExitOk;
  }
  Table table({"KEY", "VALUE", "SOURCE"});
  for (const v1::ConfigEntry& e : r->entries()) table.AddRow({e.key(), e.value(), e.source()});
  table.Print(std::cout);
  return kExitOk;
}

int Namespaces(CommandContext& c) {
  auto r = c.client->Call(&v1::Admin::Stub::ListNamespaces, c.client->admin(),
                          v1::ListNamespacesRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  Table table({"ID", "FINGERPRINT", "ENGINE", "MODEL", "DTYPE", "LAYOUT", "TP", "PP", "BLOCK",
               "BLOCKS", "SESSIONS"});
  for (const v1::NamespaceInfo& n : r->namespaces()) {
    const v1::NamespaceSpec& s = n.spec();
    table.AddRow({absl::StrCat(n.namespace_id()), n.fingerprint(), EnumName(s, "engine_kind"),
                  s.model(), EnumName(s, "dtype"), EnumName(s, "kv_layout"),
                  absl::StrCat(s.tp_rank(), "/", s.tp_size()),
                  absl::StrCat(s.pp_rank(), "/", s.pp_size()), HumanBytes(n.bytes_per_block()),
                  absl::StrCat(n.blocks()), absl::StrCat(n.sessions())});
  }
  table.Print(std::cout);
  return kExitOk;
}

int Sessions(CommandContext& c) {
  auto r =
      c.client->Call(&v1::Admin::Stub::ListSessions, c.client->admin(), v1::ListSessionsRequest());
  if (!r.ok()) return PrintError(r.status());
  if (c.json) return PrintJson(*r);
  Table table({"SESSION", "CLIENT", "PID", "HOST", "LEASES", "JOBS"});
  for (const v1::SessionInfo& s : r->sessions()) {
    table.AddRow({absl::StrCat(s.session_id()), s.client_name(), absl::StrCat(s.pid()),
                  s.hostname(), absl::StrCat(s.leases()), absl::StrCat(s.jobs())});
  }
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

const std::map<std::string, Command>& Commands() {
  static const auto* commands = [] {
    auto* all = new std::map<std::string, Command>{
        {"status", {"version, uptime, listeners and tiers", Status}},
        {"config", {"effective configuration and where each value came from (--toml)", Config}},
        {"namespaces", {"registered namespaces", Namespaces}},
        {"sessions", {"connected client sessions", Sessions}},
        {"tiers", {"capacity and usage per tier", Tiers}},
    };
    AddCacheCommands(*all);
    AddTopCommand(*all);
    return all;
  }();
  return *commands;
}

}  // namespace kvstrata
