// Conversions between wire messages and BlockCache types, shared by the control and admin
// services.
#ifndef KVSTRATA_DAEMON_RPC_CACHE_CONVERT_H_
#define KVSTRATA_DAEMON_RPC_CACHE_CONVERT_H_

#include <google/protobuf/repeated_ptr_field.h>

#include <string>
#include <string_view>
#include <vector>

#include "daemon/cache/block_cache.h"
#include "kvstrata/v1/common.pb.h"
#include "kvstrata/v1/control.pb.h"

namespace kvstrata {

// Views of the request's keys; valid while the request lives.
std::vector<std::string_view> KeyViews(const google::protobuf::RepeatedPtrField<std::string>& keys);
v1::Tier ToProto(Tier tier);
// Slot offsets on the wire are offsets in the partition the client maps, which starts at
// `base` in the region (RequireMappedBase).
void ToProto(const StoreSlot& slot, uint64_t base, v1::SlotRef* out);
void ToProto(const LoadSlot& slot, uint64_t base, v1::SlotRef* out);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CACHE_CONVERT_H_
