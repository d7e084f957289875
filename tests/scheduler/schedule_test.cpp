#include "scheduler/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "scheduler/schedule_print.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_validate.h"

namespace strait::sched {

// "F3" instead of the bytes in gtest's messages (found by ADL in Action's namespace).
void PrintTo(const Action& a, std::ostream* os) {
  *os << to_string(a);
}

namespace {

using K = ActionKind;

// Parses "F0 SEND_F0 RECV_B1 ALLREDUCE_GRAD OPTIM" for `stage`; written independently of
// to_string() so the expectations below are spelled out by hand.
std::vector<Action> parse(int stage, const std::string& text) {
  static const std::vector<std::pair<std::string, K>> kinds = {{"SEND_F", K::SendF},
                                                               {"RECV_F", K::RecvF},
                                                               {"SEND_B", K::SendB},
                                                               {"RECV_B", K::RecvB},
                                                               {"ALLREDUCE_GRAD", K::AllreduceGrad},
                                                               {"OPTIM", K::Optim},
                                                               {"OFFLOAD", K::Offload},
                                                               {"RELOAD", K::Reload},
                                                               {"F", K::F},
                                                               {"B", K::B}};
  std::vector<Action> out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t j = std::min(text.find(' ', i), text.size());
    const std::string tok = text.substr(i, j - i);
    i = j + 1;
    for (const auto& [name, kind] : kinds) {
      if (tok.rfind(name, 0) == 0) {
        const std::string rest = tok.substr(name.size());
        out.push_back({kind, stage, rest.empty() ? kNoMicrobatch : std::stoi(rest)});
        break;
      }
    }
  }
  return out;
}

Schedule from_text(int microbatches, const std::vector<std::string>& stages) {
  Schedule s;
  s.stages = static_cast<int>(stages.size());
  s.microbatches = microbatches;
  for (std::size_t r = 0; r < stages.size(); ++r) {
    s.ranks.push_back(parse(static_cast<int>(r), stages[r]));
  }
  return s;
}

std::string validation_error(const Schedule& s) {
  try {
    validate_schedule(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "validate_schedule accepted an invalid schedule";
  return {};
}

// Calls check(kind, P, M) for GPipe and 1F1B over P = 1..4 stages and M = 1..8 microbatches, with
// the point in the failure trace.
void for_each_grid_point(const std::function<void(ScheduleKind, int, int)>& check) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int P = 1; P <= 4; ++P) {
      for (int M = 1; M <= 8; ++M) {
        SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " P=" + std::to_string(P) +
                     " M=" + std::to_string(M));
        check(kind, P, M);
      }
    }
  }
}

TEST(Schedule, GPipeTwoStagesThreeMicrobatchesExactly) {
  const Schedule got = make_gpipe(2, 3);
  const Schedule want = from_text(
      3,
      {"F0 SEND_F0 F1 SEND_F1 F2 SEND_F2 RECV_B2 B2 RECV_B1 B1 RECV_B0 B0 ALLREDUCE_GRAD OPTIM",
       "RECV_F0 F0 RECV_F1 F1 RECV_F2 F2 B2 SEND_B2 B1 SEND_B1 B0 SEND_B0 ALLREDUCE_GRAD OPTIM"});
  EXPECT_EQ(got.stages, 2);
  EXPECT_EQ(got.microbatches, 3);
  ASSERT_EQ(got.ranks.size(), 2U);
  EXPECT_EQ(got.ranks[0], want.ranks[0]);
  EXPECT_EQ(got.ranks[1], want.ranks[1]);
}

TEST(Schedule, OneFOneBTwoStagesThreeMicrobatchesExactly) {
  const Schedule got = make_1f1b(2, 3);
  // Stage 0: one warm-up forward, then F/B pairs, then the last backward.
  const Schedule want = from_text(
      3,
      {"F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 F2 SEND_F2 RECV_B1 B1 RECV_B2 B2 ALLREDUCE_GRAD OPTIM",
       "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1 RECV_F2 F2 B2 SEND_B2 ALLREDUCE_GRAD OPTIM"});
  ASSERT_EQ(got.ranks.size(), 2U);
  EXPECT_EQ(got.ranks[0], want.ranks[0]);
  EXPECT_EQ(got.ranks[1], want.ranks[1]);
}

TEST(Schedule, OneFOneBWarmupIsCappedByMicrobatches) {
  // P=4, M=2: stage 0 would warm up with 3 forwards but only 2 exist.
  const Schedule s = make_1f1b(4, 2);
  const Schedule want = from_text(2, {"F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1 ALLREDUCE_GRAD "
                                      "OPTIM"});
  EXPECT_EQ(s.ranks[0], want.ranks[0]);
}

