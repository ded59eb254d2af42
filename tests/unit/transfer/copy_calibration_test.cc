#include "daemon/transfer/copy_calibration.h"

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr uint64_t kKiB = 1024;

TEST(CopyCalibrationTest, DmaFromTheSizeOnWhichItWinsForGood) {
  EXPECT_EQ(ChooseStagedMaxPieceBytes({{16 * kKiB, 30, 45},
                                       {32 * kKiB, 40, 46},
                                       {64 * kKiB, 44, 47},
                                       {128 * kKiB, 46, 47},
                                       {256 * kKiB, 50, 48}}),
            128 * kKiB);  // Within 3 % goes to DMA: no kernel on the GPU's SMs.
  // DMA winning at one small size but losing above it does not count.
  EXPECT_EQ(
      ChooseStagedMaxPieceBytes({{16 * kKiB, 46, 45}, {32 * kKiB, 40, 46}, {64 * kKiB, 50, 47}}),
      64 * kKiB);
  EXPECT_EQ(ChooseStagedMaxPieceBytes({{16 * kKiB, 50, 45}, {32 * kKiB, 51, 46}}), 16 * kKiB);
}

TEST(CopyCalibrationTest, StagedThroughoutStagesEveryCandidate) {
  EXPECT_EQ(ChooseStagedMaxPieceBytes({{16 * kKiB, 30, 45}, {512 * kKiB, 40, 46}}), 1024 * kKiB);
  EXPECT_EQ(ChooseStagedMaxPieceBytes({}), 0u);
}

TEST(CopyCalibrationTest, CandidatesAscendAndTheSummaryNamesEveryRow) {
  const std::vector<uint64_t>& sizes = CalibrationPieceSizes();
  ASSERT_FALSE(sizes.empty());
  for (size_t i = 1; i < sizes.size(); ++i) EXPECT_LT(sizes[i - 1], sizes[i]);
  CopyCalibration c{1, {{16 * kKiB, 30.04, 45.26}, {32 * kKiB, 48, 46}}, 32 * kKiB};
  EXPECT_EQ(c.Summary(),
            "device=1 staged_max_piece_bytes=32768 gbps=\"16KiB dma 30.0 staged 45.3, 32KiB dma "
            "48.0 staged 46.0\"");
}

TEST(CopyCalibrationTest, FastestIsTheBestRowEitherWay) {
  EXPECT_DOUBLE_EQ(
      (CopyCalibration{0, {{16 * kKiB, 30, 45}, {32 * kKiB, 48, 46}}, 0}).FastestGbps(), 48);
  EXPECT_DOUBLE_EQ((CopyCalibration{0, {{16 * kKiB, 30, 47}}, 0}).FastestGbps(), 47);
  EXPECT_DOUBLE_EQ(CopyCalibration{}.FastestGbps(), 0);
}

}  // namespace
}  // namespace kvstrata
