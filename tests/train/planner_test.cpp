// The planner (train/planner.h) on hand-made profiles: step times and memory checked against
// figures worked out by hand, the search's plans all valid and within the memory limit, the plan
// file round trip, and learning from measured runs.
#include "train/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "scheduler/schedule_validate.h"

namespace strait::train {
namespace {

// Every block costs F = B = W = 1 ms, the embedding and head nothing; one slot of a block's stash
// is 1 MiB; AdamW, codecs and links free (latency 0, bandwidth 1e18 B/s).
PlanRequest request(int ranks, int layers, int batch) {
  PlanRequest r;
  r.ranks = ranks;
  r.model.layers = layers;
  r.model.dim = 16;
  r.model.heads = 2;
  r.model.ctx = 8;
  r.batch = batch;
  r.threads = 1;
  r.codecs = {"none"};
  r.links.latency_s.assign(static_cast<std::size_t>(ranks),
                           std::vector<double>(static_cast<std::size_t>(ranks), 0.0));
  r.links.bandwidth.assign(static_cast<std::size_t>(ranks),
                           std::vector<double>(static_cast<std::size_t>(ranks), 1e18));
  r.links.site.assign(static_cast<std::size_t>(ranks), 0);
  return r;
}

// Ranks labelled with `sites`, the links between two sites at `bandwidth` bytes/s.
void sites_joined_at(PlanRequest& r, std::vector<int> sites, double bandwidth) {
  r.links.site = std::move(sites);
  for (std::size_t i = 0; i < r.links.site.size(); ++i) {
    for (std::size_t j = 0; j < r.links.site.size(); ++j) {
      if (r.links.site[i] != r.links.site[j]) r.links.bandwidth[i][j] = bandwidth;
    }
  }
}

PlanProfile profile(const PlanRequest& r, int cores) {
  PlanProfile p;
  p.cores = cores;
  p.memcpy_bytes_per_s = 1e10;
  p.disk_read_bytes_per_s = p.disk_write_bytes_per_s = 1e9;
  ShapeCosts s;
  s.adamw_s_per_param = 0;
  for (int b = 1; b <= 64; ++b) {
    MicrobatchCosts c;
    c.block = {1e-3, 1e-3, 1e-3};
    c.block_stash = 1 << 20;
    s.sizes[b] = c;
  }
  p.shapes[shape_key(r.model, r.threads)] = s;
  p.codecs["none"] = {0, 0, 4};
  return p;
}

Plan plan(int P, int R, sched::ScheduleKind kind, int M, int b, int V = 1) {
  Plan p;
  p.stages = P;
  p.replicas = R;
  p.schedule = kind;
  p.chunks = V;
  p.microbatches = M;
  p.microbatch_size = b;
  return p;
}

TEST(Planner, HandCheckedPipelineStep) {
  // 2 stages of one block, 4 microbatches: 1F1B and GPipe take (M + P - 1)(f + b + w) =
  // 5 x 3 ms = 15 ms. Busy 12 ms per rank over 15 ms on 2 cores: no stretch.
  const PlanRequest r = request(2, 2, 4);
  const PlanProfile prof = profile(r, 2);
  for (const auto kind : {sched::ScheduleKind::OneFOneB, sched::ScheduleKind::GPipe}) {
    const Prediction x = predict(plan(2, 1, kind, 4, 1), r, prof);
    EXPECT_NEAR(x.step_s, 15e-3, 1e-9) << sched::schedule_kind_name(kind);
    EXPECT_NEAR(x.compute_s, 12e-3, 1e-9);
    EXPECT_NEAR(x.bubble_s, 3e-3, 1e-9);
    EXPECT_NEAR(x.load, 1.0, 1e-12);
    EXPECT_NEAR(x.tokens_per_s, 4.0 * 8 / 15e-3, 1e-6);
  }
  // Rank 0's stash slots: 1F1B holds P = 2, GPipe M = 4 (1 MiB each).
  EXPECT_NEAR(predict(plan(2, 1, sched::ScheduleKind::OneFOneB, 4, 1), r, prof).activations,
              2.0 * (1 << 20), 1.0);
  EXPECT_NEAR(predict(plan(2, 1, sched::ScheduleKind::GPipe, 4, 1), r, prof).activations,
              4.0 * (1 << 20), 1.0);
}

TEST(Planner, SharedCoresStretchCompute) {
  // 2 replicas of one stage (both blocks) on 1 core: each replica computes 4 microbatches x 2
  // blocks x 3 ms = 24 ms, both at once, so the step takes twice that; on 2 cores 24 ms.
  const PlanRequest r = request(2, 2, 8);
  const Prediction one_core =
      predict(plan(1, 2, sched::ScheduleKind::OneFOneB, 4, 1), r, profile(r, 1));
  EXPECT_NEAR(one_core.load, 2.0, 1e-9);
  EXPECT_NEAR(one_core.step_s, 48e-3, 1e-9);
  const Prediction two_cores =
      predict(plan(1, 2, sched::ScheduleKind::OneFOneB, 4, 1), r, profile(r, 2));
  EXPECT_NEAR(two_cores.step_s, 24e-3, 1e-9);
}

TEST(Planner, WaitingRanksThatPollLoadTheCores) {
  // 2 stages of one block, 4 microbatches, 1F1B on 1 core: each rank computes 12 ms of the 15 ms
  // step and waits 3. Waiting free: load (12 + 12) / 15 = 1.6, step 1.6 x 15 = 24 ms. Waiting
  // that polls (load 1): (24 + 6) / 15 = 2, step 30 ms.
  const PlanRequest r = request(2, 2, 4);
  PlanProfile prof = profile(r, 1);
  const Plan p = plan(2, 1, sched::ScheduleKind::OneFOneB, 4, 1);
  Learned& l = prof.learned[learned_key(r.ranks, r.threads, r.site_count())];
  l.runs = 1;
  l.effective_cores = 1;
  EXPECT_NEAR(predict(p, r, prof).step_s, 24e-3, 1e-9);
  l.wait_load = 1;
  EXPECT_NEAR(predict(p, r, prof).load, 2.0, 1e-9);
  EXPECT_NEAR(predict(p, r, prof).step_s, 30e-3, 1e-9);
}

TEST(Planner, HalfSpeedRankGetsFewerLayers) {
  // 2 ranks, 6 blocks of F = B = W = 1 ms, rank 1 at half speed. The even split 3,3 costs rank 0
  // 9 ms and rank 1 18 ms per microbatch; 4,2 costs both 12 ms, the best any split does. 1F1B with
  // one microbatch of 4 runs F0 F1 B1 B0 in turn: even 3 + 6 + 12 + 6 = 27 ms, balanced
  // 4 + 4 + 8 + 8 = 24 ms; with 4 microbatches (M + P - 1) x 12 = 60 ms balanced, and even rank 1
  // computes 4 x 18 ms after rank 0's first F (3 ms) and before its last B (6 ms): 81 ms.
  PlanRequest r = request(2, 6, 4);
  r.rank_speed = {1.0, 0.5};
  const PlanProfile prof = profile(r, 2);
  Plan one = plan(2, 1, sched::ScheduleKind::OneFOneB, 1, 4);
  EXPECT_EQ(balanced_stage_layers(one, r, prof), (std::vector<int>{4, 2}));
  EXPECT_NEAR(predict(one, r, prof).step_s, 27e-3, 1e-9);
  Plan four = plan(2, 1, sched::ScheduleKind::OneFOneB, 4, 1);
  EXPECT_NEAR(predict(four, r, prof).step_s, 81e-3, 1e-9);
  four.stage_layers = {4, 2};
  EXPECT_NEAR(predict(four, r, prof).step_s, 60e-3, 1e-9);
  one.stage_layers = {4, 2};
  EXPECT_NEAR(predict(one, r, prof).step_s, 24e-3, 1e-9);
  // The search finds such splits, and says so in the plan, its flags and its file. Its best is
  // ZB-V (rank 0 holds model stages 0 and 3, rank 1 stages 1 and 2) at 2,1,1,2: every stage 6 ms
  // per microbatch, rank 1 holds 2 layers and rank 0 4, in 18 ms (data parallel waits for the
  // slow replica: one microbatch of 2 through 6 blocks at half speed, 36 ms).
  const auto plans = search_plans(r, prof);
  ASSERT_FALSE(plans.empty());
  const Plan& best = plans.front().plan;
  EXPECT_EQ(best.describe(), "2x1 zbv M=1 b=4 layers=2,1,1,2");
  EXPECT_NEAR(plans.front().predicted.step_s, 18e-3, 1e-9);
  const auto args = plan_train_args(best);
  EXPECT_NE(std::find(args.begin(), args.end(), "2,1,1,2"), args.end());
  EXPECT_EQ(plan_from_json(plan_to_json(plans.front(), r)).stage_layers, best.stage_layers);
  // Among 1F1B plans of one microbatch the balanced 4,2 is the best.
  const auto ofob = std::find_if(plans.begin(), plans.end(), [](const ScoredPlan& p) {
    return p.plan.schedule == sched::ScheduleKind::OneFOneB && p.plan.microbatches == 1 &&
           p.plan.stages == 2;
  });
  ASSERT_NE(ofob, plans.end());
  EXPECT_EQ(ofob->plan.stage_layers, (std::vector<int>{4, 2}));
  // The slow rank first: the split turns round. Like ranks: the even split, and no uneven plans.
  r.rank_speed = {0.5, 1.0};
  EXPECT_EQ(balanced_stage_layers(one, r, prof), (std::vector<int>{2, 4}));
  r.rank_speed = {};
  for (const auto& p : search_plans(r, prof)) EXPECT_TRUE(p.plan.stage_layers.empty());
  // With 2 replicas of 2 stages the slowest replica sets each pipeline rank's speed.
  PlanRequest dp = request(4, 6, 8);
  dp.rank_speed = {1.0, 1.0, 1.0, 0.5};  // rank 3 = replica 1's stage 1
  const PlanProfile dprof = profile(dp, 4);
  EXPECT_EQ(balanced_stage_layers(plan(2, 2, sched::ScheduleKind::OneFOneB, 1, 4), dp, dprof),
            (std::vector<int>{4, 2}));
}

// The ranks of pipeline rank s of `p` (its replicas' world ranks, train/placement.h).
std::set<int> stage_ranks(const Plan& p, int s) {
  std::set<int> out;
  for (int k = 0; k < p.replicas; ++k) out.insert(placement_rank(p.placement, p.stages, k, s));
  return out;
}

TEST(Planner, PlacementGroupsTheSlowRanksOnTheShortStage) {
  // 4 ranks, 6 blocks of F = B = W = 1 ms, ranks 0 and 1 at half speed; 2 stages x 2 replicas,
  // 1F1B with 4 microbatches of 1. A stage runs at its slowest replica's speed. The identity puts
  // rank 0 on stage 0 and rank 1 on stage 1, so both stages are slow: the split stays 3,3, each
  // stage 3 x 3 ms / 0.5 = 18 ms per microbatch, (M + P - 1) x 18 = 90 ms. Placing ranks 0 and 1
  // together on one stage leaves the other fast, and the split balanced for it gives the slow
  // stage 2 layers (2 x 3 / 0.5 = 12 ms) and the fast one 4 (12 ms): 5 x 12 = 60 ms, 30 ms
  // faster. (Busy 2 x 48 ms per replica over 60 ms on 4 cores for 2 replicas: no stretch.)
  PlanRequest r = request(4, 6, 8);
  r.rank_speed = {0.5, 0.5, 1.0, 1.0};
  const PlanProfile prof = profile(r, 4);
  Plan identity = plan(2, 2, sched::ScheduleKind::OneFOneB, 4, 1);
  EXPECT_EQ(balanced_stage_layers(identity, r, prof), (std::vector<int>{3, 3}));
  EXPECT_NEAR(predict(identity, r, prof).step_s, 90e-3, 1e-9);
  Plan placed = identity;
  placed.placement = {0, 2, 1, 3};  // stage 0: ranks 0 and 1
  EXPECT_EQ(balanced_stage_layers(placed, r, prof), (std::vector<int>{2, 4}));
  placed.stage_layers = {2, 4};
  EXPECT_NEAR(predict(placed, r, prof).step_s, 60e-3, 1e-9);
  // The candidates hold such a placement; the identity is first, and no two give every slot the
  // same speed.
  const auto candidates = candidate_placements(identity, r);
  ASSERT_GE(candidates.size(), 2U);
  EXPECT_TRUE(candidates.front().empty());
  EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
    Plan q = identity;
    q.placement = c;
    return stage_ranks(q, 0) == std::set<int>{0, 1} || stage_ranks(q, 1) == std::set<int>{0, 1};
  }));
  // The search finds it, jointly with the split: its best 2x2 1F1B plan of 4 microbatches puts
  // ranks 0 and 1 on one stage with 2 layers, in 60 ms; the identity's is the 90 ms one.
  const auto plans = search_plans(r, prof);
  const auto is_layout = [](const ScoredPlan& p, bool identity_placed) {
    return p.plan.stages == 2 && p.plan.replicas == 2 && p.plan.microbatches == 4 &&
           p.plan.schedule == sched::ScheduleKind::OneFOneB &&
           p.plan.activations == ActivationOffload::None &&
           identity_placement(p.plan.placement) == identity_placed;
  };
  const auto best = std::find_if(plans.begin(), plans.end(),
                                 [&](const ScoredPlan& p) { return is_layout(p, false); });
  ASSERT_NE(best, plans.end());
  EXPECT_NEAR(best->predicted.step_s, 60e-3, 1e-9) << best->plan.describe();
  const int slow = stage_ranks(best->plan, 0) == std::set<int>{0, 1} ? 0 : 1;
  EXPECT_EQ(stage_ranks(best->plan, slow), (std::set<int>{0, 1})) << best->plan.describe();
  EXPECT_EQ(best->plan.stage_layers.at(static_cast<std::size_t>(slow)), 2);
  const auto plain = std::find_if(plans.begin(), plans.end(),
                                  [&](const ScoredPlan& p) { return is_layout(p, true); });
  ASSERT_NE(plain, plans.end());
  EXPECT_NEAR(plain->predicted.step_s, 90e-3, 1e-9) << plain->plan.describe();
  // The plan names it, its flags pass it to strait train, and its file keeps it.
  EXPECT_NE(best->plan.describe().find(" place="), std::string::npos);
  const auto args = plan_train_args(best->plan);
  const auto flag = std::find(args.begin(), args.end(), "--placement");
  ASSERT_NE(flag, args.end());
  std::string listed;
  for (const int rank : best->plan.placement)
    listed += (listed.empty() ? "" : ",") + std::to_string(rank);
  EXPECT_EQ(*(flag + 1), listed);
  const Plan back = plan_from_json(plan_to_json(*best, r));
  EXPECT_EQ(back.placement, best->plan.placement);
  TrainConfig c;
  apply_plan(back, c);
  EXPECT_EQ(c.placement, best->plan.placement);
  // Like ranks on one site: the identity only.
  r.rank_speed = {};
  EXPECT_EQ(candidate_placements(identity, r).size(), 1U);
  for (const auto& p : search_plans(r, prof)) EXPECT_TRUE(p.plan.placement.empty());
}