TEST(Schedule, GeneratorsAreValidOverAGrid) {
  for_each_grid_point([](ScheduleKind kind, int P, int M) {
    const Schedule s = make_schedule(kind, P, M);
    EXPECT_NO_THROW(validate_schedule(s));
    for (int st = 0; st < P; ++st) {
      const auto& list = s.ranks[static_cast<std::size_t>(st)];
      ASSERT_GE(list.size(), 2U);
      EXPECT_EQ(list[list.size() - 2].kind, K::AllreduceGrad);
      EXPECT_EQ(list.back().kind, K::Optim);
      const int want = kind == ScheduleKind::GPipe ? M : std::min(P - st, M);
      EXPECT_EQ(peak_stashed_microbatches(s, st), want) << "stage " << st;
    }
  });
}

TEST(Schedule, BubbleFractionMatchesClosedForm) {
  for_each_grid_point([](ScheduleKind kind, int P, int M) {
    const Schedule s = make_schedule(kind, P, M);
    const double want = static_cast<double>(P - 1) / static_cast<double>(M + P - 1);
    EXPECT_NEAR(bubble_fraction(s, 1.0, 1.0), want, 1e-12);
    for (double f : stage_bubble_fractions(s, 1.0, 1.0)) EXPECT_NEAR(f, want, 1e-12);
    // The makespan (M+P-1)(t_f+t_b) holds for any t_f, t_b (Narayanan et al. 2021, sec. 2.2).
    EXPECT_NEAR(simulate(s, 1.0, 2.0).makespan, (M + P - 1) * 3.0, 1e-12);
  });
}

TEST(Schedule, GPipeStartTimesFollowTheDiagonal) {
  // Unit costs: F(mb) on stage s starts at s + mb; B(mb) at (M+P-1) + (P-1-s) + (M-1-mb).
  const int P = 3;
  const int M = 4;
  const Timeline tl = simulate(make_gpipe(P, M), 1.0, 1.0);
  for (int s = 0; s < P; ++s) {
    for (const TimedAction& t : tl.stages[static_cast<std::size_t>(s)]) {
      const int mb = t.action.microbatch;
      if (t.action.kind == K::F) {
        EXPECT_DOUBLE_EQ(t.start, s + mb);
      } else if (t.action.kind == K::B) {
        EXPECT_DOUBLE_EQ(t.start, (M + P - 1) + (P - 1 - s) + (M - 1 - mb));
      }
    }
  }
  EXPECT_DOUBLE_EQ(tl.makespan, 2.0 * (M + P - 1));
}

TEST(Schedule, ValidatorAcceptsReceivesPostedEarly) {
  // All of stage 1's forward receives first: unusual but executable (stage 0 never blocks on it).
  const Schedule s =
      from_text(2, {"F0 SEND_F0 F1 SEND_F1 RECV_B1 B1 RECV_B0 B0 ALLREDUCE_GRAD OPTIM",
                    "RECV_F0 RECV_F1 F0 F1 B1 SEND_B1 B0 SEND_B0 ALLREDUCE_GRAD OPTIM"});
  EXPECT_NO_THROW(validate_schedule(s));
}

TEST(Schedule, ValidatorRejectsMissingReceive) {
  Schedule s = make_gpipe(2, 3);
  auto& st1 = s.ranks[1];
  st1.erase(std::find(st1.begin(), st1.end(), Action{K::RecvF, 1, 1}));
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("0SEND_F1 on rank 0 has no matching 1RECV_F1 on rank 1"), std::string::npos)
      << msg;
}

TEST(Schedule, ValidatorRejectsMissingSendAndDuplicates) {
  Schedule s = make_gpipe(2, 2);
  auto& st1 = s.ranks[1];
  st1.erase(std::find(st1.begin(), st1.end(), Action{K::SendB, 1, 0}));
  s.ranks[0].insert(s.ranks[0].begin(), Action{K::F, 0, 1});
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("0RECV_B0 on rank 0 has no matching 1SEND_B0 on rank 1"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 0 runs 0F1 2 times"), std::string::npos) << msg;
}

TEST(Schedule, ValidatorRejectsBackwardBeforeForward) {
  const Schedule s = from_text(2, {"B0 F0 F1 B1 ALLREDUCE_GRAD OPTIM"});
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("rank 0 runs 0B0 (action 0) before 0F0 (action 1)"), std::string::npos) << msg;
}

TEST(Schedule, ValidatorRejectsComputeBeforeItsReceive) {
  const Schedule s = from_text(1, {"F0 SEND_F0 RECV_B0 B0 ALLREDUCE_GRAD OPTIM",
                                   "F0 RECV_F0 B0 SEND_B0 ALLREDUCE_GRAD OPTIM"});
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("rank 1 runs 1F0 (action 0) before 1RECV_F0 (action 1)"), std::string::npos)
      << msg;
}

