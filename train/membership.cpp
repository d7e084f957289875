#include "train/membership.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/launch_env.h"
#include "comm/bootstrap/tcp_store.h"
#include "core/error.h"
#include "core/params.h"
#include "model/checkpoint.h"
#include "train/train_checkpoint.h"

namespace strait::train {
// The reference model and the scheduler are this application's vocabulary.
using namespace strait::sched;  // NOLINT(google-build-using-namespace)

namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;
using kernels::ReduceOp;

Error bad(const std::string& message) {
  return Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

int Membership::connect() {
  int local_world_size = 1;
  if (cfg_.join) {
    // A joiner: no rank yet; the job's store is where the elastic launcher said.
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr == nullptr || port == nullptr) {
      throw bad(
          "--join needs MASTER_ADDR and MASTER_PORT: set them to the store address the elastic "
          "job's launcher printed (\"the job's store is at ADDR:PORT\")");
    }
    comm::TcpStoreOptions so;
    so.host = addr;
    so.port = static_cast<std::uint16_t>(std::stoi(port));
    so.connect_timeout = comm::CommOptions::default_timeout();
    so.timeout = comm::CommOptions::default_timeout();
    join_store_ = std::make_shared<comm::TcpStore>(so);
    try {
      s_.world = comm::Communicator::join(join_store_);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || cfg_.stages == 1) throw;
      throw Error(ErrorCode::Timeout,
                  fmt::format("{} (with --stages {} a replica joins as {} processes started with "
                              "--join, admitted only together: were all of them started?)",
                              e.what(), cfg_.stages, cfg_.stages));
    }
  } else {
    // The world size is checked from the environment, before any connection is made: every rank
    // then reports the mistake itself, instead of some of them failing later on a connection to a
    // rank that has already exited over it.
    const comm::LaunchEnv env = comm::launch_env_from_environment();
    if (env.world_size != cfg_.world_size()) {
      throw bad(fmt::format(
          "the job has {} ranks (WORLD_SIZE={}) but --stages {} x --replicas {} needs {}: launch "
          "{} ranks (strait train does this itself when run without RANK set)",
          env.world_size, env.world_size, cfg_.stages, cfg_.replicas, cfg_.world_size(),
          cfg_.world_size()));
    }
    if (cfg_.elastic && !env.agent_store) {
      throw bad(
          "--elastic needs a store that outlives every rank (comm/reform.h): start the job with "
          "`strait train --elastic` (its launcher hosts the store) or `strait run --elastic`, "
          "which set TORCHELASTIC_USE_AGENT_STORE=True");
    }
    local_world_size = env.local_world_size;
    s_.world = comm::Communicator::from_env();
    for (int r = 0; r < s_.world->size(); ++r) ids_.push_back(r);
    next_id_ = s_.world->size();
  }
  read_test_hooks();
  return local_world_size;
}

// Test hooks (see maybe_fault and round_end).
void Membership::read_test_hooks() {
  const auto hook_int = [](const char* name, const std::string& text) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): reported below
    }
    throw bad(fmt::format("{}: {:?} is not a whole number (a test hook)", name, text));
  };
  if (const auto f = params::text("STRAIT_TRAIN_FAULT"); f && cfg_.elastic) {
    const std::string spec = *f;
    const auto a = spec.find(':');
    const auto b = a == std::string::npos ? a : spec.find(':', a + 1);
    if (b == std::string::npos) {
      throw bad(fmt::format("STRAIT_TRAIN_FAULT={:?} is not ID:STEP:PHASE (a test hook)", spec));
    }
    fault_ =
        Fault{hook_int("STRAIT_TRAIN_FAULT", spec.substr(0, a)),
              hook_int("STRAIT_TRAIN_FAULT", spec.substr(a + 1, b - a - 1)), spec.substr(b + 1)};
  }
  if (const auto a = params::text("STRAIT_TRAIN_AWAIT_JOINER"); a && cfg_.elastic)
    await_joiner_ = hook_int("STRAIT_TRAIN_AWAIT_JOINER", *a);
}

