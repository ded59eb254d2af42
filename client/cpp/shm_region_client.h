// Host-mode access to kvstratad's shared-memory region (the L1 pool). MapSessionRegion
// runs the fd-passing protocol of proto/kvstrata/v1/control.proto: connect to the Unix
// stream socket OpenSessionResponse.shm_fd_socket, send the session id (8 bytes little-
// endian), receive the region size (8 bytes little-endian) with the region's descriptor
// attached (SCM_RIGHTS), and map it MAP_SHARED read/write. SlotRef offsets of
// ReserveStore / AcquireLoad are relative to MappedRegion::data().
//
// Errors: UNAVAILABLE when the socket cannot be reached or the exchange breaks off;
// NOT_FOUND when the daemon does not know the session (size 0); INTERNAL when the answer
// is malformed (no descriptor, a short size) or mmap fails; INVALID_ARGUMENT for a socket
// path that does not fit sockaddr_un.
//
// Thread safety: MapSessionRegion is thread-safe. A MappedRegion is a move-only handle;
// its bytes may be read and written by any thread (the daemon's slot protocol says which
// bytes belong to whom). Ownership: the MappedRegion owns the mapping and unmaps it on
// destruction; the received descriptor is closed once mapped.
#ifndef KVSTRATA_CLIENT_CPP_SHM_REGION_CLIENT_H_
#define KVSTRATA_CLIENT_CPP_SHM_REGION_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvstrata {

class MappedRegion {
 public:
  MappedRegion() = default;  // empty: data() == nullptr, size() == 0
  MappedRegion(MappedRegion&& other) noexcept;
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  ~MappedRegion();

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }

  // The `length` bytes at `offset`, or nullptr when they are not inside the region.
  char* At(uint64_t offset, uint64_t length) const;

 private:
  friend absl::StatusOr<MappedRegion> MapSessionRegion(const std::string&, uint64_t);
  MappedRegion(char* data, uint64_t size) : data_(data), size_(size) {}
  void Reset();

  char* data_ = nullptr;
  uint64_t size_ = 0;
};

// Receives the region's descriptor for `session_id` from `fd_socket_path` and maps it.
absl::StatusOr<MappedRegion> MapSessionRegion(const std::string& fd_socket_path,
                                              uint64_t session_id);

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CPP_SHM_REGION_CLIENT_H_