TEST(Schedule, ValidatorRejectsDeadlock) {
  // Both stages start by receiving: stage 0 waits for a gradient that needs its own activations.
  const Schedule s = from_text(1, {"RECV_B0 F0 SEND_F0 B0 ALLREDUCE_GRAD OPTIM",
                                   "RECV_F0 F0 B0 SEND_B0 ALLREDUCE_GRAD OPTIM"});
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 is blocked at action 0 (0RECV_B0) waiting for 1SEND_B0 from rank 1"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1 is blocked at action 0 (1RECV_F0) waiting for 0SEND_F0 from rank 0"),
            std::string::npos)
      << msg;
}

TEST(Schedule, ValidatorRejectsThreeStageDeadlock) {
  // Every per-stage order rule holds; only simulating the stages together finds the cycle.
  Schedule s = make_gpipe(3, 2);
  auto& st1 = s.ranks[1];
  // Stage 1 waits for B1's gradient before it sends forward microbatch 1.
  st1.erase(std::find(st1.begin(), st1.end(), Action{K::RecvB, 1, 1}));
  st1.insert(std::find(st1.begin(), st1.end(), Action{K::SendF, 1, 1}), Action{K::RecvB, 1, 1});
  const std::string msg = validation_error(s);
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 is blocked at action 4 (0RECV_B1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 is blocked at action 5 (1RECV_B1) waiting for 2SEND_B1 from rank 2"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 2 is blocked at action 2 (2RECV_F1)"), std::string::npos) << msg;
}

TEST(Schedule, ValidatorRejectsShapeErrors) {
  EXPECT_NE(validation_error(from_text(1, {"F0 SEND_F0 B0 ALLREDUCE_GRAD OPTIM"}))
                .find("SEND_F0) has no neighbour"),
            std::string::npos);
  EXPECT_NE(validation_error(from_text(1, {"F0 B0 F3 ALLREDUCE_GRAD OPTIM"}))
                .find("names microbatch 3, outside [0, 1)"),
            std::string::npos);
  EXPECT_NE(validation_error(from_text(2, {"F0 B0 ALLREDUCE_GRAD F1 B1 OPTIM"}))
                .find("runs ALLREDUCE_GRAD (action 2) before 0B1 (action 4)"),
            std::string::npos);
  EXPECT_NE(validation_error(from_text(1, {"F0 B0 ALLREDUCE_GRAD"})).find("0 OPTIM"),
            std::string::npos);
  Schedule wrong_stage = make_gpipe(2, 1);
  wrong_stage.ranks[1][1].stage = 0;
  EXPECT_NE(validation_error(wrong_stage)
                .find("rank 1 action 1 (0F0) runs stage 0, which lives on rank 0"),
            std::string::npos);
  Schedule no_lists = make_gpipe(2, 1);
  no_lists.ranks.pop_back();
  EXPECT_NE(validation_error(no_lists).find("one action list per rank"), std::string::npos);
}

TEST(Schedule, PrintsComputeOrderAndFullActions) {
  EXPECT_EQ(format_schedule(make_gpipe(2, 3)),
            "stage 0: F0 F1 F2 B2 B1 B0\nstage 1: F0 F1 F2 B2 B1 B0\n");
  EXPECT_EQ(format_schedule(make_1f1b(2, 2), ScheduleDetail::All),
            "stage 0: F0 SEND_F0 F1 SEND_F1 RECV_B0 B0 RECV_B1 B1 ALLREDUCE_GRAD OPTIM\n"
            "stage 1: RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1 ALLREDUCE_GRAD OPTIM\n");
}

TEST(Schedule, PrintsTimeline) {
  EXPECT_EQ(format_timeline(make_1f1b(2, 2)),
            "time    0  1  2  3  4  5\n"
            "stage 0 F0 F1 .  B0 .  B1\n"
            "stage 1 .  F0 B0 F1 B1 .\n"
            "bubble fraction 0.333 (per stage: 0.333 0.333) over 6 time units\n");
  // A backward of two units fills two columns.
  EXPECT_EQ(format_timeline(make_gpipe(1, 2), 1, 2),
            "time    0  1  2  3  4  5\n"
            "stage 0 F0 F1 B1 B1 B0 B0\n"
            "bubble fraction 0.000 (per stage: 0.000) over 6 time units\n");
  EXPECT_THROW(format_timeline(make_gpipe(1, 2), 0, 1), Error);
}

TEST(Schedule, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parse_schedule_kind("GPipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parse_schedule_kind("1F1B"), ScheduleKind::OneFOneB);
  try {
    (void)parse_schedule_kind("zb-h2");
    ADD_FAILURE() << "accepted an unknown name";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(
                  "'zb-h2': choose one of gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev"),
              std::string::npos)
        << e.what();
  }
}

// --- Pricing communication ----------------------------------------------------------------------

