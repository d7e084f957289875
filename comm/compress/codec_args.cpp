#include "comm/compress/codec_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace strait::comm::detail {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string valid_list(const std::vector<std::string_view>& valid) {
  if (valid.empty()) return "none (it takes no arguments)";
  std::string out;
  for (const auto v : valid) out += fmt::format("{}{}", out.empty() ? "" : ", ", v);
  return out;
}

}  // namespace

CodecArgs::CodecArgs(std::string_view codec, std::string_view args,
                     std::vector<std::string_view> valid)
    : codec_(codec), valid_(std::move(valid)) {
  args = trim(args);
  while (!args.empty()) {
    const auto comma = args.find(',');
    const std::string_view pair = trim(args.substr(0, comma));
    args = comma == std::string_view::npos ? std::string_view{} : args.substr(comma + 1);
    const auto eq = pair.find('=');
    const std::string_view key = trim(pair.substr(0, eq));
    if (eq == std::string_view::npos || key.empty()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} codec: argument '{}' is not key=value; valid keys: {}", codec_,
                              pair, valid_list(valid_)));
    }
    if (std::find(valid_.begin(), valid_.end(), key) == valid_.end()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} codec: unknown argument '{}'; valid keys: {}", codec_, key,
                              valid_list(valid_)));
    }
    if (!values_.emplace(std::string(key), std::string(trim(pair.substr(eq + 1)))).second) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} codec: argument '{}' is given twice", codec_, key));
    }
  }
}

void CodecArgs::fail_value(std::string_view key, std::string_view why) const {
  const auto it = values_.find(key);
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{} codec: {}={} is not valid: {}", codec_, key,
                          it == values_.end() ? std::string("?") : it->second, why));
}

std::uint64_t CodecArgs::get_uint(std::string_view key, std::uint64_t fallback) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const std::string& v = it->second;
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
    fail_value(key, "expected an unsigned integer");
  }
  return out;
}

bool CodecArgs::get_bool(std::string_view key, bool fallback) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "1" || it->second == "true") return true;
  if (it->second == "0" || it->second == "false") return false;
  fail_value(key, "expected 0, 1, true or false");
}

double CodecArgs::get_double(std::string_view key, double fallback) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const std::string& v = it->second;
  double out = 0.0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || !std::isfinite(out)) {
    fail_value(key, "expected a number");
  }
  return out;
}

}  // namespace strait::comm::detail
