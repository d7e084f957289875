// Communicator::reform, join and the membership queries (comm/reform.h): the agreement through
// the root store, then a fresh world communicator for the new generation.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/algorithms/collective_op.h"
#include "comm/bootstrap/prefix_store.h"
#include "comm/communicator.h"
#include "comm/communicator_shared.h"
#include "comm/progress_engine.h"
#include "comm/reform.h"
#include "core/error.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// How often the decider looks for arrivals and losses, and joiners for a decision.
constexpr std::chrono::milliseconds kPoll{5};

// A PrefixStore that keeps its underlying store alive (a generation's communicator owns it).
class OwningPrefixStore final : public Store {
 public:
  OwningPrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : base_(std::move(base)), view_(std::move(prefix), *base_) {}
  using Store::set;
  void set(const std::string& key, const Bytes& value) override { view_.set(key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return view_.get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return view_.add(key, delta);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    view_.wait(keys, timeout);
  }

 private:
  std::shared_ptr<Store> base_;
  PrefixStore view_;
};

std::string reform_key(std::uint64_t generation, const std::string& what) {
  return fmt::format("strait/reform/{}/{}", generation, what);
}

std::string to_text(const Json& j) {
  return j.dump();
}

Json from_bytes(const Bytes& b) {
  return Json::parse(b.begin(), b.end());
}

// The decision a generation's members and joiners read.
struct Decision {
  std::vector<int> members;  // ranks in the previous generation, ascending: new ranks 0..
  int joiners = 0;           // tickets 0..joiners-1 follow, in ticket order
  std::map<int, std::string> left_out;  // previous rank -> why
  // The decider's settings, which every process of the new generation takes (a joiner's own may
  // differ, and every rank must agree on them): heartbeat interval and streams per peer.
  std::int64_t heartbeat_ms = 0;
  int streams = 1;
};

Decision parse_decision(const Bytes& bytes) {
  const Json j = from_bytes(bytes);
  Decision d;
  d.members = j.at("members").get<std::vector<int>>();
  d.joiners = j.at("joiners").get<int>();
  d.heartbeat_ms = j.at("heartbeat_ms").get<std::int64_t>();
  d.streams = j.at("streams").get<int>();
  for (const auto& [rank, why] : j.at("left_out").items()) {
    d.left_out.emplace(std::stoi(rank), why.get<std::string>());
  }
  return d;
}

Bytes encode(const Decision& d) {
  Json left = Json::object();
  for (const auto& [rank, why] : d.left_out) left[std::to_string(rank)] = why;
  const std::string text = to_text(Json{{"members", d.members},
                                        {"joiners", d.joiners},
                                        {"left_out", left},
                                        {"heartbeat_ms", d.heartbeat_ms},
                                        {"streams", d.streams}});
  return {text.begin(), text.end()};
}

// The generation whose decision is the latest one written (0 before any reform).
std::uint64_t latest_generation(Store& root) {
  return static_cast<std::uint64_t>(root.add("strait/reform/latest", 0));
}

// The options of a reformed world: the decision's settings, one site (the old sites' map does
// not fit the new ranks).
CommOptions reformed_options(const CommOptions& base, const Decision& d, int size) {
  CommOptions o = base;
  o.sites = std::vector<int>(static_cast<std::size_t>(size), 0);
  o.heartbeat = std::chrono::milliseconds(d.heartbeat_ms);
  o.streams = d.streams;
  return o;
}

// reform(): InvalidArgument for options no communicator of `size` ranks can follow.
void check_reform_options(const ReformOptions& options, int size) {
  if (options.joiners_multiple < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("reform: ReformOptions::joiners_multiple is {}; it must be at least 1",
                            options.joiners_multiple));
  }
  for (const int r : options.exclude) {
    if (r < 0 || r >= size) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("reform: ReformOptions::exclude names rank {}, but this communicator "
                              "has ranks 0..{}",
                              r, size - 1));
    }
  }
}

// reform(): the decision of generation `next`, waiting for it until `deadline` plus
// `deadline_ms` (the decider may itself wait until `deadline`).
Decision read_decision(Store& root, std::uint64_t next, Clock::time_point deadline,
                       std::chrono::milliseconds deadline_ms) {
  Bytes bytes;
  try {
    const auto left =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) +
                     deadline_ms);
    bytes = root.get(reform_key(next, "decision"), left);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    std::string decider = "unknown";
    try {
      decider = "rank " + root.get_string(reform_key(next, "decider_rank"), kPoll);
    } catch (const Error&) {
    }
    throw Error(ErrorCode::Timeout,
                fmt::format("reform: generation {} was not decided in time: the decider ({}) did "
                            "not write the member list (it may have died)",
                            next, decider));
  }
  return parse_decision(bytes);
}

}  // namespace