// 1F1B, P = 2, M = 2, fused backwards, every kind of action priced, worked out by hand:
//   stage 0: f 2, b 3, send 0.25, recv 0, link 1 + 100 bytes / 100 per unit = 2 (its SEND_Fs)
//   stage 1: f 2, b 3, send 0.25, recv 0.5, link 1.5 (its SEND_Bs)
//   ALLREDUCE_GRAD 1 after both ranks arrive (the tied embedding), OPTIM 0.5 likewise.
// rank 0: F0 [0,2] SEND_F0 [2,2.25] (arrives 4.25) F1 [2.25,4.25] SEND_F1 [4.25,4.5] (arrives 6.5)
//         RECV_B0 [4.5,11.5] (SEND_B0 ends 10, + 1.5) B0 [11.5,14.5] RECV_B1 [14.5,17.25]
//         B1 [17.25,20.25] ALLREDUCE_GRAD [20.25,21.25] OPTIM [21.25,21.75]
// rank 1: RECV_F0 [0,4.75] (arrives 4.25, + recv 0.5) F0 [4.75,6.75] B0 [6.75,9.75]
//         SEND_B0 [9.75,10] RECV_F1 [10,10.5] F1 [10.5,12.5] B1 [12.5,15.5] SEND_B1 [15.5,15.75]
//         (arrives 17.25) ALLREDUCE_GRAD [15.75,21.25] (waits for rank 0) OPTIM [21.25,21.75]
TEST(ScheduleSimCosts, TransfersAllreduceAndOptimFollowAHandComputedTimeline) {
  const Schedule s = make_1f1b(2, 2);
  std::vector<StageCosts> c(2);
  for (StageCosts& x : c) {
    x.compute = ActionCosts{2.0, 3.0, 0.0};
    x.send = 0.25;
    x.allreduce = 1.0;
    x.optim = 0.5;
  }
  c[0].link = LinkCosts{1.0, 100.0, 100.0};
  c[1].recv = 0.5;
  c[1].link = LinkCosts{1.5, 0.0, 0.0};
  const SyncGroups g = data_parallel_sync_groups(2);
  ASSERT_EQ(g.allreduce_grad, (std::vector<std::vector<int>>{{0, 1}}));
  ASSERT_EQ(g.optim, (std::vector<std::vector<int>>{{0, 1}}));
  const Timeline tl = simulate(s, c, g);
  struct Want {
    std::string action;
    double start, end;
  };
  const std::vector<std::vector<Want>> want = {{{"F0", 0, 2},
                                                {"SEND_F0", 2, 2.25},
                                                {"F1", 2.25, 4.25},
                                                {"SEND_F1", 4.25, 4.5},
                                                {"RECV_B0", 4.5, 11.5},
                                                {"B0", 11.5, 14.5},
                                                {"RECV_B1", 14.5, 17.25},
                                                {"B1", 17.25, 20.25},
                                                {"ALLREDUCE_GRAD", 20.25, 21.25},
                                                {"OPTIM", 21.25, 21.75}},
                                               {{"RECV_F0", 0, 4.75},
                                                {"F0", 4.75, 6.75},
                                                {"B0", 6.75, 9.75},
                                                {"SEND_B0", 9.75, 10},
                                                {"RECV_F1", 10, 10.5},
                                                {"F1", 10.5, 12.5},
                                                {"B1", 12.5, 15.5},
                                                {"SEND_B1", 15.5, 15.75},
                                                {"ALLREDUCE_GRAD", 15.75, 21.25},
                                                {"OPTIM", 21.25, 21.75}}};
  ASSERT_EQ(tl.stages.size(), 2U);
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(tl.stages[r].size(), want[r].size()) << "rank " << r;
    for (std::size_t i = 0; i < want[r].size(); ++i) {
      SCOPED_TRACE("rank " + std::to_string(r) + " action " + std::to_string(i));
      EXPECT_EQ(to_string(tl.stages[r][i].action), want[r][i].action);
      EXPECT_DOUBLE_EQ(tl.stages[r][i].start, want[r][i].start);
      EXPECT_DOUBLE_EQ(tl.stages[r][i].end, want[r][i].end);
    }
  }
  EXPECT_DOUBLE_EQ(tl.makespan, 21.75);
  EXPECT_DOUBLE_EQ(tl.busy[0], 10.0);
  EXPECT_DOUBLE_EQ(tl.busy[1], 10.0);
  const std::vector<double> bubble = stage_bubble_fractions(s, c, g);
  EXPECT_DOUBLE_EQ(bubble[0], 11.75 / 21.75);
  // Without the groups the ranks do not wait for each other at the end: rank 1 ends at 17.25.
  const Timeline free_end = simulate(s, c, SyncGroups{});
  EXPECT_DOUBLE_EQ(free_end.stages[1].back().end, 15.75 + 1.0 + 0.5);
  EXPECT_DOUBLE_EQ(free_end.makespan, 21.75);
}