TEST(Planner, PlacementKeepsTheSlowLinkForTheCheaperTraffic) {
  // Sites 0,1,0,1 with 10 ms between them (free inside a site): the identity runs each pipeline
  // across the sites (its activations and the tied embedding's sum cross at every microbatch);
  // placing a pipeline inside each site leaves only the two stages' gradient rings crossing.
  PlanRequest r = request(4, 2, 8);
  r.links.site = {0, 1, 0, 1};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (r.links.site[static_cast<std::size_t>(i)] != r.links.site[static_cast<std::size_t>(j)])
        r.links.latency_s[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = 10e-3;
    }
  }
  const PlanProfile prof = profile(r, 4);
  const Plan identity = plan(2, 2, sched::ScheduleKind::OneFOneB, 4, 1);
  const auto candidates = candidate_placements(identity, r);
  const auto inside = std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) {
    if (c.empty()) return false;
    Plan q = identity;
    q.placement = c;
    for (int k = 0; k < 2; ++k) {
      const int a = placement_rank(c, 2, k, 0), b = placement_rank(c, 2, k, 1);
      if (r.links.site[static_cast<std::size_t>(a)] != r.links.site[static_cast<std::size_t>(b)])
        return false;
    }
    return true;
  });
  ASSERT_NE(inside, candidates.end());
  Plan placed = identity;
  placed.placement = *inside;
  const Prediction across = predict(identity, r, prof), within = predict(placed, r, prof);
  EXPECT_LT(within.step_s, across.step_s);
  EXPECT_GT(across.cross_site_bytes, 0);
  const auto plans = search_plans(r, prof);
  const auto best = std::find_if(plans.begin(), plans.end(), [](const ScoredPlan& p) {
    return p.plan.stages == 2 && p.plan.replicas == 2 && p.plan.microbatches == 4 &&
           p.plan.schedule == sched::ScheduleKind::OneFOneB && p.plan.outer_steps == 0;
  });
  ASSERT_NE(best, plans.end());
  EXPECT_FALSE(best->plan.placement.empty()) << best->plan.describe();
  EXPECT_LE(best->predicted.step_s, within.step_s + 1e-12);
}

