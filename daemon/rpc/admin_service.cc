#include "daemon/rpc/admin_service.h"

#include "absl/time/clock.h"
#include "daemon/common/version.h"
#include "daemon/rpc/proto_convert.h"

namespace kvstrata {
namespace {

void FillL1Usage(const CacheStats& stats, v1::TierInfo* out) {
  out->set_capacity_bytes(stats.capacity_bytes);
  out->set_used_bytes(stats.used_bytes);
  out->set_blocks(stats.blocks);
  out->set_hits(stats.hits);
  out->set_misses(stats.misses);
  out->set_evictions(stats.evictions);
}

// A tier of the table as configured; a lower tier that is enabled reads "unavailable" until
// its usage (FillLowerUsage) says otherwise: its directory could not be opened.
void FillTier(const TierDescriptor& d, const TierConfig& config, v1::TierInfo* out) {
  out->set_tier(static_cast<v1::Tier>(TierWire(d.id)));
  out->set_name(d.label);
  out->set_kind(d.kind);
  out->set_shared(d.shared);
  out->set_enabled(d.enabled);
  out->set_path(d.id == Tier::kL1 ? "" : config.path);
  out->set_capacity_bytes(config.capacity_bytes);
  out->set_eviction_policy(config.eviction_policy);
  out->set_state(!d.enabled ? "disabled" : d.id == Tier::kL1 ? "ok" : "unavailable");
}

void FillLowerUsage(const LowerTierStatus& st, v1::TierInfo* out) {
  const TierStats& f = st.stats;
  out->set_state(std::string(TierStateName(f.state)));
  out->set_capacity_bytes(f.capacity_bytes);
  out->set_effective_capacity_bytes(f.effective_bytes);
  out->set_used_bytes(f.used_bytes);
  out->set_blocks(f.blocks);
  out->set_hits(f.hits);
  out->set_misses(f.misses);
  out->set_evictions(f.evictions);
  out->set_queue_depth(st.queued_writes);
  out->set_dropped_writes(st.dropped_writes + f.refused_writes);
  out->set_write_errors(f.write_errors);
  out->set_read_errors(f.read_errors);
  out->set_quarantined_files(f.quarantined);
  out->set_promoted_blocks(st.promoted_blocks);
  out->set_written_blocks(f.writes);
  out->set_written_bytes(f.write_bytes);
  out->set_read_bytes(f.read_bytes);
  out->set_index_warm(f.warm);
  out->set_write_policy(st.write_back ? "write-back" : "write-through");
  out->set_deferred_writes(st.deferred_writes);
  out->set_shed_writes(st.shed_writes);
  out->set_present_writes(st.present_writes);
}

}  // namespace

void AdminService::FillTiers(google::protobuf::RepeatedPtrField<v1::TierInfo>* tiers) const {
  const Config& config = *context_.config;
  const TierTable& table = context_.store->tier_table();
  for (const TierDescriptor& d : table.all()) {
    const LowerTierConfig* entry = FindTier(config, d.label);
    v1::TierInfo* info = tiers->Add();
    if (d.id == Tier::kL1) {
      FillTier(d, config.l1, info);
      FillL1Usage(context_.cache->Stats(), info);
    } else if (entry != nullptr) {
      FillTier(d, *entry, info);
    }
  }
  for (const LowerTierStatus& st : context_.store->LowerTiers()) {
    const int row = TierIndex(st.tier);
    if (row < tiers->size()) FillLowerUsage(st, tiers->Mutable(row));
  }
}

grpc::Status AdminService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*,
                                     v1::GetStatusResponse* response) {
  return context_.guard->Run("Admin.GetStatus", ctx, [&] {
    const ServerIdentity& id = *context_.identity;
    response->set_version(kVersion);
    response->set_instance_id(id.instance_id);
    response->set_pid(id.pid);
    response->set_start_time_unix_ms(UnixMillis(id.start_time));
    response->set_uptime_ms(
        static_cast<uint64_t>(absl::ToInt64Milliseconds(absl::Now() - id.start_time)));
    for (const ListenerInfo& listener : id.listeners) {
      v1::Listener* out = response->add_listeners();
      out->set_kind(listener.kind);
      out->set_address(listener.address);
      out->set_tls(listener.tls);
      out->set_token_auth(listener.token_auth);
    }
    FillTiers(response->mutable_tiers());
    response->set_sessions(static_cast<uint32_t>(context_.sessions->size()));
    response->set_namespaces(static_cast<uint32_t>(context_.namespaces->size()));
    response->set_cuda_enabled(id.cuda_enabled);
    response->set_metrics_address(id.metrics_address);
    response->set_config_path(context_.config->config_path);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::ListTiers(grpc::ServerContext* ctx, const v1::ListTiersRequest*,
                                     v1::ListTiersResponse* response) {
  return context_.guard->Run("Admin.ListTiers", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.ListTiers"); !s.ok()) return s;
    FillTiers(response->mutable_tiers());
    return absl::OkStatus();
  });
}

grpc::Status AdminService::ListNamespaces(grpc::ServerContext* ctx,
                                          const v1::ListNamespacesRequest*,
                                          v1::ListNamespacesResponse* response) {
  return context_.guard->Run(
      "Admin.ListNamespaces", ctx, [&](const Caller& caller) -> absl::Status {
        CacheStats stats = context_.cache->Stats();
        for (const NamespaceInfo& info : context_.namespaces->List()) {
          if (!caller.admin && info.spec.scope != caller.namespace_scope) continue;
          v1::NamespaceInfo* out = response->add_namespaces();
          out->set_namespace_id(info.id);
          out->set_fingerprint(info.fingerprint);
          *out->mutable_spec() = ToProto(info.spec);
          // A salt separates namespaces only while it is secret: it never leaves the daemon.
          if (!info.spec.salt.empty()) out->mutable_spec()->set_salt("<redacted>");
          out->set_bytes_per_block(info.bytes_per_block);
          out->set_sessions(info.sessions);
          auto blocks = stats.blocks_per_namespace.find(info.id);
          out->set_blocks(blocks == stats.blocks_per_namespace.end() ? 0 : blocks->second);
        }
        return absl::OkStatus();
      });
}

grpc::Status AdminService::ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest*,
                                        v1::ListSessionsResponse* response) {
  return context_.guard->Run("Admin.ListSessions", ctx, [&](const Caller& caller) -> absl::Status {
    std::optional<TenantId> only;
    if (!caller.admin) only = caller.tenant;  // an admin sees every tenant's sessions
    for (const SessionInfo& info : context_.sessions->List(only)) {
      v1::SessionInfo* out = response->add_sessions();
      out->set_session_id(info.id);
      out->set_client_name(info.client_name);
      out->set_pid(info.pid);
      out->set_hostname(info.hostname);
      out->set_opened_unix_ms(UnixMillis(info.opened));
      out->set_last_heartbeat_unix_ms(UnixMillis(info.last_heartbeat));
      out->set_namespaces(static_cast<uint32_t>(context_.namespaces->CountRegisteredBy(info.id)));
      out->set_registrations(static_cast<uint32_t>(context_.jobs->registrations(info.id)));
    }
    return absl::OkStatus();
  });
}

grpc::Status AdminService::GetConfig(grpc::ServerContext* ctx, const v1::GetConfigRequest*,
                                     v1::GetConfigResponse* response) {
  return context_.guard->Run("Admin.GetConfig", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.GetConfig"); !s.ok()) return s;
    for (const ConfigEntry& entry : context_.config->entries) {
      v1::ConfigEntry* out = response->add_entries();
      out->set_key(entry.key);
      out->set_value(entry.value);
      out->set_source(entry.source);
    }
    response->set_toml(context_.config->effective_toml);
    return absl::OkStatus();
  });
}

}  // namespace kvstrata