TEST(ScheduleSimCosts, GPipeWithTransfersMatchesItsClosedForm) {
  // Each of the forward and the backward wave crosses P-1 links: (M+P-1)(f+b) + 2(P-1)t.
  for (int P = 1; P <= 5; ++P) {
    for (int M = 1; M <= 8; ++M) {
      SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M));
      const Schedule s = make_gpipe(P, M);
      std::vector<StageCosts> c(static_cast<std::size_t>(P));
      for (StageCosts& x : c) {
        x.compute = ActionCosts{1.0, 2.0, 0.0};
        x.link = LinkCosts{0.25, 1000.0, 2000.0};  // t = 0.75
      }
      EXPECT_NEAR(simulate(s, c, data_parallel_sync_groups(P)).makespan,
                  (M + P - 1) * 3.0 + 2.0 * (P - 1) * 0.75, 1e-9);
    }
  }
}

TEST(ScheduleSimCosts, MessagesOnASlowLinkCrossItOneAtATime) {
  // GPipe, P = 2, M = 3, f = b = 1, each message 10 bytes at 2 per unit (5 on the wire), no
  // latency. Rank 0's SEND_Fs end at 1, 2, 3 but the link carries one at a time: they arrive at 6,
  // 11 and 16, so rank 1's Fs start there. Rank 1's Bs end at 18, 19, 20 and their messages arrive
  // at 23, 28, 33: rank 0's Bs start there and the step ends at 34 (18 if they all crossed at
  // once: the forward wave arriving at 6, 7, 8).
  const Schedule s = make_gpipe(2, 3);
  std::vector<StageCosts> c(2);
  for (StageCosts& x : c) {
    x.compute = ActionCosts{1.0, 1.0, 0.0};
    x.link = LinkCosts{0.0, 10.0, 2.0};
  }
  const Timeline tl = simulate(s, c, SyncGroups{});
  const auto starts = [&](std::size_t rank, ActionKind kind) {
    std::vector<double> out;
    for (const TimedAction& t : tl.stages[rank]) {
      if (t.action.kind == kind) out.push_back(t.start);
    }
    return out;
  };
  EXPECT_EQ(starts(1, ActionKind::F), (std::vector<double>{6, 11, 16}));
  EXPECT_EQ(starts(0, ActionKind::B), (std::vector<double>{23, 28, 33}));
  EXPECT_DOUBLE_EQ(tl.makespan, 34.0);
  // Latency is not the link's occupancy: 5 of it on top of free bytes delays each message alone.
  for (StageCosts& x : c) x.link = LinkCosts{5.0, 0.0, 0.0};
  EXPECT_EQ(simulate(s, c, SyncGroups{}).stages[1][1].start, 6.0);  // F0 after RECV_F0
}

TEST(ScheduleSimCosts, AFusedBackwardCostsFusedAndASplitOneBPlusW) {
  // GPipe's B computes W too: (M + P - 1)(f + fused), whatever b and w are.
  for (int P = 1; P <= 4; ++P) {
    for (int M = 1; M <= 6; ++M) {
      SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M));
      std::vector<StageCosts> c(static_cast<std::size_t>(P));
      for (StageCosts& x : c) x.compute = ActionCosts{1.0, 2.0, 1.5, 3.25};
      EXPECT_NEAR(simulate(make_gpipe(P, M), c, data_parallel_sync_groups(P)).makespan,
                  (M + P - 1) * 4.25, 1e-9);
    }
  }
  // A schedule whose every B has its W: the fused cost is never used, so ZB-H1 is unchanged.
  const Schedule zb = make_schedule(ScheduleKind::ZbH1, 3, 6);
  std::vector<StageCosts> fused(3), plain(3);
  for (auto& x : fused) x.compute = ActionCosts{1.0, 1.5, 0.5, 1.9};
  for (auto& x : plain) x.compute = ActionCosts{1.0, 1.5, 0.5};
  const auto a = simulate(zb, fused, data_parallel_sync_groups(3));
  const auto b = simulate(zb, plain, data_parallel_sync_groups(3));
  double busy_a = 0, busy_b = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    busy_a += a.busy[r];
    busy_b += b.busy[r];
  }
  // Stage 0's W that directly follows its own B may run fused: at most those differ.
  EXPECT_LE(busy_a, busy_b + 1e-9);
  EXPECT_GE(busy_a, busy_b - 6 * (2.0 - 1.9) - 1e-9);
  // A negative fused cost is refused like any other.
  fused[1].compute.fused = -1.0;
  EXPECT_THROW((void)simulate(zb, fused, SyncGroups{}), Error);
}

TEST(ScheduleSimCosts, FreeCommunicationKeepsTheComputeOnlyResults) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::ZbH1, ScheduleKind::ZbV, ScheduleKind::DualPipeV}) {
    const Schedule s = make_schedule(kind, 4, 8);
    const ActionCosts a{1.0, 1.5, 0.5};
    std::vector<StageCosts> c(static_cast<std::size_t>(stage_count(s)));
    for (StageCosts& x : c) x.compute = a;
    EXPECT_DOUBLE_EQ(simulate(s, c, data_parallel_sync_groups(4)).makespan,
                     simulate(s, a).makespan);
  }
}

