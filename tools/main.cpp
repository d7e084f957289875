// strait: the command-line tool. A thin dispatcher: each subcommand registers itself.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/cli_support.h"
#include "tools/diagnose_command.h"
#include "tools/info_command.h"
#include "tools/plan_command.h"
#include "tools/run_command.h"
#include "tools/schedule_command.h"
#include "tools/train_command.h"
#include "tools/tune_command.h"
#include "tools/version.h"
#include "tools/wan_command.h"

int main(int argc, char** argv) {
  CLI::App app{"strait: collective communication and offload for training over slow links"};
  app.require_subcommand(1);
  app.set_version_flag("--version", strait::tools::version_line(), "Print the version and exit");
  int exit_code = 0;
  const std::vector<std::string> args(argv, argv + argc);
  strait::tools::add_diagnose_command(app, exit_code);
  strait::tools::add_info_command(app, exit_code);
  strait::tools::add_plan_command(app, exit_code);
  strait::tools::add_run_command(app, exit_code);
  strait::tools::add_schedule_command(app, exit_code);
  strait::tools::add_train_command(app, args, exit_code);
  strait::tools::add_tune_command(app, args, exit_code);
  strait::tools::add_wan_command(app, exit_code);
  strait::tools::add_examples(app);
  strait::tools::suggest_on_failure(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError& e) {
    // A bare `strait` (or `strait wan`): the commands to choose from, not "A subcommand is
    // required".
    const CLI::App& cmd = strait::tools::deepest_parsed(app);
    if (cmd.remaining().empty() && !cmd.get_subcommands({}).empty() &&
        cmd.get_subcommands([](const CLI::App* s) { return s->parsed(); }).empty()) {
      fmt::print("{}", strait::tools::command_list(cmd));
      return argc == 1 ? 0 : 2;
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const strait::Error& e) {
    fmt::print(stderr, "strait: {}\n", e.what());
    return e.code() == strait::ErrorCode::InvalidArgument ? 2 : 1;
  }
  return exit_code;
}
