// NamespaceIds: the daemon's one namespace id space (NamespaceId, daemon/common/ids.h) as the
// tiers use it. Every fingerprint has one id for the daemon's life, whether an engine
// registered the namespace (NamespaceRegistry::Register) or a tier found its blocks first
// (a scan of L2/L3, another daemon's journal): the tiers key their indexes by the same
// (NamespaceId, key) as L1 and the wire, and keep no id space of their own.
// Implementations are thread-safe and may take a lock of their own (never a tier's).
#ifndef KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_IDS_H_
#define KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_IDS_H_

#include "absl/strings/string_view.h"
#include "daemon/common/ids.h"

namespace kvstrata {

class NamespaceIds {
 public:
  virtual ~NamespaceIds() = default;
  // The id of `fingerprint` (32 lowercase hex), given out on first use; 0 when the id space
  // is full (the caller then cannot index that namespace's blocks).
  virtual NamespaceId IdOf(absl::string_view fingerprint) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_IDS_H_