TEST(ScheduleSimCosts, MeasuredCostsReplayTheTimelineTheyCameFrom) {
  // A simulated run read back as if measured: the costs it yields reproduce every action's times,
  // for each schedule the executor runs, with offload too.
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZbH1}) {
    for (int offload : {-1, 1}) {
      SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " offload " + std::to_string(offload));
      Schedule s = make_schedule(kind, 3, 6);
      if (offload >= 0) s = add_activation_offload(s, offload);
      std::vector<StageCosts> c(3);
      for (std::size_t v = 0; v < 3; ++v) {
        const double k = 1.0 + 0.25 * static_cast<double>(v);
        c[v].compute = ActionCosts{2.0 * k, 2.5 * k, kind == ScheduleKind::ZbH1 ? 1.0 : 0.0};
        c[v].send = 0.125;
        c[v].recv = 0.0625;
        c[v].link = LinkCosts{0.5 * k, 0.0, 0.0};
        c[v].offload = 0.25;
        c[v].reload = 0.375;
        c[v].allreduce = 0.75 * k;
        c[v].optim = 1.0 + k;
      }
      const SyncGroups g = data_parallel_sync_groups(3);
      const Timeline tl = simulate(s, c, g);
      const std::vector<StageCosts> got = measured_stage_costs(s, tl, g);
      for (std::size_t v = 0; v < 3; ++v) {
        // ZB-H1's stage 0 fuses its W's into its B's: they read back as b + w, no w.
        const bool fused = kind == ScheduleKind::ZbH1 && v == 0;
        EXPECT_DOUBLE_EQ(got[v].compute.f, c[v].compute.f);
        EXPECT_DOUBLE_EQ(got[v].compute.b, c[v].compute.b + (fused ? c[v].compute.w : 0.0));
        EXPECT_DOUBLE_EQ(got[v].compute.w, fused ? 0.0 : c[v].compute.w);
        EXPECT_DOUBLE_EQ(got[v].allreduce, c[v].allreduce);
        EXPECT_DOUBLE_EQ(got[v].optim, c[v].optim);
        if (offload >= 0 && got[v].offload > 0) {
          EXPECT_DOUBLE_EQ(got[v].offload, 0.25);
        }
      }
      const Timeline again = simulate(s, got, g);
      EXPECT_NEAR(again.makespan, tl.makespan, 1e-9);
      for (std::size_t r = 0; r < 3; ++r) {
        ASSERT_EQ(again.stages[r].size(), tl.stages[r].size());
        for (std::size_t i = 0; i < tl.stages[r].size(); ++i) {
          EXPECT_NEAR(again.stages[r][i].end, tl.stages[r][i].end, 1e-9)
              << "rank " << r << " " << to_string(tl.stages[r][i].action) << " send " << got[r].send
              << " recv " << got[r].recv << " latency " << got[r].link.latency << " offload "
              << got[r].offload << " reload " << got[r].reload;
        }
      }
    }
  }
}

