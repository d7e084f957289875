// `strait run`: the command-line face of the local launcher (tools/launcher.h).
// Thread-safety: registration and parsing happen on the main thread.
#pragma once

namespace CLI {
class App;
}

namespace strait::tools {

// Adds the `run` subcommand to app. When it is parsed, its callback runs the job and stores the
// launcher's exit status in exit_code (which must outlive parsing). Invalid options surface as
// strait::Error(InvalidArgument) from app.parse().
void add_run_command(CLI::App& app, int& exit_code);

}  // namespace strait::tools
