// check_count: the argument check of the elementwise kernels (gelu.cpp, residual.cpp). Internal.
// Errors: InvalidArgument "kernels::<op>: element count N is negative". Thread-safety: pure.
#pragma once

#include <fmt/format.h>

#include <cstddef>

#include "core/error.h"

namespace strait::kernels::detail {

inline void check_count(const char* op, std::ptrdiff_t N) {
  if (N < 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("kernels::{}: element count {} is negative", op, N));
  }
}

}  // namespace strait::kernels::detail