TEST(ScheduleSimCosts, RejectsBadCostsAndGroups) {
  const Schedule s = make_1f1b(2, 2);
  std::vector<StageCosts> c(2);
  c[1].link.latency = -1.0;
  EXPECT_THROW((void)simulate(s, c, SyncGroups{}), Error);
  c[1].link.latency = 0.0;
  c[0].optim = std::numeric_limits<double>::infinity();
  EXPECT_THROW((void)simulate(s, c, SyncGroups{}), Error);
  c[0].optim = 0.0;
  try {
    (void)simulate(s, c, SyncGroups{{{0, 2}}, {}});
    ADD_FAILURE() << "a group with rank 2 of 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names rank 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)simulate(s, std::vector<StageCosts>(3), SyncGroups{}), Error);
}

TEST(Schedule, RejectsBadShapesAndCosts) {
  EXPECT_THROW(make_gpipe(0, 4), Error);
  EXPECT_THROW(make_1f1b(2, 0), Error);
  EXPECT_THROW((void)simulate(make_gpipe(2, 2), 0.0, 1.0), Error);
  EXPECT_THROW((void)peak_stashed_microbatches(make_gpipe(2, 2), 2), Error);
}

// --- Activation offload --------------------------------------------------------------------------

TEST(ActivationOffload, GPipeOneStageExactly) {
  // F2's stash is needed by the very next compute: it stays. F1 -> B1 has F2, B2 in between (more
  // than the prefetch distance 1): out after F1, back before B2, one compute ahead of B1.
  const Schedule got = add_activation_offload(make_gpipe(1, 3), 1);
  const Schedule want = from_text(3, {"F0 OFFLOAD0 F1 OFFLOAD1 F2 RELOAD1 B2 RELOAD0 B1 B0 "
                                      "ALLREDUCE_GRAD OPTIM"});
  EXPECT_EQ(got.ranks, want.ranks);
  EXPECT_EQ(peak_stashed_microbatches(got, 0), 2);
  EXPECT_EQ(offloaded_microbatches(got, 0), 2);
  EXPECT_EQ(format_schedule(got), "stage 0: F0 OFFLOAD0 F1 OFFLOAD1 F2 RELOAD1 B2 RELOAD0 B1 B0\n");
  // Prefetch 0: back right before the backward; one slot is enough.
  const Schedule eager = add_activation_offload(make_gpipe(1, 3), 0);
  EXPECT_EQ(eager.ranks, from_text(3, {"F0 OFFLOAD0 F1 OFFLOAD1 F2 B2 RELOAD1 B1 RELOAD0 B0 "
                                       "ALLREDUCE_GRAD OPTIM"})
                             .ranks);
  EXPECT_EQ(peak_stashed_microbatches(eager, 0), 1);
}

TEST(ActivationOffload, OneFOneBTwoStagesExactly) {
  // OFFLOAD follows F's send; a RELOAD goes above the receive of the compute it precedes.
  const Schedule got = add_activation_offload(make_1f1b(2, 4), 0);
  const Schedule want = from_text(
      4, {"F0 SEND_F0 OFFLOAD0 F1 SEND_F1 OFFLOAD1 RELOAD0 RECV_B0 B0 F2 SEND_F2 OFFLOAD2 "
          "RELOAD1 RECV_B1 B1 F3 SEND_F3 OFFLOAD3 RELOAD2 RECV_B2 B2 RELOAD3 RECV_B3 B3 "
          "ALLREDUCE_GRAD OPTIM",
          // The last stage runs each F right before its B: nothing to offload.
          "RECV_F0 F0 B0 SEND_B0 RECV_F1 F1 B1 SEND_B1 RECV_F2 F2 B2 SEND_B2 RECV_F3 F3 B3 "
          "SEND_B3 ALLREDUCE_GRAD OPTIM"});
  EXPECT_EQ(got.ranks[0], want.ranks[0]);
  EXPECT_EQ(got.ranks[1], want.ranks[1]);
  EXPECT_EQ(peak_stashed_microbatches(got, 0), 1);  // 2 without offload
  EXPECT_EQ(peak_stashed_microbatches(got, 1), 1);
  EXPECT_EQ(offloaded_microbatches(got, 0), 4);
  EXPECT_EQ(offloaded_microbatches(got, 1), 0);
  // Prefetch 1 on 2 stages would save nothing (each reload needs a slot while a forward runs), so
  // no copies are made.
  const Schedule prefetch1 = add_activation_offload(make_1f1b(2, 4), 1);
  EXPECT_EQ(prefetch1.ranks, make_1f1b(2, 4).ranks);
}

// Independent checks of the transform over generators, shapes and prefetch distances: it is
// valid; without OFFLOAD / RELOAD it is the original; a stage is changed only when that lowers its
// peak, and then exactly the microbatches with more than `prefetch` computes between F and B are
// offloaded, right after F and its sends, and come back
// exactly `prefetch` computes ahead of B; resident slots never exceed min(peak, prefetch + 1); and
// the offload costs no simulated time.
TEST(ActivationOffload, TransformIsValidAndTightOverAGrid) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int P = 1; P <= 4; ++P) {
      for (int M = 1; M <= 8; ++M) {
        for (int d = 0; d <= 3; ++d) {
          SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " P=" + std::to_string(P) +
                       " M=" + std::to_string(M) + " prefetch=" + std::to_string(d));
          const Schedule base = make_schedule(kind, P, M);
          const Schedule s = add_activation_offload(base, d);
          ASSERT_NO_THROW(validate_schedule(s));
          EXPECT_DOUBLE_EQ(bubble_fraction(s, 1, 2), bubble_fraction(base, 1, 2));
          for (int st = 0; st < P; ++st) {
            const auto& list = s.ranks[static_cast<std::size_t>(st)];
            std::vector<Action> stripped;
            for (const Action& a : list) {
              if (a.kind != K::Offload && a.kind != K::Reload) stripped.push_back(a);
            }
            EXPECT_EQ(stripped, base.ranks[static_cast<std::size_t>(st)]) << "stage " << st;
            // Compute index (count of F / B before it) of every action.
            std::vector<int> ordinal;
            int computes = 0;
            for (const Action& a : list) {
              ordinal.push_back(computes);
              if (a.kind == K::F || a.kind == K::B) ++computes;
            }
            auto where = [&](K kind2, int mb) {
              const auto it = std::find(list.begin(), list.end(), Action{kind2, st, mb});
              return it == list.end() ? -1 : static_cast<int>(it - list.begin());
            };
            // A stage is transformed only where that lowers its resident peak.
            const int peak = peak_stashed_microbatches(base, st);
            const bool changed = list.size() != stripped.size();
            if (changed) {
              EXPECT_LT(peak_stashed_microbatches(s, st), peak) << "stage " << st;
            } else {
              EXPECT_LE(peak, d + 1) << "stage " << st;
            }
            int offloaded = 0;
            for (int mb = 0; mb < M; ++mb) {
              const int f = where(K::F, mb), b = where(K::B, mb);
              const int between =
                  ordinal[static_cast<std::size_t>(b)] - ordinal[static_cast<std::size_t>(f)] - 1;
              const int off = where(K::Offload, mb), rel = where(K::Reload, mb);
              if (changed) {
                EXPECT_EQ(off >= 0, between > d) << "stage " << st << " mb " << mb;
              }
              if (off < 0) continue;
              ++offloaded;
              for (int i = f + 1; i < off; ++i) {
                const K k = list[static_cast<std::size_t>(i)].kind;
                EXPECT_TRUE(k == K::SendF || k == K::Offload) << "stage " << st << " mb " << mb;
              }
              // Computes from the RELOAD up to (not counting) B.
              EXPECT_EQ(
                  ordinal[static_cast<std::size_t>(b)] - ordinal[static_cast<std::size_t>(rel)], d)
                  << "stage " << st << " mb " << mb;
            }
            EXPECT_EQ(offloaded_microbatches(s, st), offloaded);
            EXPECT_LE(peak_stashed_microbatches(s, st), std::min(peak, d + 1)) << "stage " << st;
            // For GPipe (M) and 1F1B (min(P - s, M)) the bound is reached.
            EXPECT_EQ(peak_stashed_microbatches(s, st), std::min(peak, d + 1)) << "stage " << st;
          }
        }
      }
    }
  }
}

