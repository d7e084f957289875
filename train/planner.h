// The planner behind `strait plan` and `strait train --plan`: prices a whole training plan
// (stages x replicas, microbatch size and count, schedule and chunks, activation offload, where the
// optimizer state lives, the gradient codec, DiLoCo's H and outer codec across sites) with the
// schedule simulator (scheduler/schedule_sim.h) fed by measured costs (train/plan_profile.h), and
// searches them for the fastest plan that fits the memory per rank.
// Time model: every model stage's F, B, W is its layers' profiled block cost plus the embedding's
// (first) or the head's (last); transfers are latency + bytes / bandwidth of the link between the
// two ranks (the slowest replica's); ALLREDUCE_GRAD is a ring over the replicas of a stage
// (2(R-1)/R of the codec's wire bytes over the group's slowest link, 2(R-1) latencies, encode +
// decode) plus the tied embedding; OPTIM is AdamW at its measured rate (nvme: the slower of that
// and the moments' disk traffic). When the ranks' threads outnumber the cores, compute is stretched
// by the simulated load (busy rank-seconds x threads / (cores x makespan); validation runs learn
// what share of the bubble polling ranks still load the cores); what they measured (Learned) scales
// it further, and a SEND or RECV occupies its rank as long as the runs' traces measured. DiLoCo
// adds its outer all-reduce / H to every step. Memory per rank: fp32 weights and gradients, AdamW
// moments (RAM, or nvme's two chunk buffers), the activation slots the schedule needs
// (peak_stashed_microbatches_of_stage) at the profiled stash bytes, zero-bubble W inputs, the
// model's backward scratch, RAM-offloaded stashes, plus what validation runs measured beyond that.
// An internal header of strait_train. Thread-safety: pure functions over their arguments.
// Errors: InvalidArgument for a request that no plan can meet (naming why) or a malformed plan
// file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "scheduler/schedule.h"
#include "train/plan_profile.h"
#include "train/train_config.h"

namespace strait::train {

// One candidate plan: the strait train flags it sets.
struct Plan {
  int stages = 1, replicas = 1, chunks = 1;
  sched::ScheduleKind schedule = sched::ScheduleKind::OneFOneB;
  int microbatches = 1, microbatch_size = 1;
  ActivationOffload activations = ActivationOffload::None;
  offload::OptimizerOffload optimizer = offload::OptimizerOffload::Cpu;
  std::string codec = "none";  // gradient codec ("none": uncompressed)
  int outer_steps = 0;         // DiLoCo's H (0: plain data parallel)
  std::string outer_codec = "none";
  // Layers of each model stage (stages x chunks, model-stage order); empty: the even split.
  std::vector<int> stage_layers;
  // World rank of each (replica, stage) slot, replica-major (train/placement.h); empty: the
  // identity, rank = replica * stages + stage.
  std::vector<int> placement;

  // "2x2 1f1b M=4 b=4 ..." ("layers=3,1": uneven; "place=0,2,1,3": not the identity).
  [[nodiscard]] std::string describe() const;
};

// DiLoCo plans need this many outer rounds in the run: held-out loss against data parallelism
// measured +6.3% at 2 rounds (H = 32, 60 steps, WAN testbed), +2.3% at 30 (H = 10, 300 steps) and
// +1.6 .. +4.3% at 20 (H = 50, 1000 steps): docs/results/diloco.md, docs/commands/plan.md.
inline constexpr int kMinOuterRounds = 30;

// The share of a waiting rank's time that loads shared cores until validation runs learn it
// (Learned::wait_load): 4 ranks on 2 cores learned 0.2 and 0.3 (docs/commands/plan.md); with 0,
// bubble-heavy pipelines looked free and a fresh profile chose one 29% slower than the best.
inline constexpr double kDefaultWaitLoad = 0.25;

// What validation assumes before any run for ranks on `sites` sites: Learned's defaults (machine
// A's loopback fits: UCX over shared memory) on one site; across sites (TCP between the WAN
// testbed's namespaces) the memory beyond the model that its three fits found on 12-07 (+2.4 -
// 2.9 MiB, a pipeline -4.5 .. +0.5, +2.0 - 4.0 a model stage, +7.1 - 9.8 with NVMe, +3.6 - 7.0 with
// CPU activation offload; docs/commands/plan.md).
Learned default_learned(int sites);

// The memory validation runs measured beyond the model for a plan of `model_stages` (stages x
// chunks) with this activation offload.
double memory_extra(const Learned& l, int model_stages, ActivationOffload activations);

// What the search may choose from, and for what.
struct PlanRequest {
  int ranks = 4;
  sched::GptConfig model;
  int batch = 32;  // sequences per step, all replicas together
  int threads = 1;
  double memory_per_rank = 0;       // bytes; 0: no limit
  std::vector<std::string> codecs;  // allowed gradient codecs, "none" first
  std::vector<int> outer_steps;     // DiLoCo H values to try when there are several sites
  int train_steps = 600;            // the run's steps: H only where steps / H >= kMinOuterRounds
  std::vector<std::string> outer_codecs;
  int max_microbatches = 32;
  PlanLinks links;  // world ranks; site per rank
  // Compute speed of each world rank against the profile's (1: as profiled, 0.5: half as fast, e.g.
  // a site limited to half a core); empty: all 1. Unlike speeds make the search also try the
  // split that balances the stages' times (balanced_stage_layers).
  std::vector<double> rank_speed;

