#include "capi/config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "capi/arguments.h"
#include "comm/algorithms/selection.h"
#include "core/error.h"

namespace strait::capi {

namespace {

constexpr int kMaxStreams = 8;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

std::string read_file(const char* path, const std::string& source) {
  std::ifstream in(path);
  std::stringstream text;
  if (in.is_open()) text << in.rdbuf();
  if (!in.is_open() || in.bad()) {
    invalid(
        fmt::format("{}: cannot read it ({}); name a JSON file of algorithm rules, as `strait "
                    "tune` writes",
                    source, std::strerror(errno)));
  }
  return text.str();
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
  comm::AlgorithmTable table = comm::AlgorithmTable::defaults();
  const char* file = c.tuneFile != nullptr ? c.tuneFile : std::getenv("STRAIT_TUNE_FILE");
  if (file != nullptr && *file != '\0') {
    const std::string source = c.tuneFile != nullptr
                                   ? fmt::format("{}: config->tuneFile {}", function, file)
                                   : fmt::format("STRAIT_TUNE_FILE={}", file);
    table.append(comm::AlgorithmTable::parse_json(read_file(file, source), source));
  }
  const char* rules = c.tune != nullptr ? c.tune : std::getenv("STRAIT_TUNE");
  if (rules != nullptr) {
    table.append(comm::AlgorithmTable::parse(
        rules, c.tune != nullptr ? fmt::format("{}: config->tune", function) : "STRAIT_TUNE"));
  }
  options.algorithms = std::make_shared<const comm::AlgorithmTable>(std::move(table));
  if (c.secretFile != nullptr) options.secret_file = std::string(c.secretFile);
  if (c.encrypt != nullptr) options.encrypt = c.encrypt;
  return options;
}

}  // namespace strait::capi