TEST(ActivationOffload, TransformRejectsBadInput) {
  EXPECT_THROW((void)add_activation_offload(make_gpipe(2, 2), -1), Error);
  const Schedule once = add_activation_offload(make_gpipe(1, 4), 1);
  try {
    (void)add_activation_offload(once, 1);
    ADD_FAILURE() << "offloaded twice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("already has 0OFFLOAD0"), std::string::npos) << e.what();
  }
  Schedule broken = make_gpipe(2, 2);
  broken.ranks[1].pop_back();
  EXPECT_THROW((void)add_activation_offload(broken, 1), Error);
  EXPECT_THROW((void)offloaded_microbatches(once, 1), Error);
}

TEST(ActivationOffload, ValidatorChecksOffloadOrderAndPairs) {
  auto expect_rejects = [](const std::string& text, const std::string& part) {
    const std::string msg = validation_error(from_text(2, {text}));
    EXPECT_NE(msg.find(part), std::string::npos) << text << ": " << msg;
  };
  EXPECT_NO_THROW(
      validate_schedule(from_text(2, {"F0 OFFLOAD0 F1 RELOAD0 B1 B0 ALLREDUCE_GRAD OPTIM"})));
  expect_rejects(
      "OFFLOAD0 F0 F1 RELOAD0 B1 B0 ALLREDUCE_GRAD OPTIM",
      "runs 0OFFLOAD0 (action 0) before 0F0 (action 1): it offloads a stash not yet made");
  expect_rejects("F0 RELOAD0 F1 OFFLOAD0 B1 B0 ALLREDUCE_GRAD OPTIM",
                 "runs 0RELOAD0 (action 1) before 0OFFLOAD0 (action 3)");
  expect_rejects("F0 OFFLOAD0 F1 B1 B0 RELOAD0 ALLREDUCE_GRAD OPTIM",
                 "runs 0B0 (action 4) before 0RELOAD0 (action 5): the backward needs its stash");
  expect_rejects("F0 OFFLOAD0 F1 B1 B0 ALLREDUCE_GRAD OPTIM",
                 "rank 0 has 1 0OFFLOAD0 and 0 0RELOAD0");
  expect_rejects("F0 F1 RELOAD0 B1 B0 ALLREDUCE_GRAD OPTIM",
                 "rank 0 has 0 0OFFLOAD0 and 1 0RELOAD0");
  expect_rejects("F0 OFFLOAD0 OFFLOAD0 F1 RELOAD0 RELOAD0 B1 B0 ALLREDUCE_GRAD OPTIM",
                 "rank 0 has 2 0OFFLOAD0 and 2 0RELOAD0");
  // Offloading does not make a deadlock go away, nor create one.
  const std::string msg =
      validation_error(from_text(1, {"F0 OFFLOAD0 RECV_B0 RELOAD0 B0 SEND_F0 ALLREDUCE_GRAD OPTIM",
                                     "RECV_F0 F0 B0 SEND_B0 ALLREDUCE_GRAD OPTIM"}));
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strait::sched
