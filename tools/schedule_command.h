// `strait schedule`: builds a pipeline schedule (scheduler/schedule.h), prints its simulated
// per-rank timeline and a table of bubble and peak activation memory, and draws it as a PNG Gantt
// chart; or reads what `strait train --trace` measured and sets it beside the plan. See
// schedule_command.cpp's footer.
#pragma once

#include <CLI/CLI.hpp>

namespace strait::tools {

void add_schedule_command(CLI::App& app, int& exit_code);

}  // namespace strait::tools
