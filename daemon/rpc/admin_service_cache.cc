// AdminService: statistics and block administration on the L1 BlockCache.
#include <algorithm>

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
    // Echo at most 80 bytes: a huge fingerprint must not turn NOT_FOUND into a metadata
    // size error on the client.
    constexpr size_t kShown = 80;
    std::string shown =
        fingerprint.size() <= kShown
            ? fingerprint
            : absl::StrCat(fingerprint.substr(0, kShown), "... (", fingerprint.size(), " bytes)");
    return absl::NotFoundError(absl::StrCat("no namespace has fingerprint '", shown, "'"));
  }
  return *info;
}

// Which tiers an admin request names: L1 and/or one lower tier of the daemon's table
// (nullopt = all lower ones).
absl::StatusOr<TierSelection> ChooseTiers(const ServiceContext& context, v1::Tier tier) {
  if (tier == v1::TIER_UNSPECIFIED) return TierSelection{};
  if (tier == v1::TIER_L1_DRAM) return TierSelection{true, false, std::nullopt};
  const TierTable& table = context.store->tier_table();
  std::optional<Tier> lower = TierFromWire(static_cast<uint32_t>(tier));
  if (!lower.has_value() || !table.Has(*lower)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown tier ", static_cast<int>(tier),
                                                   ": this daemon has ", table.size(),
                                                   " tiers (kvstrata tiers lists them)"));
  }
  for (const LowerTierStatus& st : context.store->LowerTiers()) {
    if (st.tier == *lower) return TierSelection{false, true, *lower};
  }
  const std::string& name = table.Of(*lower).label;
  if (!table.Of(*lower).enabled) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", name, " tier is not enabled in this daemon (set ", name,
                     ".enabled = true and ", name, ".path in its configuration)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the ", name,
                   " tier is not available in this daemon (it could not be opened: see the "
                   "daemon's log)"));
}

void AddCounter(v1::GetStatsResponse* response, absl::string_view name, uint64_t value) {
  v1::Counter* counter = response->add_counters();
  counter->set_name(std::string(name));
  counter->set_value(value);
}

// The running totals `kvstrata top` shows as rates, as the metrics page counts them.
void AddActivity(const MetricsSink& metrics, const TierTable& tiers,
                 v1::GetStatsResponse* response) {
  auto total = [&](absl::string_view name, const MetricLabelPairs& match = {}) {
    return static_cast<uint64_t>(metrics.CounterTotal(name, match));
  };
  AddCounter(response, "lookups", total("kvstrata_lookups_total"));
  AddCounter(response, "lookup_blocks", total("kvstrata_lookup_blocks_total"));
  AddCounter(response, "hit_blocks", total("kvstrata_hit_blocks_total"));
  AddCounter(response, "dropped_stores", total("kvstrata_stores_dropped_total"));
  for (const TierDescriptor& d : tiers.all()) {
    for (CopyDirection dir : {CopyDirection::kDown, CopyDirection::kUp}) {
      const std::string route = tiers.RouteName(d.id, dir);
      AddCounter(response, absl::StrCat("transfer_bytes_", route),
                 total("kvstrata_transfer_bytes_total", {{"direction", route}}));
    }
  }
}

}  // namespace

grpc::Status AdminService::GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest*,
                                    v1::GetStatsResponse* response) {
  return context_.guard->Run("Admin.GetStats", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.GetStats"); !s.ok()) return s;
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
    if (context_.metrics != nullptr) {
      AddActivity(*context_.metrics, context_.store->tier_table(), response);
    }
    FillTiers(response->mutable_tiers());
    if (context_.client_counters != nullptr) {
      for (const auto& [name, value] : context_.client_counters->Totals()) {
        v1::Counter* counter = response->add_client_counters();
        counter->set_name(name);
        counter->set_value(value);
      }
    }
    return absl::OkStatus();
  });
}

