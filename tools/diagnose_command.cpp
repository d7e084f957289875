#include "tools/diagnose_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/flight_dump.h"
#include "core/error.h"
#include "tools/diagnose/analysis.h"

namespace strait::tools {
namespace {

constexpr const char* kFooter = R"(
Each process of a job on strait (strait train, strait run, a torch job on the strait backend)
writes its communicators' last operations to DIR/strait-fr-rank<R>-<host>-<pid>.json when an
operation times out, mismatches, loses a peer or is aborted, and on SIGUSR1 (`kill -USR1 PID`
asks a live process for one; `strait run` asks every live rank when one fails). Copy the files
of every host into one folder, then run this. docs/commands/diagnose.md explains the report.
)";

std::vector<diagnose::Dump> read_dumps(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} is not a folder: pass the folder of the dumps (STRAIT_FR_DUMP_DIR "
                            "of the job, default /tmp/strait-fr)",
                            dir.string()));
  }
  std::vector<diagnose::Dump> dumps;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("strait-fr-", 0) != 0 || entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    dumps.push_back(diagnose::parse_dump(text.str(), entry.path().string()));
  }
  if (dumps.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} holds no flight-recorder dump (strait-fr-*.json): was the job run "
                            "with another STRAIT_FR_DUMP_DIR, or STRAIT_FR_ENTRIES=0? A live rank "
                            "writes one on `kill -USR1 PID`",
                            dir.string()));
  }
  return dumps;
}

}  // namespace

void add_diagnose_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "diagnose", "Read every rank's flight-recorder dump and say which rank is stuck where");
  cmd->footer(kFooter);
  auto dir = std::make_shared<std::string>();
  cmd->add_option("dir", *dir,
                  "Folder of the dumps (default: STRAIT_FR_DUMP_DIR or /tmp/strait-fr)");
  cmd->callback([dir, &exit_code] {
    const std::string folder = dir->empty() ? comm::fr::dump_dir() : *dir;
    const diagnose::Report report = diagnose::analyse(read_dumps(folder));
    fmt::print("strait diagnose {}\n{}", folder, report.text);
    exit_code = 0;
  });
}

}  // namespace strait::tools
