// TransferEngine::Create for builds without CUDA: the daemon serves host mode only.
#include "daemon/transfer/transfer_engine.h"

#include "absl/status/status.h"

namespace kvstrata {

absl::StatusOr<std::unique_ptr<TransferEngine>> TransferEngine::Create(TransferEngineOptions) {
  return absl::UnimplementedError("kvstratad was built without CUDA: GPU transfers unavailable");
}

}  // namespace kvstrata
