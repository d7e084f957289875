#include "tools/tune/budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "comm/compress/codec_factory.h"
#include "core/error.h"

namespace strait::tools::tune {
namespace {

struct Level {
  std::string_view name;
  int level = 0;
};

// One line per codec (comm/compress/codec.h gives each one's error).
constexpr std::array kLevels = {
    Level{"none", 0}, Level{"fp16", 1},   Level{"bf16", 1}, Level{"int8", 2},
    Level{"int4", 3}, Level{"onebit", 4}, Level{"topk", 4}, Level{"powersgd", 4},
};

}  // namespace

int codec_level(std::string_view codec_name) {
  const auto name = codec_name.substr(0, codec_name.find(':'));
  for (const auto& l : kLevels) {
    if (l.name == name) return l.level;
  }
  return kLossiest;
}

std::vector<std::string> codecs_by_accuracy() {
  std::vector<std::string> names;
  for (const auto n : comm::codec_names()) names.emplace_back(n);
  names.emplace_back("powersgd");  // not an elementwise codec, but allreduce_compressed runs it
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::pair(codec_level(a), a) < std::pair(codec_level(b), b);
  });
  return names;
}

int parse_max_codec(std::string_view name) {
  const auto names = codecs_by_accuracy();
  if (std::find(names.begin(), names.end(), name) != names.end()) return codec_level(name);
  std::string valid;
  for (const auto& n : names) {
    valid += fmt::format("{}{} (level {})", valid.empty() ? "" : ", ", n, codec_level(n));
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("--max-codec '{}' is not a codec. Valid, from lossless to lossiest: {}; "
                          "the tuner may choose any codec of the given one's level or below",
                          name, valid));
}

}  // namespace strait::tools::tune