TEST(Planner, PlacementKeepsTheGradientRingsInsideSitesWhenTheyAreTheHeavierTraffic) {
  // The reverse: sites 0,0,1,1 joined by 100 kB/s (no latency). The identity keeps each pipeline
  // inside a site, so both stages' gradient rings (about 70 kB per stage of 4 blocks and the
  // embeddings: 0.7 s) cross; a stage's replicas inside a site leave only the activations (512 B
  // per microbatch and direction) and the tied embedding's sum (2 x 16 kB: 0.33 s) crossing.
  PlanRequest r = request(4, 8, 8);
  sites_joined_at(r, {0, 0, 1, 1}, 1e5);
  const PlanProfile prof = profile(r, 4);
  const Plan identity = plan(2, 2, sched::ScheduleKind::OneFOneB, 4, 1);
  const auto same_site = [&](const std::set<int>& ranks) {
    std::set<int> sites;
    for (const int k : ranks) sites.insert(r.links.site[static_cast<std::size_t>(k)]);
    return sites.size() == 1;
  };
  const auto candidates = candidate_placements(identity, r);
  const auto inside = std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) {
    Plan q = identity;
    q.placement = c;
    return !c.empty() && same_site(stage_ranks(q, 0)) && same_site(stage_ranks(q, 1));
  });
  ASSERT_NE(inside, candidates.end());
  Plan placed = identity;
  placed.placement = *inside;
  const Prediction across = predict(identity, r, prof), within = predict(placed, r, prof);
  EXPECT_LT(within.step_s + 0.3, across.step_s);
  EXPECT_LT(within.cross_site_bytes, across.cross_site_bytes);
  const auto plans = search_plans(r, prof);
  const auto best = std::find_if(plans.begin(), plans.end(), [](const ScoredPlan& p) {
    return p.plan.stages == 2 && p.plan.replicas == 2 && p.plan.microbatches == 4 &&
           p.plan.schedule == sched::ScheduleKind::OneFOneB && p.plan.outer_steps == 0 &&
           p.plan.activations == ActivationOffload::None;
  });
  ASSERT_NE(best, plans.end());
  EXPECT_TRUE(same_site(stage_ranks(best->plan, 0)) && same_site(stage_ranks(best->plan, 1)))
      << best->plan.describe();
}

