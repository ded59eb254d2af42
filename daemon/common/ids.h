// The daemon's ids, one name each, used end to end (wire conversion in rpc/ and the job
// frames, the cache, jobs, the transfer engine). Plain integers: 0 is never a valid id.
#ifndef KVSTRATA_DAEMON_COMMON_IDS_H_
#define KVSTRATA_DAEMON_COMMON_IDS_H_

#include <cstdint>

namespace kvstrata {

using SessionId = uint64_t;       // an engine's connection (OpenSession)
using NamespaceId = uint32_t;     // a registered model/layout (RegisterNamespace)
using TenantId = uint32_t;        // a configured tenant ([[tenants]]); 0 = the default one
using LeaseId = uint64_t;         // blocks a lookup pinned for a later load
using RegistrationId = uint64_t;  // an engine's GPU (or host) KV memory (RegisterCuda)
using JobId = uint64_t;           // one SubmitStore / SubmitLoad

// The daemon's own session: promotions and write-downs reserve and pin L1 under it.
inline constexpr SessionId kDaemonSession = ~SessionId{0};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_IDS_H_
