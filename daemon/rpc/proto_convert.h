// Translation between wire messages and core types. No validation beyond what a type
// conversion needs: the core validates values.
#ifndef KVSTRATA_DAEMON_RPC_PROTO_CONVERT_H_
#define KVSTRATA_DAEMON_RPC_PROTO_CONVERT_H_

#include "absl/time/time.h"
#include "daemon/namespaces/namespace_registry.h"
#include "kvstrata/v1/common.pb.h"

namespace kvstrata {

NamespaceSpec FromProto(const v1::NamespaceSpec& proto);
v1::NamespaceSpec ToProto(const NamespaceSpec& spec);
uint64_t UnixMillis(absl::Time time);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_PROTO_CONVERT_H_