TEST(Planner, LearnsTheMemoryBeyondTheModelByModelStagesAndActivationOffload) {
  // Peaks made by 6 MiB + 3 MiB for a pipeline + 7 MiB per model stage after the first + 10 MiB
  // with NVMe activations + 4 MiB with CPU ones, over one-, two- and four-stage plans with each
  // activation offload: learning finds the five terms.
  const PlanRequest r = request(4, 4, 16);
  PlanProfile truth = profile(r, 4);
  Learned& t = truth.learned[learned_key(r.ranks, r.threads, r.site_count())];
  t.runs = 1;
  t.memory_extra_bytes = 6.0 * (1 << 20);
  t.memory_extra_pipeline_bytes = 3.0 * (1 << 20);
  t.memory_extra_per_stage_bytes = 7.0 * (1 << 20);
  t.memory_extra_nvme_bytes = 10.0 * (1 << 20);
  t.memory_extra_cpu_bytes = 4.0 * (1 << 20);
  std::vector<std::pair<Plan, RunMeasurement>> runs;
  for (auto p : {plan(1, 4, sched::ScheduleKind::OneFOneB, 4, 1),
                 plan(2, 2, sched::ScheduleKind::OneFOneB, 4, 2),
                 plan(2, 2, sched::ScheduleKind::GPipe, 8, 1),
                 plan(4, 1, sched::ScheduleKind::OneFOneB, 8, 2),
                 plan(4, 1, sched::ScheduleKind::GPipe, 16, 1)}) {
    for (const auto act :
         {ActivationOffload::None, ActivationOffload::Nvme, ActivationOffload::Cpu}) {
      p.activations = act;
      RunMeasurement m;
      m.step_s = predict(p, r, truth).step_s;
      m.peak_memory = predict(p, r, truth).peak_memory;
      runs.emplace_back(p, m);
    }
  }
  PlanProfile prof = profile(r, 4);
  const Learned l = learn_from_runs(prof, r, runs);
  EXPECT_NEAR(l.memory_extra_bytes, 6.0 * (1 << 20), 1.0);
  EXPECT_NEAR(l.memory_extra_pipeline_bytes, 3.0 * (1 << 20), 1.0);
  EXPECT_NEAR(l.memory_extra_per_stage_bytes, 7.0 * (1 << 20), 1.0);
  EXPECT_NEAR(l.memory_extra_nvme_bytes, 10.0 * (1 << 20), 1.0);
  EXPECT_NEAR(l.memory_extra_cpu_bytes, 4.0 * (1 << 20), 1.0);
  for (const auto& [p, m] : runs) {
    EXPECT_NEAR(predict(p, r, prof).peak_memory, m.peak_memory, 1.0) << p.describe();
  }
  // Runs of one layout without activation offload fit the intercept only and keep the other terms.
  PlanProfile again = prof;
  const Learned k = learn_from_runs(again, r, {runs[3], runs[6]});
  EXPECT_NEAR(k.memory_extra_pipeline_bytes, 3.0 * (1 << 20), 1.0);
  EXPECT_NEAR(k.memory_extra_per_stage_bytes, 7.0 * (1 << 20), 1.0);
  EXPECT_NEAR(k.memory_extra_nvme_bytes, 10.0 * (1 << 20), 1.0);
  EXPECT_NEAR(k.memory_extra_cpu_bytes, 4.0 * (1 << 20), 1.0);
  EXPECT_NEAR(predict(runs[3].first, r, again).peak_memory, runs[3].second.peak_memory, 1.0);
  // One and two model stages alone cannot tell a pipeline's step from a stage's: one term takes
  // both, and every run is still predicted.
  PlanProfile two = profile(r, 4);
  const std::vector<std::pair<Plan, RunMeasurement>> short_runs = {runs[0], runs[1], runs[2],
                                                                   runs[3]};
  (void)learn_from_runs(two, r, short_runs);
  for (const auto& [p, m] : short_runs) {
    EXPECT_NEAR(predict(p, r, two).peak_memory, m.peak_memory, 1.0) << p.describe();
  }
}