std::uint64_t Communicator::generation() const noexcept {
  return shared_->generation;
}

const std::vector<int>& Communicator::former_ranks() const noexcept {
  return shared_->former_ranks;
}

void Communicator::start_heartbeat(std::chrono::milliseconds interval) {
  shared_->heartbeat_interval = interval;
  const std::weak_ptr<ProgressEngine> engine = shared_->engine;
  const std::uint64_t generation = shared_->generation;
  // A lost peer or a re-formation under way fails what is pending (every communicator of this
  // world may wait on the peer, or on ranks that have left for the next generation) and what the
  // world is asked later: its peers are gone or elsewhere.
  auto fail = [engine](const Error& error) {
    if (auto e = engine.lock()) {
      e->abort(0, error);
      e->abort(1, error);  // the world's stream (comm id 0): later operations fail at once
    }
  };
  shared_->heartbeat = std::make_unique<HeartbeatMonitor>(
      shared_->root_store, generation, rank(), size(), interval,
      [fail](int peer, const std::string& why) {
        fail(Error(ErrorCode::PeerLost, fmt::format("rank {} is lost: {}", peer, why)));
      },
      [fail, generation] {
        fail(Error(ErrorCode::Aborted,
                   fmt::format("generation {} is being formed (Communicator::reform): ranks have "
                               "left generation {}, whose operations cannot finish",
                               generation + 1, generation)));
      });
}

std::vector<std::pair<int, std::string>> Communicator::lost_peers() const {
  // The transport speaks world ranks; translate to this communicator's.
  std::vector<std::pair<int, std::string>> lost;
  auto found = shared_->engine->lost_peers();
  if (shared_->heartbeat) {
    for (auto& beat : shared_->heartbeat->lost()) {
      const int r = beat.first;
      if (std::none_of(found.begin(), found.end(), [r](const auto& f) { return f.first == r; })) {
        found.push_back(std::move(beat));
      }
    }
    std::sort(found.begin(), found.end());
  }
  for (auto& [world_rank, how] : found) {
    const auto& w = group_->world_ranks;
    const auto it = std::find(w.begin(), w.end(), world_rank);
    if (it != w.end()) lost.emplace_back(static_cast<int>(it - w.begin()), std::move(how));
  }
  return lost;
}

int Communicator::joiners_waiting() const {
  Store& root = *shared_->root_store;
  const std::uint64_t next = shared_->generation + 1;
  return static_cast<int>(root.add(reform_key(next, "joiners"), 0));
}

