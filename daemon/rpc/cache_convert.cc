#include "daemon/rpc/cache_convert.h"

namespace kvstrata {

std::vector<std::string_view> KeyViews(
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  std::vector<std::string_view> views;
  views.reserve(keys.size());
  for (const std::string& key : keys) views.emplace_back(key);
  return views;
}

v1::Tier ToProto(Tier tier) { return static_cast<v1::Tier>(TierWire(tier)); }

void ToProto(const StoreSlot& slot, uint64_t base, v1::SlotRef* out) {
  switch (slot.status) {
    case StoreStatus::kReserved:
      out->set_state(v1::SlotRef::STATE_RESERVED);
      out->set_offset(slot.offset - base);
      out->set_length(slot.length);
      return;
    case StoreStatus::kAlreadyPresent:
      out->set_state(v1::SlotRef::STATE_ALREADY_PRESENT);
      return;
    case StoreStatus::kDropped:
    case StoreStatus::kNotAdmitted:
      out->set_state(v1::SlotRef::STATE_DROPPED);
      return;
  }
}

void ToProto(const LoadSlot& slot, uint64_t base, v1::SlotRef* out) {
  if (slot.status == LoadStatus::kMissing) {
    out->set_state(v1::SlotRef::STATE_MISSING);
    return;
  }
  out->set_state(v1::SlotRef::STATE_READY);
  out->set_offset(slot.offset - base);
  out->set_length(slot.length);
}

}  // namespace kvstrata