grpc::Status AdminService::AdminLookup(grpc::ServerContext* ctx,
                                       const v1::AdminLookupRequest* request,
                                       v1::AdminLookupResponse* response) {
  return context_.guard->Run("Admin.AdminLookup", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.AdminLookup"); !s.ok()) return s;
    absl::StatusOr<NamespaceInfo> ns = FindByFingerprint(context_, request->fingerprint());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
    std::vector<std::string_view> keys = KeyViews(request->keys());
    absl::StatusOr<std::vector<std::optional<Tier>>> where = context_.store->Peek(ns->id, keys);
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
  return context_.guard->Run("Admin.Evict", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.Evict"); !s.ok()) return s;
    absl::StatusOr<NamespaceInfo> ns = FindByFingerprint(context_, request->fingerprint());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
    absl::StatusOr<TierSelection> tiers = ChooseTiers(context_, request->tier());
    if (!tiers.ok()) return tiers.status();
    std::vector<std::string_view> keys = KeyViews(request->keys());
    absl::StatusOr<EvictCounts> evicted = context_.store->Evict(ns->id, keys, *tiers);
    if (!evicted.ok()) return evicted.status();
    if (tiers->l1) response->set_l1_blocks(evicted->l1);
    if (tiers->lower) {
      for (const LowerTierStatus& st : context_.store->LowerTiers()) {
        if (tiers->lower_tier.has_value() && *tiers->lower_tier != st.tier) continue;
        (*response->mutable_tier_blocks())[context_.store->tier_table().Label(st.tier)] =
            evicted->files[TierIndex(st.tier)];
      }
    }
    // And the first two lower tiers' as before the labels (TIER_L2_LOCAL, TIER_L3_SHARED).
    const bool all_lower = tiers->lower && !tiers->lower_tier.has_value();
    for (Tier lower : {TierAt(1), TierAt(2)}) {
      if (!all_lower && !(tiers->lower && tiers->lower_tier == lower)) continue;
      const size_t files = evicted->files[TierIndex(lower)];
      lower == TierAt(1) ? response->set_l2_blocks(files) : response->set_l3_blocks(files);
    }
    response->set_evicted_blocks(evicted->keys);
    response->set_pinned_blocks(evicted->pinned);
    return absl::OkStatus();
  });
}

grpc::Status AdminService::Clear(grpc::ServerContext* ctx, const v1::ClearRequest* request,
                                 grpc::ServerWriter<v1::Progress>* writer) {
  return context_.guard->Run("Admin.Clear", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.Clear"); !s.ok()) return s;
    std::optional<NamespaceId> ns;
    if (!request->fingerprint().empty()) {
      absl::StatusOr<NamespaceInfo> info = FindByFingerprint(context_, request->fingerprint());
      if (!info.ok()) return info.status();
      ns = info->id;
    }
    absl::StatusOr<TierSelection> tiers = ChooseTiers(context_, request->tier());
    if (!tiers.ok()) return tiers.status();
    auto [l1, files] = context_.store->Clear(ns, *tiers);
    v1::Progress progress;
    progress.set_done_units(l1 + files);
    progress.set_total_units(l1 + files);
    progress.set_unit("blocks");
    progress.set_done(true);
    progress.set_message(absl::StrCat("cleared ", l1, " blocks from l1 and ", files,
                                      " block files from the lower tiers"));
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
  return context_.guard->Run(method, ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, method); !s.ok()) return s;
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

grpc::Status AdminService::Drain(grpc::ServerContext* ctx, const v1::DrainRequest* request,
                                 grpc::ServerWriter<v1::Progress>* writer) {
  return context_.guard->Run("Admin.Drain", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = RequireAdmin(caller, "Admin.Drain"); !s.ok()) return s;
    // Checked before the target, so that "no lower tier" is what a daemon without any says.
    if (absl::Status s = context_.store->CheckDrainable(); !s.ok()) return s;
    absl::StatusOr<TierSelection> tiers = ChooseTiers(context_, request->target());
    if (!tiers.ok()) return tiers.status();
    if (!tiers->lower) return absl::InvalidArgumentError("drain targets a lower tier, not L1");
    uint64_t last_done = 0, last_total = 0;
    auto send = [&](uint64_t done, uint64_t total) {
      last_done = done;
      last_total = total;
      v1::Progress progress;
      progress.set_done_units(done);
      progress.set_total_units(total);
      progress.set_unit("blocks");
      writer->Write(progress);
    };
    absl::StatusOr<size_t> written = context_.store->Drain(tiers->lower_tier, send);
    if (!written.ok()) return written.status();
    v1::Progress last;  // the last counts again: a final frame reads like the one before it
    last.set_done(true);
    last.set_done_units(last_done);
    last.set_total_units(last_total);
    last.set_unit("blocks");
    last.set_message(absl::StrCat("wrote ", *written, " blocks down"));
    writer->Write(last);
    return absl::OkStatus();
  });
}

}  // namespace kvstrata