std::unique_ptr<Communicator> Communicator::reform(const ReformOptions& options) {
  if (group_->comm_id != 0) {
    throw Error(ErrorCode::InvalidArgument,
                "reform: only a world communicator (from create(), from_env(), reform() or "
                "join()) can be re-formed, not one from split(); re-form the world, then split it");
  }
  check_reform_options(options, size());
  const std::chrono::milliseconds deadline_ms =
      options.deadline.count() > 0 ? options.deadline : timeout();
  const auto deadline = Clock::now() + deadline_ms;
  Store& root = *shared_->root_store;
  const std::uint64_t next = shared_->generation + 1;
  const int me = rank();

  // 1. Register this rank's view of who is gone.
  std::map<int, std::string> gone;
  for (const int r : options.exclude) gone.emplace(r, "excluded by rank " + std::to_string(me));
  for (auto& [r, how] : lost_peers()) gone.emplace(r, std::move(how));
  {
    Json view = Json::object();
    for (const auto& [r, why] : gone) view[std::to_string(r)] = why;
    root.set(reform_key(next, fmt::format("view/{}", me)), to_text(view));
    root.add(reform_key(next, fmt::format("seen/{}", me)), 1);
  }

  // 2. The first to arrive decides.
  const std::string decision_key = reform_key(next, "decision");
  if (root.add(reform_key(next, "decider"), 1) == 1) {
    root.set(reform_key(next, "decider_rank"), std::to_string(me));
    std::set<int> heard;  // ranks whose registration has been read
    while (true) {
      for (int r = 0; r < size(); ++r) {
        if (heard.contains(r) || gone.contains(r)) continue;
        if (root.add(reform_key(next, fmt::format("seen/{}", r)), 0) == 0) continue;
        heard.insert(r);
        const Json view =
            from_bytes(root.get(reform_key(next, fmt::format("view/{}", r)), deadline_ms));
        for (const auto& [lost, why] : view.items()) {
          gone.emplace(std::stoi(lost),
                       fmt::format("rank {} reports: {}", r, why.get<std::string>()));
        }
      }
      for (auto& [r, how] : lost_peers()) gone.emplace(r, std::move(how));
      int missing = 0;
      for (int r = 0; r < size(); ++r) missing += (!heard.contains(r) && !gone.contains(r)) ? 1 : 0;
      if (missing == 0) break;
      if (Clock::now() >= deadline) {
        for (int r = 0; r < size(); ++r) {
          if (!heard.contains(r) && !gone.contains(r)) {
            gone.emplace(r, fmt::format("did not arrive within {} ms", deadline_ms.count()));
          }
        }
        break;
      }
      std::this_thread::sleep_for(kPoll);
    }
    Decision d;
    for (int r = 0; r < size(); ++r) {
      if (heard.contains(r) && !gone.contains(r)) d.members.push_back(r);
    }
    // Drawing a ticket past this count means "too late": such joiners wait for the next one.
    if (options.admit_joiners) {
      const int drawn = static_cast<int>(root.add(reform_key(next, "joiners"), 0));
      d.joiners = drawn / options.joiners_multiple * options.joiners_multiple;
    }
    d.left_out = gone;
    d.heartbeat_ms = shared_->heartbeat_interval.count();
    d.streams = CommOptions::default_streams();
    for (const auto& [r, why] : d.left_out) {
      spdlog::warn("strait: generation {} leaves out rank {} of generation {}: {}", next, r,
                   shared_->generation, why);
    }
    root.set(decision_key, encode(d));
    root.add("strait/reform/latest", static_cast<std::int64_t>(next - latest_generation(root)));
  }

  // 3. Read the decision; create the new world.
  const Decision d = read_decision(root, next, deadline, deadline_ms);
  const auto at = std::find(d.members.begin(), d.members.end(), me);
  if (at == d.members.end()) {
    const auto why = d.left_out.find(me);
    throw Error(ErrorCode::Aborted,
                fmt::format("reform: rank {} of generation {} was left out of generation {} ({}); "
                            "it may come back through Communicator::join()",
                            me, shared_->generation, next,
                            why != d.left_out.end() ? why->second : "not registered in time"));
  }
  const int new_rank = static_cast<int>(at - d.members.begin());
  const int new_size = static_cast<int>(d.members.size()) + d.joiners;
  CommOptions o;
  o.timeout = timeout();
  o.algorithms = shared_->algorithms;
  std::vector<int> former = d.members;
  former.resize(static_cast<std::size_t>(new_size), -1);
  return create_world(
      std::make_shared<OwningPrefixStore>(fmt::format("strait/gen/{}", next), shared_->root_store),
      new_rank, new_size, reformed_options(o, d, new_size), shared_->root_store, next,
      std::move(former));
}

std::unique_ptr<Communicator> Communicator::join(std::shared_ptr<Store> store,
                                                 const CommOptions& options) {
  if (!store) throw Error(ErrorCode::InvalidArgument, "Communicator::join: the store is null");
  const auto deadline = Clock::now() + options.timeout;
  std::uint64_t next = latest_generation(*store) + 1;
  while (true) {
    const auto ticket = static_cast<int>(store->add(reform_key(next, "joiners"), 1) - 1);
    const std::string decision_key = reform_key(next, "decision");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Bytes bytes;
    try {
      bytes = store->get(decision_key, std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout,
                  fmt::format("Communicator::join: no reform admitted this process within {} ms "
                              "(it waited for generation {} with ticket {}): the members must call "
                              "Communicator::reform()",
                              options.timeout.count(), next, ticket));
    }
    const Decision d = parse_decision(bytes);
    if (ticket >= d.joiners) {
      ++next;  // came too late for this one: wait for the next
      continue;
    }
    const int new_size = static_cast<int>(d.members.size()) + d.joiners;
    const int new_rank = static_cast<int>(d.members.size()) + ticket;
    std::vector<int> former = d.members;
    former.resize(static_cast<std::size_t>(new_size), -1);
    auto view = std::make_shared<OwningPrefixStore>(fmt::format("strait/gen/{}", next), store);
    return create_world(std::move(view), new_rank, new_size, reformed_options(options, d, new_size),
                        std::move(store), next, std::move(former));
  }
}

}  // namespace strait::comm
