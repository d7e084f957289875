// Communicator's creation (create, from_env), its sites (setup_sites, STRAIT_SITES=measure),
// split and lifetime: everything of comm/communicator.h but the operations, which go through
// Communicator::post (communicator.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "comm/algorithms/codec_rules.h"
#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/dissemination_barrier.h"
#include "comm/algorithms/hierarchical_allreduce.h"
#include "comm/algorithms/local_mailbox.h"
#include "comm/algorithms/selection.h"
#include "comm/bootstrap/launch_env.h"
#include "comm/collective_describe.h"
#include "comm/communicator.h"
#include "comm/communicator_shared.h"
#include "comm/compress/compression_state.h"
#include "comm/debug_log.h"
#include "comm/device_collectives.h"
#include "comm/flight_dump.h"
#include "comm/flight_recorder.h"
#include "comm/links.h"
#include "comm/progress_engine.h"
#include "comm/symmetric_heap.h"
#include "comm/transport/sealed_transport.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"
#include "core/params.h"

namespace strait::comm {

using kernels::DType;

std::chrono::milliseconds CommOptions::default_timeout() {
  const std::optional<std::string> text = params::text("STRAIT_TIMEOUT_S");
  if (!text) return std::chrono::seconds(300);
  const char* v = text->c_str();
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  // At least a millisecond (the unit the engine works in), at most about 11 days.
  if (*end != '\0' || !(s >= 0.001 && s <= 1e6)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("STRAIT_TIMEOUT_S={} is not a number of seconds between 0.001 and "
                            "1e6: it is the deadline of every collective (default 300)",
                            v));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

int CommOptions::default_streams() {
  const std::optional<std::string> text = params::text("STRAIT_STREAMS");
  if (!text) return 1;
  const char* v = text->c_str();
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > kMaxLanes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("STRAIT_STREAMS={} is not a whole number from 1 to {}: it is how many "
                            "connections carry the messages to each peer on another host "
                            "(default 1)",
                            v, kMaxLanes));
  }
  return static_cast<int>(n);
}

std::chrono::milliseconds CommOptions::default_heartbeat() {
  const std::optional<std::string> text = params::text("STRAIT_HEARTBEAT_S");
  if (!text) return std::chrono::milliseconds(0);
  const char* v = text->c_str();
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s == 0 || (s >= 0.001 && s <= 3600))) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("STRAIT_HEARTBEAT_S={} is not 0 or a number of seconds between 0.001 "
                            "and 3600: it is the heartbeat interval (a peer silent for {} of them "
                            "is lost; comm/heartbeat.h)",
                            v, HeartbeatMonitor::kLeaseIntervals));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

std::size_t CommOptions::default_single_copy_min() {
  const std::optional<std::string> set = params::text("STRAIT_SINGLE_COPY_MIN");
  if (!set) return kDefaultSingleCopyMin;
  const char* v = set->c_str();
  if (*set == "off" || *set == "0") return 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  std::size_t scale = 1;
  const std::string_view suffix(end);
  if (suffix == "K" || suffix == "k") scale = std::size_t{1} << 10;
  if (suffix == "M" || suffix == "m") scale = std::size_t{1} << 20;
  if (suffix == "G" || suffix == "g") scale = std::size_t{1} << 30;
  const bool suffix_ok = suffix.empty() || scale != 1;
  if (end == v || !suffix_ok || n == 0 || n > (std::size_t{1} << 40) / scale || n * scale < 64) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("STRAIT_SINGLE_COPY_MIN={} is neither \"off\" nor a size of at least "
                            "64 bytes (like 262144, 256K or 1M): collective messages of at "
                            "least that size to ranks on this host are copied once, straight "
                            "from the sender's memory (default {})",
                            v, kDefaultSingleCopyMin));
  }
  return static_cast<std::size_t>(n) * scale;
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommOptions& options) {
  std::vector<int> identity(static_cast<std::size_t>(std::max(size, 0)));
  for (int i = 0; i < size; ++i) identity[static_cast<std::size_t>(i)] = i;
  std::shared_ptr<Store> root = store;
  return create_world(std::move(store), rank, size, options, std::move(root), 0,
                      std::move(identity));
}

