// Internal to comm/compress/: the "key=value,key=value" arguments of make_codec(), checked against
// the keys a codec takes, with errors that name the codec, the key and what is valid.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace strait::comm::detail {

class CodecArgs {
 public:
  // Throws InvalidArgument for a malformed pair, an empty, unknown or repeated key.
  CodecArgs(std::string_view codec, std::string_view args, std::vector<std::string_view> valid);

  std::uint64_t get_uint(std::string_view key, std::uint64_t fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;  // 0|1|true|false
  double get_double(std::string_view key, double fallback) const;

  [[noreturn]] void fail_value(std::string_view key, std::string_view why) const;

 private:
  std::string codec_;
  std::vector<std::string_view> valid_;
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace strait::comm::detail
