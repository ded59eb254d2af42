// ControlService: KV events for the connectors' take_events() (PollEvents).
#include "absl/strings/str_cat.h"
#include "daemon/rpc/control_service.h"

namespace kvstrata {
namespace {

constexpr uint32_t kDefaultBatches = 1000;
constexpr uint32_t kMaxBatches = 100000;

v1::KvEvent::Kind ToProto(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kBlockStored:
      return v1::KvEvent::KIND_BLOCK_STORED;
    case KvEventKind::kBlockRemoved:
      return v1::KvEvent::KIND_BLOCK_REMOVED;
    case KvEventKind::kAllBlocksCleared:
      return v1::KvEvent::KIND_ALL_BLOCKS_CLEARED;
  }
  return v1::KvEvent::KIND_UNSPECIFIED;
}

void ToProto(const KvEventBatch& batch, v1::KvEventBatch* out) {
  out->set_seq(batch.seq);
  out->set_ts(batch.ts);
  out->set_model(batch.model);
  for (const KvEvent& e : batch.events) {
    v1::KvEvent* event = out->add_events();
    event->set_kind(ToProto(e.kind));
    event->mutable_block_hashes()->Add(e.block_hashes.begin(), e.block_hashes.end());
    if (e.parent_block_hash.has_value()) event->set_parent_block_hash(*e.parent_block_hash);
    event->mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
    event->set_block_size(e.block_size);
    if (e.lora_id.has_value()) event->set_lora_id(*e.lora_id);
    if (e.lora_name.has_value()) event->set_lora_name(*e.lora_name);
    event->set_medium(e.medium);
    event->set_namespace_id(e.namespace_id);
  }
}

}  // namespace

grpc::Status ControlService::PollEvents(grpc::ServerContext* ctx,
                                        const v1::PollEventsRequest* request,
                                        v1::PollEventsResponse* response) {
  return context_.guard->Run("Control.PollEvents", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant); !s.ok())
      return s;
    if (request->max_batches() > kMaxBatches) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_batches: ", request->max_batches(), " is above ", kMaxBatches));
    }
    if (request->namespace_id() != 0) {
      std::optional<NamespaceInfo> ns = context_.namespaces->Find(request->namespace_id());
      if (!ns.has_value() || (!caller.admin && ns->spec.scope != caller.namespace_scope)) {
        return absl::NotFoundError(
            absl::StrCat("namespace_id ", request->namespace_id(), " is not registered"));
      }
    } else if (!caller.admin) {
      return absl::PermissionDeniedError(
          "namespace_id 0 (every namespace's events) is for admins; name one of your namespaces");
    }
    if (context_.events == nullptr) {
      return absl::FailedPreconditionError(
          "KV events are disabled on this daemon (set events.enabled = true)");
    }
    uint32_t max = request->max_batches() == 0 ? kDefaultBatches : request->max_batches();
    EventPage page = context_.events->Read(request->from_seq(), max, request->namespace_id());
    for (const KvEventBatch& batch : page.batches) ToProto(batch, response->add_batches());
    response->set_next_seq(page.next_seq);
    response->set_truncated(page.truncated);
    response->set_dropped_events(context_.events->Stats().dropped_events);
    return absl::OkStatus();
  });
}

}  // namespace kvstrata