std::unique_ptr<Communicator> Communicator::create_world(std::shared_ptr<Store> store, int rank,
                                                         int size, const CommOptions& options,
                                                         std::shared_ptr<Store> root,
                                                         std::uint64_t generation,
                                                         std::vector<int> former_ranks) {
  if (!store) throw Error(ErrorCode::InvalidArgument, "Communicator::create: the store is null");
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("Communicator::create: rank {} of world size {} is out of range (world "
                            "sizes 1..{})",
                            rank, size, kMaxRanks));
  }
  if (options.streams < 1 || options.streams > kMaxLanes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("Communicator::create: CommOptions::streams is {}; 1 .. {} are "
                            "possible",
                            options.streams, kMaxLanes));
  }
  // Read before connecting; a malformed value is reported after the ranks have compared their
  // readings (setup_sites), so that the others fail too instead of waiting for this rank.
  std::optional<Sites> sites;
  std::string sites_error;
  try {
    sites = Sites::from_environment(size, options.sites);
  } catch (const Error& e) {
    sites_error = e.what();
  }
  // Read before connecting, so that a malformed STRAIT_TUNE fails at once.
  auto algorithms =
      options.algorithms
          ? options.algorithms
          : std::make_shared<const AlgorithmTable>(AlgorithmTable::from_environment());
  check_rule_codecs(*algorithms);
  std::unique_ptr<Transport> transport =
      seal_links(std::make_unique<UcxTransport>(*store, "strait/ucx", rank, size, options.timeout,
                                                options.streams, options.single_copy_min),
                 options.secret_file, options.encrypt, sites ? sites->site_of : std::vector<int>{},
                 *store, "strait/seal", options.timeout);
  auto shared = std::make_shared<Shared>();
  shared->algorithms = std::move(algorithms);
  shared->root_store = std::move(root);  // reform() agrees through it (comm/reform.h)
  shared->generation = generation;
  shared->former_ranks = std::move(former_ranks);
  shared->store = std::move(store);
  shared->engine = std::make_shared<ProgressEngine>(std::move(transport));
  auto group = std::make_shared<Group>();
  group->comm_id = 0;
  group->rank = rank;
  group->world_ranks.resize(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) group->world_ranks[static_cast<std::size_t>(i)] = i;
  // Sealed links stay sealed: short vectors then go through them too, not through shared memory.
  const bool sealed = dynamic_cast<const SealedTransport*>(&shared->engine->transport()) != nullptr;
  group->mailbox = LocalMailbox::create(*shared->store, "strait/mailbox/0", rank, size,
                                        options.timeout, sealed ? "links are sealed" : "");
  if (group->mailbox) group->symmetric = std::make_shared<SymmetricMemory>(rank, size);
  auto world =
      std::make_unique<Communicator>(Key{}, std::move(shared), std::move(group), options.timeout);
  // No rank leaves creation (and could finish and tear down its endpoints) before every rank has
  // connected to it: a peer still connecting would otherwise find it gone. It takes the last
  // sequence number, so the caller's operations are numbered from 0 (its messages are all
  // consumed long before the sequence numbers wrap around to it).
  auto op = std::make_unique<DisseminationBarrier>(OpContext{world->group_, kSeqMask});
  op->set_fingerprint(Fingerprint{.seq = kSeqMask, .kind = CollectiveKind::Barrier});
  OpSummary what = OpSummary::of(CollectiveArgs::barrier(), 0, rank, size);
  what.name = "connection barrier";
  what.seq = kSeqMask;
  world
      ->submit(
          std::move(op), [what] { return what.describe(); }, true)
      .wait();
  world->setup_sites(std::move(sites), sites_error, options.streams);
  if (options.heartbeat.count() > 0) world->start_heartbeat(options.heartbeat);
  return world;
}

