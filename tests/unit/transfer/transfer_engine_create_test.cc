// TransferEngine::Create on a machine without a GPU (CI): UNIMPLEMENTED in a build
// without CUDA, FAILED_PRECONDITION with the reason in a CUDA build.
#include <vector>

#include "daemon/transfer/gpu_probe.h"
#include "daemon/transfer/transfer_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

using ::testing::HasSubstr;

TEST(TransferEngineCreateTest, NoGpuIsAClearError) {
  if (!ProbeGpus().devices.empty()) GTEST_SKIP() << "a GPU is visible: tests/gpu covers it";
  std::vector<char> region(1 << 20);
  TransferEngineOptions options;
  options.host_base = region.data();
  options.host_bytes = region.size();
  absl::StatusOr<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create(options);
  ASSERT_FALSE(engine.ok());
#ifdef KVSTRATA_WITH_CUDA
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("no CUDA device"));
#else
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("without CUDA"));
#endif
}

#ifdef KVSTRATA_WITH_CUDA
TEST(TransferEngineCreateTest, EmptyRegionIsInvalid) {
  absl::StatusOr<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create({});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
}
#endif

}  // namespace
}  // namespace kvstrata
