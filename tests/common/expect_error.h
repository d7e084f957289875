// Expecting a strait::Error with a given code from a callable.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace strait::test {

// Calls f and expects it to throw Error(code); a test failure (not a fatal one) otherwise.
template <class F>
void expect_error(ErrorCode code, F&& f) {
  try {
    std::forward<F>(f)();
    ADD_FAILURE() << "expected Error(" << to_string(code) << "), nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
}

// Calls f, expects it to throw Error(code), and returns its what() ("" and a test failure when
// nothing is thrown), for checks on the message.
template <class F>
std::string error_of(F&& f, ErrorCode code = ErrorCode::InvalidArgument) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error(" << to_string(code) << "), nothing was thrown";
  return {};
}

}  // namespace strait::test
