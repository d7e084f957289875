/// \file
/// MatrixShape: where one weight matrix's gradient lies in a flat f32 buffer (a gradient bucket),
/// for the codecs that work on whole matrices (PowerSGD, comm/algorithms/powersgd_allreduce.h).
#pragma once

#include <cstddef>

namespace strait::comm {

/// rows x cols elements, row-major and contiguous, starting `offset` elements into the buffer.
struct MatrixShape {
  /// First element of the matrix in the buffer.
  std::size_t offset{};
  /// Rows of the matrix.
  std::size_t rows{};
  /// Columns of the matrix (row-major: element (i, j) is at offset + i * cols + j).
  std::size_t cols{};
  /// Equal when offset, rows and cols are.
  bool operator==(const MatrixShape&) const = default;
};

}  // namespace strait::comm
