/// \file
/// MatrixShape: where one weight matrix's gradient lies in a flat f32 buffer (a gradient bucket),
/// for the codecs that work on whole matrices (PowerSGD, comm/algorithms/powersgd_allreduce.h).
#pragma once

#include <cstddef>

namespace strait::comm {

/// rows x cols elements, row-major and contiguous, starting `offset` elements into the buffer.
struct MatrixShape {
  std::size_t offset{};
  std::size_t rows{};
  std::size_t cols{};
  bool operator==(const MatrixShape&) const = default;
};

}  // namespace strait::comm
