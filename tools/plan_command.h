// `strait plan`: the training plan chosen from measured costs (train/planner.h), printed with its
// sources, optionally validated by training the top plans and a sample of others, and learned
// from; and the planning `strait train --plan auto` runs before it starts its ranks.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>

#include "train/train_config.h"

namespace strait::tools {

void add_plan_command(CLI::App& app, int& exit_code);

// `strait train --plan auto`: plans stages x replicas ranks of `config`'s model and batch
// (replicas x microbatches x microbatch size sequences) with the cached profile (measuring what
// it lacks), prints the chosen plan and writes it as a plan file; returns its path.
std::filesystem::path plan_for_train(const train::TrainConfig& config);

}  // namespace strait::tools