  [[nodiscard]] int site_count() const;  // distinct sites in links.site
  // The speed of world rank `rank` (1 when rank_speed is empty), and whether any differs.
  [[nodiscard]] double speed(int rank) const;
  [[nodiscard]] bool unlike_speeds() const;
};

struct Prediction {
  double step_s = 0, tokens_per_s = 0;
  double compute_s = 0, bubble_s = 0, link_s = 0, disk_s = 0;  // the step's parts
  double load = 1;         // compute stretch for shared cores (and what was learned)
  double concurrency = 1;  // mean busy threads over the makespan, all replicas, unstretched
  double profiled_stage_compute = 0;  // mean per model stage F+B+W per microbatch, unstretched
  double peak_memory = 0;             // bytes, the largest rank
  double weights = 0, optimizer = 0, activations = 0, other = 0;  // of that rank
  double cross_site_bytes = 0;                                    // per step
  std::string bottleneck;                                         // compute, bubble, link or disk
};

struct ScoredPlan {
  Plan plan;
  Prediction predicted;
};

// The layers of model stage v of `plan` for a model of `layers` layers (its stage_layers, or
// model/transformer.h's even split).
int stage_layers(const Plan& plan, int layers, int v);

// The split of `plan`'s model stages that minimises the slowest stage's F+B+W (the profiled
// per-block and embedding / head costs at its microbatch size, divided by the speed of the slowest
// replica's rank holding the stage): Holmes's uneven split for unlike ranks. Exact (dynamic
// programming over stages x layers). InvalidArgument when the profile lacks the costs.
std::vector<int> balanced_stage_layers(const Plan& plan, const PlanRequest& request,
                                       const PlanProfile& profile);

// The placements of `plan`'s stages x replicas slots worth pricing on the request's ranks: the
// identity first and, when the ranks' speeds or sites differ, the ranks grouped into stages (the
// slowest together: a stage's speed is its slowest replica's, so one slow rank per stage slows
// every stage) or into pipelines, in site or speed order, each grouping with its groups given to
// the stages in every order that matters (which group takes the first and the last stage, the
// rest by speed either way). Ranks of one speed and site are interchangeable, so placements that
// give every slot the same (speed, site) are priced once.
std::vector<std::vector<int>> candidate_placements(const Plan& plan, const PlanRequest& request);

// The schedule strait train runs for the plan (with its offload; zero-bubble schedules list-
// scheduled with the default costs, as strait train does).
sched::Schedule plan_schedule(const Plan& plan);

// Prices one plan; InvalidArgument when the profile lacks its microbatch size or shape.
Prediction predict(const Plan& plan, const PlanRequest& request, const PlanProfile& profile);

// Every valid plan within the request, priced, fitting memory_per_rank, fastest first. Pruned:
// the optimizer state stays in RAM when it fits (nvme is never faster), and the codec is the
// fastest allowed one for the plan's all-reduce (it is priced apart from the pipeline).
// InvalidArgument when none fits (naming the smallest peak found).
std::vector<ScoredPlan> search_plans(const PlanRequest& request, const PlanProfile& profile);

// The microbatch sizes the search may use (divisors of the per-replica batch).
std::vector<int> candidate_microbatch_sizes(const PlanRequest& request);

// One sentence: why `best` beat `runner_up` (the parts of their predicted steps that differ most).
std::string why_better(const ScoredPlan& best, const ScoredPlan& runner_up);

// strait train's flags for the plan ("--stages", "2", ...).
std::vector<std::string> plan_train_args(const Plan& plan);
// Sets the plan's fields of a TrainConfig (the model shape and batch are the caller's).
void apply_plan(const Plan& plan, TrainConfig& config);

// The plan file `strait plan --output` writes and `strait train --plan FILE` reads.
nlohmann::json plan_to_json(const ScoredPlan& plan, const PlanRequest& request);
Plan plan_from_json(const nlohmann::json& j);
Plan read_plan_file(const std::filesystem::path& path);

// What a run of `plan` measured: its median step (seconds), the largest rank's peak memory growth
// (bytes, 0: not measured) and, when traced, its per-stage costs; updates the profile's Learned
// for the plan's world so the next prediction is closer. Returns the updated entry.
struct RunMeasurement {
  double step_s = 0;
  double peak_memory = 0;
  // From the trace: mean F+B+W per microbatch per model stage (seconds), and mean send / recv
  // occupancy and link latency; negative when absent.
  double compute_per_stage_s = -1, send_s = -1, recv_s = -1, latency_s = -1;
  std::string source;
};
Learned learn_from_runs(PlanProfile& profile, const PlanRequest& request,
                        const std::vector<std::pair<Plan, RunMeasurement>>& runs);

}  // namespace strait::train
