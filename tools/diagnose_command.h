// `strait diagnose [DIR]`: reads every rank's flight-recorder dump in DIR (STRAIT_FR_DUMP_DIR,
// default /tmp/strait-fr) and prints who is stuck where (tools/diagnose/analysis.h), as torch's
// fr_trace does for its flight recorder. Exit status 0 with a report, 2 when DIR holds no dump.
#pragma once

#include <CLI/CLI.hpp>

namespace strait::tools {

void add_diagnose_command(CLI::App& app, int& exit_code);

}  // namespace strait::tools