TEST(Planner, DiLoCoOnlyWithEnoughOuterRoundsInTheRun) {
  // Two sites at 100 kB/s: DiLoCo's H = 8 and 32 are tried only where the run holds
  // kMinOuterRounds rounds of them (600 steps: H = 8 only; 60 steps: neither).
  PlanRequest r = request(4, 8, 8);
  sites_joined_at(r, {0, 0, 1, 1}, 1e5);
  r.outer_steps = {8, 32};
  r.outer_codecs = {"none"};
  const PlanProfile prof = profile(r, 4);
  const auto hs = [&](int steps) {
    r.train_steps = steps;
    std::set<int> out;
    for (const auto& p : search_plans(r, prof)) out.insert(p.plan.outer_steps);
    return out;
  };
  EXPECT_EQ(hs(1000), (std::set<int>{0, 8, 32}));
  EXPECT_EQ(hs(600), (std::set<int>{0, 8}));
  EXPECT_EQ(hs(60), (std::set<int>{0}));
}

TEST(Planner, PlanFileRefusesABadPlacement) {
  const PlanRequest r = request(4, 4, 16);
  ScoredPlan s{plan(2, 2, sched::ScheduleKind::OneFOneB, 4, 2), {}};
  nlohmann::json j = plan_to_json(s, r);
  EXPECT_EQ(j["plan"]["placement"], nlohmann::json({0, 1, 2, 3}));
  EXPECT_TRUE(plan_from_json(j).placement.empty());  // the identity
  j["plan"]["placement"] = {0, 1, 1, 3};
  try {
    (void)plan_from_json(j);
    ADD_FAILURE() << "a repeated rank was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the plan file's placement 0,1,1,3 is not a permutation"),
              std::string::npos)
        << e.what();
  }
}

