#include "scheduler/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace strait::sched {
namespace {

void check_shape(std::string_view what, int stages, int microbatches) {
  if (stages < 1 || microbatches < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} schedule: got {} stages and {} microbatches; both must be at "
                            "least 1",
                            what, stages, microbatches));
  }
}

// Appends the actions of one stage, keeping the communication rules in one place.
class StageBuilder {
 public:
  StageBuilder(int stage, int stages, std::vector<Action>& out)
      : stage_(stage), last_(stage == stages - 1), out_(out) {}

  void forward(int mb) {
    if (stage_ > 0) push(ActionKind::RecvF, mb);
    push(ActionKind::F, mb);
    if (!last_) push(ActionKind::SendF, mb);
  }
  void backward(int mb) {
    if (!last_) push(ActionKind::RecvB, mb);
    push(ActionKind::B, mb);
    if (stage_ > 0) push(ActionKind::SendB, mb);
  }
  void finish() {
    push(ActionKind::AllreduceGrad, kNoMicrobatch);
    push(ActionKind::Optim, kNoMicrobatch);
  }

 private:
  void push(ActionKind kind, int mb) { out_.push_back(Action{kind, stage_, mb}); }

  int stage_;
  bool last_;
  std::vector<Action>& out_;
};

Schedule empty_schedule(int stages, int microbatches) {
  Schedule s;
  s.stages = stages;
  s.microbatches = microbatches;
  s.ranks.resize(static_cast<std::size_t>(stages));
  return s;
}

}  // namespace

std::string_view action_kind_name(ActionKind kind) noexcept {
  switch (kind) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::SendF: return "SEND_F";
    case ActionKind::RecvF: return "RECV_F";
    case ActionKind::SendB: return "SEND_B";
    case ActionKind::RecvB: return "RECV_B";
    case ActionKind::AllreduceGrad: return "ALLREDUCE_GRAD";
    case ActionKind::Optim: return "OPTIM";
  }
  return "?";
}

std::string to_string(const Action& action) {
  if (action.microbatch == kNoMicrobatch) return std::string(action_kind_name(action.kind));
  return fmt::format("{}{}", action_kind_name(action.kind), action.microbatch);
}

Schedule make_gpipe(int stages, int microbatches) {
  check_shape("gpipe", stages, microbatches);
  Schedule sched = empty_schedule(stages, microbatches);
  for (int s = 0; s < stages; ++s) {
    StageBuilder b(s, stages, sched.ranks[static_cast<std::size_t>(s)]);
    for (int mb = 0; mb < microbatches; ++mb) b.forward(mb);
    for (int mb = microbatches - 1; mb >= 0; --mb) b.backward(mb);
    b.finish();
  }
  return sched;
}

Schedule make_1f1b(int stages, int microbatches) {
  check_shape("1f1b", stages, microbatches);
  Schedule sched = empty_schedule(stages, microbatches);
  for (int s = 0; s < stages; ++s) {
    StageBuilder b(s, stages, sched.ranks[static_cast<std::size_t>(s)]);
    const int warmup = std::min(stages - s - 1, microbatches);
    int next_f = 0;
    int next_b = 0;
    for (; next_f < warmup; ++next_f) b.forward(next_f);
    while (next_f < microbatches) {
      b.forward(next_f++);
      b.backward(next_b++);
    }
    while (next_b < microbatches) b.backward(next_b++);
    b.finish();
  }
  return sched;
}

std::string_view schedule_kind_name(ScheduleKind kind) noexcept {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    if (lower == schedule_kind_name(k)) return k;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown pipeline schedule '{}': choose one of gpipe, 1f1b", name));
}

Schedule make_schedule(ScheduleKind kind, int stages, int microbatches) {
  switch (kind) {
    case ScheduleKind::GPipe: return make_gpipe(stages, microbatches);
    case ScheduleKind::OneFOneB: return make_1f1b(stages, microbatches);
  }
  throw Error(ErrorCode::Internal, "make_schedule: unhandled schedule kind");
}

}  // namespace strait::sched
