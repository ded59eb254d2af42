// The daemon's and client's version string, set by the build (KVSTRATA_VERSION).
#ifndef KVSTRATA_DAEMON_COMMON_VERSION_H_
#define KVSTRATA_DAEMON_COMMON_VERSION_H_

namespace kvstrata {

inline constexpr const char* kVersion = KVSTRATA_VERSION;

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_VERSION_H_