TEST(Planner, SearchPicksValidPlansWithinMemory) {
  PlanRequest r = request(4, 4, 16);
  const PlanProfile prof = profile(r, 4);
  const auto plans = search_plans(r, prof);
  ASSERT_FALSE(plans.empty());
  for (const auto& p : plans) {
    EXPECT_NO_THROW(sched::validate_schedule(plan_schedule(p.plan))) << p.plan.describe();
    EXPECT_LE(plans.front().predicted.step_s, p.predicted.step_s);
  }
  // A limit between the smallest and the largest peak drops the plans over it.
  double lo = 1e30, hi = 0;
  for (const auto& p : plans) {
    lo = std::min(lo, p.predicted.peak_memory);
    hi = std::max(hi, p.predicted.peak_memory);
  }
  ASSERT_LT(lo, hi);
  r.memory_per_rank = 0.5 * (lo + hi);
  const auto limited = search_plans(r, prof);
  EXPECT_LT(limited.size(), plans.size() + 1);
  for (const auto& p : limited) EXPECT_LE(p.predicted.peak_memory, r.memory_per_rank);
  r.memory_per_rank = 1;  // nothing fits one byte
  EXPECT_THROW(search_plans(r, prof), Error);
}

TEST(Planner, PlanFileRoundTripsAndSetsTheConfig) {
  const PlanRequest r = request(4, 4, 16);
  ScoredPlan s{plan(2, 2, sched::ScheduleKind::Interleaved, 4, 2, 2), {}};
  s.plan.activations = ActivationOffload::Cpu;
  s.plan.codec = "int8";
  const auto path = std::filesystem::temp_directory_path() / "strait-planner-test.json";
  std::ofstream(path) << plan_to_json(s, r).dump();
  const Plan back = read_plan_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.describe(), s.plan.describe());
  TrainConfig c;
  apply_plan(back, c);
  EXPECT_EQ(c.stages, 2);
  EXPECT_EQ(c.replicas, 2);
  EXPECT_EQ(c.chunks, 2);
  EXPECT_EQ(c.microbatch_size, 2);
  EXPECT_EQ(c.codec, "int8");
  EXPECT_EQ(c.offload_activations, ActivationOffload::Cpu);
  EXPECT_THROW(read_plan_file("/nonexistent/plan.json"), Error);
}