bool Membership::compute(const std::function<void()>& step) {
  if (pipeline_broken_) return false;  // this replica lost a stage: nothing to compute
  if (!cfg_.elastic || cfg_.stages == 1) {
    step();
    return true;
  }
  // With stages, a lost rank of this replica breaks the step itself: the replica is then dropped
  // at the round's end, and its ranks wait for it without computing.
  const bool was_broken = broken_;
  broken_ = false;
  const bool computed = world_ok(step);
  if (!computed) pipeline_broken_ = true;
  broken_ = broken_ || was_broken;
  return computed;
}

std::string Membership::round_members(int replicas_in) const {
  return cfg_.elastic ? fmt::format("replicas {} in ({} of {}, generation {})", ids_text(),
                                    replicas_in, cfg_.replicas, s_.world->generation())
                      : fmt::format("replicas {}-{} in ({} of {})", 0, replicas_in - 1, replicas_in,
                                    cfg_.replicas);
}

void Membership::report_end() const {
  // Every replica ends on the global weights: each says what it holds.
  const std::span<const float> w = s_.model->params();
  const int id = ids_[static_cast<std::size_t>(s_.rank)];
  fmt::print(
      "elastic: replica {}{} (rank {} of {}, generation {}) ends after step {} with "
      "weights xxh3 {}\n",
      id / cfg_.stages,
      cfg_.stages > 1 ? fmt::format(" stage {}", id % cfg_.stages) : std::string(), s_.rank,
      s_.world->size(), s_.world->generation(), cfg_.steps, checkpoint_checksum(std::as_bytes(w)));
  std::fflush(stdout);
}

bool Membership::world_ok(const std::function<void()>& op) {
  if (broken_) return false;
  try {
    op();
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout &&
        e.code() != ErrorCode::Aborted) {
      throw;
    }
    mark_broken(e);
    return false;
  }
}

void Membership::mark_broken(const Error& e) {
  broken_ = true;
  broken_why_ = e.what();
  fmt::print(stderr,
             "strait train: rank {} (replica {}): a world operation failed ({}); training on alone "
             "to the round's end, where the survivors re-form\n",
             s_.rank, ids_.empty() ? -1 : ids_[static_cast<std::size_t>(s_.rank)] / cfg_.stages,
             broken_why_);
  std::fflush(stderr);
}

std::string Membership::ids_text() const {
  return fmt::format("{}", fmt::join(replicas_of(ids_), ","));
}

