#include "daemon/transfer/copy_calibration.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstrata {

const std::vector<uint64_t>& CalibrationPieceSizes() {
  static const std::vector<uint64_t> sizes = {16 << 10,  32 << 10,  64 << 10,
                                              128 << 10, 256 << 10, 512 << 10};
  return sizes;
}

uint64_t ChooseStagedMaxPieceBytes(const std::vector<CalibrationRow>& rows) {
  if (rows.empty()) return 0;
  uint64_t threshold = 2 * rows.back().piece_bytes;  // Staged won throughout.
  for (size_t i = rows.size(); i > 0; --i) {
    const CalibrationRow& row = rows[i - 1];
    if (row.dma_gbps < kDmaPreference * row.staged_gbps) break;
    threshold = row.piece_bytes;
  }
  return threshold;
}

std::string CopyCalibration::Summary() const {
  std::string rows_text;
  for (const CalibrationRow& row : rows) {
    absl::StrAppend(&rows_text, rows_text.empty() ? "" : ", ", row.piece_bytes >> 10, "KiB dma ",
                    absl::StrFormat("%.1f", row.dma_gbps), " staged ",
                    absl::StrFormat("%.1f", row.staged_gbps));
  }
  return absl::StrCat("device=", device, " staged_max_piece_bytes=", staged_max_piece_bytes,
                      " gbps=\"", rows_text, "\"");
}

double CopyCalibration::FastestGbps() const {
  double fastest = 0;
  for (const CalibrationRow& row : rows)
    fastest = std::max({fastest, row.dma_gbps, row.staged_gbps});
  return fastest;
}

}  // namespace kvstrata