TEST(Planner, LearnsFromMeasuredRuns) {
  // Runs that measured a step 1.5x the prediction and 1 MB more memory: after learning, the same
  // plans are predicted at what was measured.
  const PlanRequest r = request(2, 2, 8);
  PlanProfile prof = profile(r, 2);
  std::vector<std::pair<Plan, RunMeasurement>> runs;
  for (const int M : {2, 4, 8}) {
    const Plan p = plan(2, 1, sched::ScheduleKind::OneFOneB, M, 8 / M);
    const Prediction x = predict(p, r, prof);
    RunMeasurement m;
    m.step_s = 1.5 * x.step_s;
    m.compute_per_stage_s = 1.5 * x.profiled_stage_compute;
    m.peak_memory = x.peak_memory + 1e6;
    runs.emplace_back(p, m);
  }
  const Learned l = learn_from_runs(prof, r, runs);
  EXPECT_EQ(l.runs, 3);
  for (const auto& [p, m] : runs) {
    const Prediction x = predict(p, r, prof);
    EXPECT_NEAR(x.step_s, m.step_s, 0.01 * m.step_s) << p.describe();
    EXPECT_NEAR(x.peak_memory, m.peak_memory, 1.0) << p.describe();
  }
}

TEST(Planner, LearnsTheCoresAndTheWaitingLoadThatMadeTheSteps) {
  // Steps made by a machine of 1.5 effective cores whose waiting ranks load them 0.6 (pipelined
  // plans, with bubbles, and data parallel ones, without): learning from a fresh profile finds
  // the waiting load and predicts every step again.
  const PlanRequest r = request(4, 4, 16);
  PlanProfile truth = profile(r, 2);
  Learned& t = truth.learned[learned_key(r.ranks, r.threads, r.site_count())];
  t.runs = 1;
  t.effective_cores = 1.5;
  t.wait_load = 0.6;
  std::vector<std::pair<Plan, RunMeasurement>> runs;
  for (const auto& p : {plan(4, 1, sched::ScheduleKind::OneFOneB, 4, 4),
                        plan(4, 1, sched::ScheduleKind::GPipe, 16, 1),
                        plan(2, 2, sched::ScheduleKind::OneFOneB, 2, 4),
                        plan(2, 2, sched::ScheduleKind::OneFOneB, 8, 1),
                        plan(1, 4, sched::ScheduleKind::OneFOneB, 4, 1)}) {
    RunMeasurement m;
    m.step_s = predict(p, r, truth).step_s;
    runs.emplace_back(p, m);
  }
  PlanProfile prof = profile(r, 2);
  const Learned l = learn_from_runs(prof, r, runs);
  // (The cores and the step's scale trade against each other once every plan is stretched.)
  EXPECT_NEAR(l.wait_load, 0.6, 0.051);
  for (const auto& [p, m] : runs) {
    EXPECT_NEAR(predict(p, r, prof).step_s, m.step_s, 0.005 * m.step_s) << p.describe();
  }
}

}  // namespace
}  // namespace strait::train
