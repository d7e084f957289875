// The parts of `strait plan` (tools/plan_command.cpp) that are not flags: where links and the
// profile come from, the cost table, the plan table, and the validation runs (each a `strait
// train` started through the launcher, its --metrics and --trace read back).
// Thread-safety: one thread. Errors: InvalidArgument for bad option values (naming the fix); Io
// when a child process cannot be started.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "train/planner.h"

namespace strait::tools {

// What `strait plan` was asked, beyond the PlanRequest.
struct PlanSetup {
  std::string sites;       // "", "measure" or "0,0,1,1"
  std::string links_file;  // a strait tune JSON
  std::string site_link;   // "LATENCY_MS,MBIT" between sites, overriding the measured links
  std::filesystem::path profile_path;
  std::filesystem::path offload_dir = "/var/tmp";
  bool reprofile = false;
  std::string data;  // the corpus of validation runs ("" = strait train's default)
  // > 0: links and validation runs on the WAN testbed that is up (strait wan run with this many
  // ranks per site).
  int wan_ranks_per_site = 0;
};

// The profile file: STRAIT_PLAN_PROFILE, else ~/.cache/strait/plan-profile.json.
std::filesystem::path default_profile_path();

// Fills request.links (measuring loopback links with `strait tune` once per world size and
// caching them in the profile), measures what the profile lacks, saves it when it changed.
// Returns the seconds spent measuring.
double prepare_costs(train::PlanRequest& request, train::PlanProfile& profile,
                     const PlanSetup& setup);

// The cost table: every measured figure with its source.
void print_costs(const train::PlanRequest& request, const train::PlanProfile& profile);
// What validation learned (or assumes before any run), as words: the cores, waiting load, step
// factor and point-to-point overheads, then the memory beyond the model (learned_memory(): "+6.6
// MiB, pipelines +7.2, +2.8 per model stage, +9.5 with nvme, +7.0 with cpu activation offload").
std::string describe_learned(const train::Learned& learned);
std::string learned_memory(const train::Learned& learned);
// The top plans and why the first beat the second.
void print_plans(const std::vector<train::ScoredPlan>& plans, int top);

// One validation run of `plan` (strait train through the launcher, `steps` steps) and what it
// measured; a failed run has step_s 0 and its log's tail in `source`.
train::RunMeasurement measure_plan(const train::Plan& plan, const train::PlanRequest& request,
                                   const PlanSetup& setup, int steps, const std::string& tag);

// Spearman's rank correlation (ties get their mean rank).
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace strait::tools
