#include "daemon/transfer/cuda_process.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr char kVariable[] = "CUDA_DEVICE_MAX_CONNECTIONS";

TEST(CudaProcessTest, AsksForEveryHardwareQueue) {
  unsetenv(kVariable);
  PrepareCudaProcess();
  ASSERT_NE(std::getenv(kVariable), nullptr);
  EXPECT_EQ(std::string(std::getenv(kVariable)), "32");
}

TEST(CudaProcessTest, KeepsTheOperatorsSetting) {
  setenv(kVariable, "8", 1);
  PrepareCudaProcess();
  EXPECT_EQ(std::string(std::getenv(kVariable)), "8");
  unsetenv(kVariable);
}

}  // namespace
}  // namespace kvstrata
