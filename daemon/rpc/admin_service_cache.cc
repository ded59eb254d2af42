// AdminService: statistics and block administration on the L1 BlockCache.
#include "absl/strings/str_cat.h"
#include "daemon/rpc/admin_service.h"
#include "daemon/rpc/cache_convert.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {
namespace {

absl::StatusOr<NamespaceInfo> FindByFingerprint(const ServiceContext& context,
                                                const std::string& fingerprint) {
  std::optional<NamespaceInfo> info = context.namespaces->FindByFingerprint(fingerprint);
  if (!info.has_value()) {
    return absl::NotFoundError(absl::StrCat("no namespace has fingerprint '", fingerprint, "'"));
  }
  return *info;
}

absl::Status OnlyL1(v1::Tier tier) {
  if (tier == v1::TIER_UNSPECIFIED || tier == v1::TIER_L1_DRAM) return absl::OkStatus();
  return absl::FailedPreconditionError("only the L1 tier is available in this daemon build");
}

void AddCounter(v1::GetStatsResponse* response, const char* name, uint64_t value) {
  v1::Counter* counter = response->add_counters();
  counter->set_name(name);
  counter->set_value(value);
}

}  // namespace

grpc::Status AdminService::GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest*,
                                    v1::GetStatsResponse* response) {
  return context_.guard->Run("Admin.GetStats", ctx, [&] {
    CacheStats s = context_.cache->Stats();
    AddCounter(response, "l1_hit_blocks", s.hits);
    AddCounter(response, "l1_miss_blocks", s.misses);
    AddCounter(response, "l1_evictions", s.evictions);
    AddCounter(response, "l1_dropped_stores", s.dropped_stores);
    AddCounter(response, "l1_not_admitted_stores", s.not_admitted);
    AddCounter(response, "l1_slab_moves", s.slab_moves);
    AddCounter(response, "l1_used_bytes", s.used_bytes);
    AddCounter(response, "l1_blocks", s.blocks);
    AddCounter(response, "active_leases", s.active_leases);
    AddCounter(response, "active_reservations", s.active_reservations);
    AddCounter(response, "active_loads", s.active_loads);
    AddCounter(response, "sessions", context_.sessions->size());
    AddCounter(response, "namespaces", context_.namespaces->size());
    FillTiers(response->mutable_tiers());
    return absl::OkStatus();
  });
}

grpc::Status AdminService::AdminLookup(grpc::ServerContext* ctx,
                                       const v1::AdminLookupRequest* request,
                                       v1::AdminLookupResponse* response) {
  return context_.guard->Run("Admin.AdminLookup", ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns = FindByFingerprint(context_, request->fingerprint());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
    std::vector<std::string_view> keys = KeyViews(request->keys());
    absl::StatusOr<std::vector<std::optional<Tier>>> where = context_.cache->Peek(ns->id, keys);
    if (!where.ok()) return where.status();
    bool leading = true;
    uint32_t hits = 0;
    for (const std::optional<Tier>& tier : *where) {
      leading = leading && tier.has_value();
      hits += leading ? 1 : 0;
      response->add_locations()->set_tier(tier.has_value() ? ToProto(*tier) : v1::TIER_UNSPECIFIED);
    }
    response->set_hit_blocks(hits);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Evict(grpc::ServerContext* ctx, const v1::EvictRequest* request,
                                 v1::EvictResponse* response) {
  return context_.guard->Run("Admin.Evict", ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns = FindByFingerprint(context_, request->fingerprint());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
    if (absl::Status s = OnlyL1(request->tier()); !s.ok()) return s;
    std::vector<std::string_view> keys = KeyViews(request->keys());
    absl::StatusOr<size_t> evicted = context_.cache->Evict(ns->id, keys);
    if (!evicted.ok()) return evicted.status();
    response->set_evicted_blocks(*evicted);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Clear(grpc::ServerContext* ctx, const v1::ClearRequest* request,
                                 grpc::ServerWriter<v1::Progress>* writer) {
  return context_.guard->Run("Admin.Clear", ctx, [&]() -> absl::Status {
    std::optional<NamespaceId> ns;
    if (!request->fingerprint().empty()) {
      absl::StatusOr<NamespaceInfo> info = FindByFingerprint(context_, request->fingerprint());
      if (!info.ok()) return info.status();
      ns = info->id;
    }
    if (absl::Status s = OnlyL1(request->tier()); !s.ok()) return s;
    size_t cleared = context_.cache->Clear(ns);
    v1::Progress progress;
    progress.set_done_units(cleared);
    progress.set_total_units(cleared);
    progress.set_unit("blocks");
    progress.set_done(true);
    progress.set_message(absl::StrCat("cleared ", cleared, " blocks from l1"));
    writer->Write(progress);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Pin(grpc::ServerContext* ctx, const v1::PinRequest* request,
                               v1::PinResponse* response) {
  return PinOrUnpin("Admin.Pin", ctx, *request, response, /*pin=*/true);
}

grpc::Status AdminService::Unpin(grpc::ServerContext* ctx, const v1::PinRequest* request,
                                 v1::PinResponse* response) {
  return PinOrUnpin("Admin.Unpin", ctx, *request, response, /*pin=*/false);
}

grpc::Status AdminService::PinOrUnpin(absl::string_view method, grpc::ServerContext* ctx,
                                      const v1::PinRequest& request, v1::PinResponse* response,
                                      bool pin) {
  return context_.guard->Run(method, ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns = FindByFingerprint(context_, request.fingerprint());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateKeys(request.keys()); !s.ok()) return s;
    std::vector<std::string_view> keys = KeyViews(request.keys());
    absl::StatusOr<size_t> changed =
        pin ? context_.cache->Pin(ns->id, keys) : context_.cache->Unpin(ns->id, keys);
    if (!changed.ok()) return changed.status();
    response->set_blocks(*changed);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Drain(grpc::ServerContext* ctx, const v1::DrainRequest*,
                                 grpc::ServerWriter<v1::Progress>*) {
  return context_.guard->Run("Admin.Drain", ctx, [] {
    return absl::UnimplementedError(
        "drain needs a lower tier (L2/L3), which this daemon build does not provide yet");
  });
}

}  // namespace kvstrata
