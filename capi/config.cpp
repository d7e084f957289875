#include "capi/config.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "capi/arguments.h"
#include "comm/algorithms/selection.h"
#include "core/error.h"

namespace strait::capi {

namespace {

constexpr int kMaxStreams = 8;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

comm::CommOptions options_from(const straitConfig_t* config, const char* function) {
  const straitConfig_t unset = STRAIT_CONFIG_INITIALIZER;
  const straitConfig_t c =
      config == nullptr ? unset : read_versioned(config, StructInfo::config(), function, unset);
  comm::CommOptions options;
  if (c.timeoutMs != STRAIT_CONFIG_UNDEF_INT) {
    options.timeout =
        std::chrono::milliseconds(to_timeout_ms(c.timeoutMs, function, "config->timeoutMs"));
  }
  if (c.streams != STRAIT_CONFIG_UNDEF_INT) {
    if (c.streams < 1 || c.streams > kMaxStreams) {
      invalid(
          fmt::format("{}: config->streams is {}; it must be 1 .. {} (or "
                      "STRAIT_CONFIG_UNDEF_INT for STRAIT_STREAMS)",
                      function, c.streams, kMaxStreams));
    }
    options.streams = c.streams;
  }
  if (c.siteCount < 0 || (c.siteCount > 0 && c.sites == nullptr)) {
    invalid(
        fmt::format("{}: config->siteCount is {} and config->sites {}: give one site per "
                    "world rank, or 0 and NULL for the environment's",
                    function, c.siteCount, c.sites == nullptr ? "NULL" : "set"));
  }
  if (c.sites != nullptr) {
    // Its length against the world size is checked by the Communicator, naming this source.
    options.sites = std::vector<int>(c.sites, c.sites + c.siteCount);
  }
  comm::AlgorithmTable::Given given;
  if (c.tuneFile != nullptr) {  // "" names no file
    given.file = c.tuneFile;
    given.file_source = fmt::format("{}: config->tuneFile {}", function, c.tuneFile);
  }
  if (c.tune != nullptr) {
    given.rules = c.tune;
    given.rules_source = fmt::format("{}: config->tune", function);
  }
  options.algorithms =
      std::make_shared<const comm::AlgorithmTable>(comm::AlgorithmTable::from_environment(given));
  if (c.secretFile != nullptr) options.secret_file = std::string(c.secretFile);
  if (c.encrypt != nullptr) options.encrypt = c.encrypt;
  return options;
}

}  // namespace strait::capi