void Communicator::setup_sites(std::optional<Sites> mine, const std::string& error, int streams) {
  // Every rank learns every rank's reading (status: 0 read, 1 failed, 2 measure; its hash; its
  // stream count), so that a rank with a bad or different setting makes all of them fail at once.
  const bool measure = !mine && error.empty();
  const std::int64_t status = !error.empty() ? 1 : (measure ? 2 : 0);
  const std::int64_t words[3] = {status, mine ? static_cast<std::int64_t>(mine->hash()) : 0,
                                 streams};
  std::vector<std::int64_t> all(static_cast<std::size_t>(3 * size()));
  allgather(words, all.data(), 3, DType::I64);
  if (!error.empty()) throw Error(ErrorCode::InvalidArgument, error);
  std::vector<int> failed;
  std::vector<int> differ;
  std::vector<int> other_streams;
  for (int r = 0; r < size(); ++r) {
    const auto at = 3 * static_cast<std::size_t>(r);
    if (all[at] == 1) failed.push_back(r);
    if (all[at] != words[0] || all[at + 1] != words[1]) differ.push_back(r);
    if (all[at + 2] != streams) other_streams.push_back(r);
  }
  if (!failed.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("rank(s) {} could not read their sites (CommOptions::sites, "
                            "STRAIT_SITES, STRAIT_TOPOLOGY_FILE); their errors say why",
                            fmt::join(failed, ", ")));
  }
  if (!other_streams.empty()) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("rank {} uses {} stream(s) per remote peer, but rank(s) {} use "
                            "another count: set the same STRAIT_STREAMS (CommOptions::streams) on "
                            "every rank",
                            rank(), streams, fmt::join(other_streams, ", ")));
  }
  if (!differ.empty()) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("rank {} has the sites {}, but rank(s) {} have other sites: every rank "
                            "must see the same CommOptions::sites, STRAIT_SITES and "
                            "STRAIT_TOPOLOGY_FILE",
                            rank(), mine ? mine->describe() : "STRAIT_SITES=measure",
                            fmt::join(differ, ", ")));
  }
  // Clustering needs bandwidth only: one timed 4 MiB transfer per pair after an untimed one (and
  // the probe's few ping-pongs, for the latency it subtracts), as strait tune measures it.
  constexpr LinkOptions kSitesProbe{.pings = 1, .bulk_bytes = 4 << 20, .bulk_reps = 1};
  Sites sites = measure ? cluster_by_bandwidth(measure_links(*this, kSitesProbe).bandwidth_MBps)
                        : std::move(*mine);
  if (measure) sites.source = fmt::format("STRAIT_SITES=measure: {} MB/s", sites.source);
  if (measure && rank() == 0) spdlog::info("strait: sites {}", sites.describe());
  // Ids for the site groups (one: sites are disjoint) and for each shard's inter-site group.
  int shards = 1;
  for (const auto& m : sites.members()) shards = std::max(shards, static_cast<int>(m.size()));
  // One site needs no shard groups (nothing crosses sites): one id, whatever the world size.
  const int needed = sites.count() > 1 ? 1 + shards : 1;
  std::int64_t base = 0;
  if (rank() == 0) base = shared_->store->add("strait/comm_ids", needed) - needed + 1;
  broadcast(&base, 1, DType::I64, 0);
  if (base + needed > kMaxComms) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("the hierarchical allreduce of {} needs {} communicator ids, but "
                            "only {} of {} are left (comm/transport/tag.h)",
                            sites.describe(), needed, kMaxComms - base, kMaxComms));
  }
  hierarchy_ = Hierarchy::build(sites, rank(), static_cast<int>(base), static_cast<int>(base) + 1);
  sites_ = std::move(sites);
  // The caller's operations are numbered from 0, and its statistics start at 0. Safe to reuse
  // the numbers: each of the operations above has consumed every message sent to this rank under
  // its number before it completed.
  for (auto& c : counters_) c.store(0, std::memory_order_relaxed);
  if (recorder_) recorder_->clear();
  const std::lock_guard lock(mutex_);
  seq_ = 0;
}

std::unique_ptr<Communicator> Communicator::from_env(const CommOptions& options) {
  const LaunchEnv env = launch_env_from_environment();
  std::shared_ptr<Store> store =
      make_launch_store(env, options.timeout, options.timeout, options.secret_file);
  return create(std::move(store), env.rank, env.world_size, options);
}

Communicator::Communicator(Key /*key*/, std::shared_ptr<Shared> shared,
                           std::shared_ptr<const Group> group, std::chrono::milliseconds timeout)
    : shared_(std::move(shared)),
      group_(std::move(group)),
      timeout_ms_(timeout.count()),
      device_(std::make_unique<DeviceComm>(shared_->store, group_->comm_id, group_->rank,
                                           group_->size())),
      compression_(std::make_shared<CompressionState>()),
      sites_(Sites::single(group_->size())) {
  if (group_->comm_id == 0) debug::set_rank(group_->rank);
  if (const std::size_t entries = FlightRecorder::entries_from_env(); entries > 0) {
    recorder_ = std::make_shared<FlightRecorder>(entries, group_->comm_id, group_->rank,
                                                 group_->world_ranks, shared_->generation);
    fr::register_recorder(recorder_);
  }
  debug::log(debug::Level::Info, debug::kInit,
             "comm {} (generation {}): rank {} of {}, world ranks {}, flight recorder {} entries",
             group_->comm_id, shared_->generation, group_->rank, group_->size(),
             fmt::join(group_->world_ranks, ","),
             recorder_ ? FlightRecorder::entries_from_env() : 0);
}

