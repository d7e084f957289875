// straitResult_t and strait::ErrorCode, one for one (capi/strait.h, core/error.h).
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

#include "capi/strait.h"
#include "core/error.h"

namespace strait::capi {

[[nodiscard]] straitResult_t to_result(ErrorCode code) noexcept;
// The ErrorCode of a failure code; nullopt for straitSuccess, straitInProgress and values that are
// no straitResult_t.
[[nodiscard]] std::optional<ErrorCode> to_error_code(int result) noexcept;
// "straitTimeout", ...; "" for a value that is no straitResult_t.
[[nodiscard]] std::string_view result_name(int result) noexcept;
// The static text of straitGetErrorString.
[[nodiscard]] const char* result_string(int result) noexcept;

}  // namespace strait::capi
