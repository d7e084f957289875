#include "comm/algorithms/codec_rules.h"

#include <fmt/format.h>

#include "comm/compress/codec_factory.h"
#include "core/error.h"

namespace strait::comm {

void check_rule_codecs(const AlgorithmTable& table) {
  for (const auto& rule : table.rules()) {
    if (rule.codec.empty()) continue;
    try {
      (void)canonical_codec_spec(rule.codec);
    } catch (const Error& e) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("selection rule '{}' (STRAIT_TUNE_FILE or CommOptions::algorithms): "
                              "codec '{}': {}",
                              rule.describe(), rule.codec, e.what()));
    }
  }
}

}  // namespace strait::comm