Communicator::~Communicator() {
  // What the destruction fails below is no hang or fault: no dump for it.
  if (recorder_) (void)recorder_->first_failure();
  // Pending operations of this communicator cannot outlive it: their buffers may go with it, and
  // they count their bytes in counters_. Wait until the engine has failed them (it outlives a
  // sub-communicator), so that none is advanced once this returns.
  shared_->engine->abort_and_wait(static_cast<std::uint64_t>(group_->comm_id) + 1,
                                  "the communicator was destroyed");
}

int Communicator::rank() const noexcept {
  return group_->rank;
}
int Communicator::size() const noexcept {
  return group_->size();
}
bool Communicator::shares_memory() const noexcept {
  return group_->mailbox != nullptr;
}
const Sites& Communicator::sites() const noexcept {
  return sites_;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  // Everyone learns everyone's (color, key); members are then ordered by (key, old rank).
  const std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(static_cast<std::size_t>(2 * size()));
  allgather(mine, all.data(), 2, DType::I64);
  std::uint64_t split_index = 0;
  {
    const std::lock_guard lock(mutex_);
    split_index = splits_++;
  }
  if (color < 0) return nullptr;

  std::vector<std::tuple<std::int64_t, int>> members;  // (key, old rank)
  for (std::size_t r = 0; r < static_cast<std::size_t>(size()); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], static_cast<int>(r));
  }
  std::sort(members.begin(), members.end());
  auto group = std::make_shared<Group>();
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int old_rank = std::get<1>(members[i]);
    if (old_rank == rank()) group->rank = static_cast<int>(i);
    group->world_ranks.push_back(group_->world_ranks[static_cast<std::size_t>(old_rank)]);
  }
  // A job-wide unique id, drawn by the new group's first member and shared through the store.
  const std::string id_key =
      fmt::format("strait/split/{}/{}/{}", group_->comm_id, split_index, color);
  std::int64_t id = 0;
  if (group->rank == 0) {
    id = shared_->store->add("strait/comm_ids", 1);
    shared_->store->set(id_key, std::to_string(id));
  } else {
    id = std::stoll(shared_->store->get_string(id_key, timeout()));
  }
  if (id >= kMaxComms) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("split: this job has created {} communicators; at most {} can exist "
                            "(comm/transport/tag.h)",
                            id, kMaxComms - 1));
  }
  group->comm_id = static_cast<int>(id);
  // A sub-communicator of ranks all on this host gets its own mailbox (the world's may have none).
  const bool sealed =
      dynamic_cast<const SealedTransport*>(&shared_->engine->transport()) != nullptr;
  group->mailbox =
      LocalMailbox::create(*shared_->store, fmt::format("strait/mailbox/{}", id), group->rank,
                           group->size(), timeout(), sealed ? "links are sealed" : "");
  if (group->mailbox) {
    group->symmetric = std::make_shared<SymmetricMemory>(group->rank, group->size());
  }
  return std::make_unique<Communicator>(Key{}, shared_, std::move(group), timeout());
}

void Communicator::abort(const std::string& why) {
  // The dump first: it shows the operations as abort() found them.
  if (recorder_ && recorder_->first_failure()) {
    debug::log(debug::Level::Warn, debug::kColl, "comm {} aborted ({}); flight recorder dump: {}",
               group_->comm_id, why, fr::dump_all("abort", why));
  }
  device_->abort();
  shared_->engine->abort(static_cast<std::uint64_t>(group_->comm_id) + 1, why);
}

void Communicator::set_stream(kernels::CudaStream stream) noexcept {
  device_->set_stream(stream);
}
CommStats Communicator::stats() const noexcept {
  CommStats s;
  const auto bytes = [this](StatSlot slot) {
    return counters_[static_cast<std::size_t>(slot)].load(std::memory_order_relaxed);
  };
  s.allreduce_bytes = bytes(StatSlot::Allreduce);
  s.broadcast_bytes = bytes(StatSlot::Broadcast);
  s.allgather_bytes = bytes(StatSlot::Allgather);
  s.send_bytes = bytes(StatSlot::Send);
  s.reduce_scatter_bytes = bytes(StatSlot::ReduceScatter);
  s.reduce_bytes = bytes(StatSlot::Reduce);
  s.gather_bytes = bytes(StatSlot::Gather);
  s.scatter_bytes = bytes(StatSlot::Scatter);
  s.alltoall_bytes = bytes(StatSlot::Alltoall);
  s.single_copy_bytes = shared_->engine->transport().single_copy_bytes();
  if (group_->symmetric) s.symmetric_bytes = group_->symmetric->read_in_place();
  return s;
}

}  // namespace strait::comm
