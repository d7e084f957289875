// `strait train`: trains the reference transformer with pipeline and data parallelism.
// Run without RANK in the environment it validates its settings and launches
// stages x replicas local ranks of itself through the launcher (tools/launcher.h); run as a rank
// (by `strait run`, torchrun, Slurm, ...) it trains (train/trainer.h).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace strait::tools {

// argv: the process's full command line (the launcher re-runs it for each rank).
void add_train_command(CLI::App& app, const std::vector<std::string>& argv, int& exit_code);

}  // namespace strait::tools