std::vector<int> Membership::replicas_of(const std::vector<int>& ids) const {
  std::vector<int> out;
  for (const int id : ids) {
    const int r = id / cfg_.stages;
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Membership::maybe_fault(std::string_view phase, int step) {
  if (!fault_ || ids_.empty() || fault_->id != ids_[static_cast<std::size_t>(s_.rank)] ||
      fault_->step != step + 1 || fault_->phase != phase) {
    return;
  }
  fmt::print("strait train: test hook: replica {} dies (SIGKILL) at step {}, phase {}\n",
             fault_->id, step + 1, phase);
  std::fflush(nullptr);
  if (phase == "allreduce") {
    // The round's average as OuterSync posts it (the same pseudo-gradient, count, dtype and op),
    // left in flight: should it complete anyway, the others' result is the one it would have been.
    const std::vector<float> start = s_.outer->global();
    const std::span<const float> w = s_.model->params();
    std::vector<float> buf(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) buf[i] = start[i] - w[i];
    const comm::Work work =
        s_.data->iallreduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Avg);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::raise(SIGKILL);
}

std::vector<int> Membership::adopt_reformed(bool admit) {
  comm::ReformOptions o;
  o.admit_joiners = admit;
  o.joiners_multiple = cfg_.stages;  // a replica's stages join together, in ticket order
  std::unique_ptr<comm::Communicator> next = s_.world->reform(o);
  std::vector<int> ids(static_cast<std::size_t>(next->size()));
  std::vector<bool> kept(ids_.size(), false);
  for (int r = 0; r < next->size(); ++r) {
    const int former = next->former_ranks()[static_cast<std::size_t>(r)];
    if (former >= 0) kept[static_cast<std::size_t>(former)] = true;
    ids[static_cast<std::size_t>(r)] =
        former >= 0 ? ids_[static_cast<std::size_t>(former)] : next_id_++;
  }
  std::vector<int> lost;
  for (std::size_t r = 0; r < ids_.size(); ++r) {
    if (!kept[r]) lost.push_back(ids_[r]);
  }
  const int p = cfg_.stages;
  if (p > 1) {
    // A replica whose stage lost its rank cannot run its pipeline: it is dropped whole. Every
    // member knows which from the new world's membership alone; the ranks of such a replica leave,
    // the others re-form once more without them. (Joiners come in whole replicas: see ids_.)
    std::map<int, int> present;  // replica -> its stages present
    for (const int id : ids) ++present[id / p];
    std::vector<int> exclude;
    for (int r = 0; r < next->size(); ++r) {
      if (present[ids[static_cast<std::size_t>(r)] / p] < p) exclude.push_back(r);
    }
    if (!exclude.empty()) {
      const int mine = ids[static_cast<std::size_t>(next->rank())];
      if (present[mine / p] < p) {
        throw Error(
            ErrorCode::Aborted,
            fmt::format("elastic: replica {} lost a stage's rank, and a replica without "
                        "one of its {} stages cannot run its pipeline: it is dropped whole, "
                        "so this rank (stage {}) leaves the job",
                        mine / p, p, mine % p));
      }
      comm::ReformOptions without;
      without.exclude = exclude;
      without.admit_joiners = false;
      std::unique_ptr<comm::Communicator> complete = next->reform(without);
      std::vector<int> kept_ids(static_cast<std::size_t>(complete->size()));
      for (int r = 0; r < complete->size(); ++r) {
        kept_ids[static_cast<std::size_t>(r)] =
            ids[static_cast<std::size_t>(complete->former_ranks()[static_cast<std::size_t>(r)])];
      }
      for (const int r : exclude) lost.push_back(ids[static_cast<std::size_t>(r)]);
      std::sort(lost.begin(), lost.end());
      next = std::move(complete);
      ids = std::move(kept_ids);
    }
  }
  // Everything over the old world goes before it (the caller has taken the outer sync's state
  // and rebuilds it).
  s_.outer.reset();
  s_.executor.reset();
  s_.tied.reset();
  s_.data.reset();
  s_.pipe.reset();
  s_.world = std::move(next);
  ids_ = std::move(ids);
  broken_ = false;
  pipeline_broken_ = false;
  s_.build_groups();
  s_.build_training();
  report_.set_rank(s_.rank);
  return lost;
}

void Membership::rebuild_outer(const OuterSync::State& state, std::int64_t steps_done, bool ended) {
  s_.outer.reset();
  s_.build_outer();
  s_.outer->import_state(state, steps_done, ended);
}

// Each stage's state goes over its data-parallel group (the ranks of that stage, by replica) from
// the group's rank 0, a survivor: members come before joiners in the re-formed world.
std::int64_t Membership::send_state(std::int64_t steps_done) {
  std::vector<std::byte> bytes;
  std::int64_t size = 0;
  const bool sender = s_.data->rank() == 0;
  if (sender) {
    const nlohmann::json extra = {
        {"ids", ids_},
        {"next_id", next_id_},
        {"generation", s_.world->generation()},
        {"from_replica", ids_[static_cast<std::size_t>(s_.rank)] / cfg_.stages},
        {"stage", s_.stage}};
    bytes = pack_replica_state(cfg_, *s_.model, *s_.moments, *s_.outer, steps_done, extra);
    size = static_cast<std::int64_t>(bytes.size());
  }
  s_.data->broadcast(&size, 1, DType::I64, 0);
  if (!sender) bytes.resize(static_cast<std::size_t>(size));
  s_.data->broadcast(bytes.data(), bytes.size(), DType::U8, 0);
  if (sender) {
    fmt::print("elastic: sent the state of step {} ({}, xxh3 {}) to the joiners{}\n", steps_done,
               human_bytes(static_cast<double>(size)), checkpoint_checksum(bytes),
               cfg_.stages > 1 ? fmt::format(" of stage {}", s_.stage) : std::string());
    std::fflush(stdout);
  }
  // The whole state the joiners received: every stage's.
  std::int64_t total = sender ? size : 0;
  s_.world->allreduce(&total, &total, 1, DType::I64, ReduceOp::Sum);
  return total;
}

int Membership::receive_state() {
  std::int64_t size = 0;
  s_.data->broadcast(&size, 1, DType::I64, 0);
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  s_.data->broadcast(bytes.data(), bytes.size(), DType::U8, 0);
  std::int64_t total = 0;  // send_state's sum over the stages
  s_.world->allreduce(&total, &total, 1, DType::I64, ReduceOp::Sum);
  const nlohmann::json meta = unpack_replica_state(bytes, cfg_, *s_.model, *s_.moments, *s_.outer);
  if (const int from = meta.at("elastic").value("stage", 0); from != s_.stage) {
    throw Error(ErrorCode::Internal,
                fmt::format("elastic: the joiner of stage {} received the state of stage {}",
                            s_.stage, from));
  }
  ids_ = meta.at("elastic").at("ids").get<std::vector<int>>();
  next_id_ = meta.at("elastic").at("next_id").get<int>();
  const auto step = meta.at("step").get<int>();
  // What this process now holds, packed the same way: equal bytes mean an equal state.
  const std::vector<std::byte> mine =
      pack_replica_state(cfg_, *s_.model, *s_.moments, *s_.outer, step, meta.at("elastic"));
  const int id = ids_[static_cast<std::size_t>(s_.rank)];
  fmt::print(
      "elastic: joined as replica {}{} (rank {} of {}, generation {}) after step {}: received {} "
      "from replica {} (weights, AdamW moments and step, outer weights and momentum); the state "
      "held now packs to xxh3 {}\n",
      id / cfg_.stages,
      cfg_.stages > 1 ? fmt::format(" stage {}", id % cfg_.stages) : std::string(), s_.rank,
      s_.world->size(), s_.world->generation(), step, human_bytes(static_cast<double>(size)),
      meta.at("elastic").at("from_replica").get<int>(), checkpoint_checksum(mine));
  std::fflush(stdout);
  // SparseLoCo's error feedback is the sender's own residual: this replica has sent nothing yet.
  s_.outer->clear_error_feedback();
  return step;
}

void Membership::stop_below_min(std::int64_t steps_done) {
  std::string saved;
  if (!cfg_.save.empty()) {
    save_checkpoint(*s_.world, cfg_, s_.stage, s_.replica, *s_.model, *s_.moments, steps_done,
                    s_.outer.get());
    saved = fmt::format(
        " after saving the checkpoint of step {} in {} (continue it with --resume {} "
        "--replicas {})",
        steps_done, cfg_.save.string(), cfg_.save.string(), s_.replicas);
  }
  throw Error(ErrorCode::Unavailable,
              fmt::format("elastic: {} left (replicas {}) after step {}, fewer than "
                          "--min-replicas {}: the job stops{}",
                          plural(s_.replicas, "replica"), ids_text(), steps_done, cfg_.min_replicas,
                          saved));
}

bool Membership::settle_lost(int step, bool last, bool& done, const OuterSync::State& before,
                             const std::vector<float>& at_end, OuterStepStats& stats) {
  const std::span<float> params = s_.model->params();
  const int before_n = s_.world->size();
  const OuterSync::State now = s_.outer->export_state();
  const std::vector<int> lost = adopt_reformed(false);
  rebuild_outer(done ? now : before, done ? step + 1 : step, done && last);
  // What the interrupted round achieved: the outer step counts only if every survivor took
  // it (torchft's commit vote); else it is redone among the survivors.
  std::int64_t all_done = done ? 1 : 0;
  if (!world_ok([&] { s_.world->allreduce(&all_done, &all_done, 1, DType::I64, ReduceOp::Min); })) {
    return false;
  }
  if (all_done == 0) {
    if (done) {
      std::copy(at_end.begin(), at_end.end(), params.begin());
      rebuild_outer(before, step, false);
      done = false;
    }
    if (!world_ok([&] { stats = s_.outer->end_step(step, params, last); })) return false;
    done = true;
  }
  if (s_.rank == 0) {
    fmt::print(
        "elastic: after step {} lost replica{} {} ({} of {} ranks left); {} go on as "
        "generation {}: replicas {}; the round's outer average {}\n",
        step + 1, replicas_of(lost).size() == 1 ? "" : "s", fmt::join(replicas_of(lost), ","),
        s_.world->size(), before_n, plural(s_.replicas, "replica"), s_.world->generation(),
        ids_text(), all_done == 0 ? "was redone among them" : "had completed on every one of them");
    std::fflush(stdout);
    report_.emit({{"type", "elastic"},
                  {"event", "lost"},
                  {"step", step + 1},
                  {"lost", replicas_of(lost)},
                  {"replicas", replicas_of(ids_)},
                  {"generation", s_.world->generation()},
                  {"redone", all_done == 0}});
  }
  if (s_.replicas < cfg_.min_replicas) stop_below_min(step + 1);
  return true;
}

std::int64_t Membership::joiners_waiting(int step) {
  // Processes waiting to join: rank 0 asks the store, everyone goes by its answer. With
  // stages, only whole replicas (stages processes) are admitted; the others wait.
  const auto whole = [&](std::int64_t n) { return n / cfg_.stages * cfg_.stages; };
  std::int64_t waiting = s_.rank == 0 ? whole(s_.world->joiners_waiting()) : 0;
  if (s_.rank == 0 && await_joiner_ == step + 1) {
    // Test hook: hold the round boundary (the others wait in the allreduce below, within the
    // timeout) until a replica's joiners wait, so a test's joiners are admitted whatever the
    // machine's load.
    const auto until = Clock::now() + comm::CommOptions::default_timeout() / 2;
    while (waiting == 0 && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      waiting = whole(s_.world->joiners_waiting());
    }
  }
  return waiting;
}

bool Membership::admit_joiners(int step, bool last) {
  const OuterSync::State now = s_.outer->export_state();
  const int before_n = s_.world->size();
  (void)adopt_reformed(true);
  rebuild_outer(now, step + 1, last);
  std::int64_t state_bytes = 0;
  if (!world_ok([&] { state_bytes = send_state(step + 1); })) return false;
  if (s_.rank == 0) {
    fmt::print("elastic: after step {} admitted {} ({} ranks); generation {}: replicas {}\n",
               step + 1, plural(s_.world->size() - before_n, "joiner"), s_.world->size(),
               s_.world->generation(), ids_text());
    std::fflush(stdout);
    report_.emit({{"type", "elastic"},
                  {"event", "joined"},
                  {"step", step + 1},
                  {"replicas", replicas_of(ids_)},
                  {"generation", s_.world->generation()},
                  {"state_bytes", state_bytes}});  // the state broadcast to the joiners
  }
  return true;
}

OuterStepStats Membership::round_end(int step, bool last) {
  const std::span<float> params = s_.model->params();
  const std::vector<float> at_end(params.begin(), params.end());
  // No overlap: nothing is in flight, so this is local.
  const OuterSync::State before = s_.outer->export_state();
  OuterStepStats stats;
  bool done = false;  // this rank took the round's outer step
  if (!broken_) {
    maybe_fault("allreduce", step);
    try {
      stats = s_.outer->end_step(step, params, last);
      done = true;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::PeerLost && e.code() != ErrorCode::Timeout &&
          e.code() != ErrorCode::Aborted) {
        throw;
      }
      mark_broken(e);
    }
    maybe_fault("outer", step);
  }
  const int most = cfg_.replicas + 2;  // each attempt loses a replica or admits joiners
  for (int attempt = 0;; ++attempt) {
    if (attempt > most) {
      throw Error(ErrorCode::Aborted,
                  fmt::format("elastic: the job kept losing replicas while re-forming after step "
                              "{} ({} attempts): stopping",
                              step + 1, attempt));
    }
    if (broken_ && !settle_lost(step, last, done, before, at_end, stats)) continue;
    std::int64_t waiting = joiners_waiting(step);
    if (!world_ok([&] { s_.world->allreduce(&waiting, &waiting, 1, DType::I64, ReduceOp::Max); }))
      continue;
    if (waiting == 0 || admit_joiners(step, last)) break;
  }
  stats.round_ended = true;
  return stats;
}

}  // namespace strait::train
