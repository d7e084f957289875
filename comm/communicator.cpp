#include "comm/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <tuple>
#include <vector>

#include "comm/algorithms/binomial_broadcast.h"
#include "comm/algorithms/binomial_gather.h"
#include "comm/algorithms/binomial_reduce.h"
#include "comm/algorithms/binomial_scatter.h"
#include "comm/algorithms/codec_rules.h"
#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/compressed_allgather_allreduce.h"
#include "comm/algorithms/compressed_ring_allreduce.h"
#include "comm/algorithms/dissemination_barrier.h"
#include "comm/algorithms/hierarchical_allreduce.h"
#include "comm/algorithms/pairwise_alltoall.h"
#include "comm/algorithms/point_to_point.h"
#include "comm/algorithms/powersgd_allreduce.h"
#include "comm/algorithms/rabenseifner_allreduce.h"
#include "comm/algorithms/recursive_doubling_allreduce.h"
#include "comm/algorithms/ring_allgather.h"
#include "comm/algorithms/ring_allreduce.h"
#include "comm/algorithms/ring_reduce_scatter.h"
#include "comm/algorithms/selection.h"
#include "comm/bootstrap/launch_env.h"
#include "comm/compress/compression_state.h"
#include "comm/device_call.h"
#include "comm/device_collectives.h"
#include "comm/progress_engine.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"

namespace strait::comm {

using kernels::DType;
using kernels::ReduceOp;

namespace {

// Argument checks of the collectives: each throws InvalidArgument saying what `what` was given.

void check_reduce_op(const char* what, DType dtype, ReduceOp op) {
  if (op == ReduceOp::Avg && !kernels::dtype_is_float(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: avg of {} is not defined; use sum and divide, or a "
                            "floating-point dtype",
                            what, kernels::dtype_name(dtype)));
  }
}

// The index of the first NaN or Inf in x[0, count), or count. Blocks are checked with an integer
// or-reduction of "exponent all ones", which vectorizes (a loop of std::isfinite does not): a 64
// MiB gradient costs a few ms instead of tens.
std::size_t first_non_finite(const float* x, std::size_t count) {
  constexpr std::size_t kBlock = 4096;
  constexpr std::uint32_t kExponent = 0x7f800000U;
  for (std::size_t b = 0; b < count; b += kBlock) {
    const std::size_t n = std::min(kBlock, count - b);
    std::uint32_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(x[b + i]) & kExponent) ==
                                        kExponent);
    }
    if (bad == 0) continue;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[b + i])) return b + i;
    }
  }
  return count;
}

void check_buffer(const char* what, const char* name, const void* buf, std::size_t bytes) {
  if (buf == nullptr && bytes != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: the {} buffer is null but must hold {} bytes", what, name, bytes));
  }
}

void check_span(const char* what, const char* name, std::span<const std::size_t> counts, int size) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} has {} entries; it needs one per rank of the communicator ({})",
                            what, name, counts.size(), size));
  }
}

// `inner` (inner_bytes) may lie within `outer` (outer_bytes) only at `in_place`.
void check_overlap(const char* what, const void* inner, std::size_t inner_bytes, const void* outer,
                   std::size_t outer_bytes, const void* in_place, const char* layout) {
  if (inner_bytes == 0 || outer_bytes == 0 || inner == in_place) return;
  const auto a = reinterpret_cast<std::uintptr_t>(inner);
  const auto b = reinterpret_cast<std::uintptr_t>(outer);
  if (a < b + outer_bytes && b < a + inner_bytes) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: the send and recv buffers overlap, but not in place (in place "
                            "means {}); use separate buffers or the in-place layout",
                            what, layout));
  }
}

const std::byte* at(const void* base, std::size_t bytes) {
  return static_cast<const std::byte*>(base) + bytes;
}

std::size_t sum(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

// "[3, 0, 5]", or the first 8 and the number of entries.
std::string list(std::span<const std::size_t> counts) {
  constexpr std::size_t kShown = 8;
  if (counts.size() <= kShown) return fmt::format("[{}]", fmt::join(counts, ", "));
  return fmt::format("[{}, ...] ({} entries)", fmt::join(counts.first(kShown), ", "),
                     counts.size());
}

std::vector<std::size_t> times(std::span<const std::size_t> counts, std::size_t factor) {
  std::vector<std::size_t> out(counts.begin(), counts.end());
  for (auto& c : out) c *= factor;
  return out;
}

}  // namespace

// What the communicators of one process share: the store and the progress engine (which owns the
// transport). Sub-communicators keep it alive.
struct Communicator::Shared {
  std::shared_ptr<Store> store;
  std::shared_ptr<ProgressEngine> engine;
  std::shared_ptr<const AlgorithmTable> algorithms;
};

std::chrono::milliseconds CommOptions::default_timeout() {
  const char* v = std::getenv("STRAIT_TIMEOUT_S");
  if (v == nullptr || *v == '\0') return std::chrono::seconds(300);
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
  const char* v = std::getenv("STRAIT_STREAMS");
  if (v == nullptr || *v == '\0') return 1;
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

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommOptions& options) {
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
  auto transport = std::make_unique<UcxTransport>(*store, "strait/ucx", rank, size, options.timeout,
                                                  options.streams);
  auto shared = std::make_shared<Shared>();
  shared->algorithms = std::move(algorithms);
  shared->store = std::move(store);
  shared->engine = std::make_shared<ProgressEngine>(std::move(transport));
  auto group = std::make_shared<Group>();
  group->comm_id = 0;
  group->rank = rank;
  group->world_ranks.resize(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) group->world_ranks[static_cast<std::size_t>(i)] = i;
  auto world =
      std::make_unique<Communicator>(Key{}, std::move(shared), std::move(group), options.timeout);
  // No rank leaves creation (and could finish and tear down its endpoints) before every rank has
  // connected to it: a peer still connecting would otherwise find it gone. It takes the last
  // sequence number, so the caller's operations are numbered from 0 (its messages are all
  // consumed long before the sequence numbers wrap around to it).
  auto op = std::make_unique<DisseminationBarrier>(world->group_, kSeqMask);
  op->set_fingerprint(Fingerprint{.seq = kSeqMask, .kind = Fingerprint::Kind::Barrier});
  world->submit(std::move(op), world->describe("connection barrier", kSeqMask, ""), true).wait();
  world->setup_sites(std::move(sites), sites_error, options.streams);
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
  Sites sites = measure ? cluster_by_bandwidth(measure_bandwidth(), size()) : std::move(*mine);
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
                            "only {} of {} are left (comm/tag.h)",
                            sites.describe(), needed, kMaxComms - base, kMaxComms));
  }
  hierarchy_ = Hierarchy::build(sites, rank(), static_cast<int>(base), static_cast<int>(base) + 1);
  sites_ = std::move(sites);
  // The caller's operations are numbered from 0, and its statistics start at 0. Safe to reuse
  // the numbers: each of the operations above has consumed every message sent to this rank under
  // its number before it completed.
  for (auto* c : {&counters_.allreduce, &counters_.broadcast, &counters_.allgather, &counters_.send,
                  &counters_.reduce_scatter, &counters_.reduce, &counters_.gather,
                  &counters_.scatter, &counters_.alltoall}) {
    c->store(0, std::memory_order_relaxed);
  }
  const std::lock_guard lock(mutex_);
  seq_ = 0;
}

std::vector<double> Communicator::measure_bandwidth() {
  // One pair at a time (a barrier between pairs), so that two transfers never share a link: a
  // 64 KiB warm-up round trip (connection set-up), then 4 MiB one way and a 1-byte answer.
  constexpr std::size_t kWarm = 64 << 10;
  constexpr std::size_t kBytes = 4 << 20;
  constexpr std::uint64_t kTag = kMaxUserTag;
  const auto p = static_cast<std::size_t>(size());
  const auto me = static_cast<std::size_t>(rank());
  std::vector<std::byte> buf(kBytes);
  std::byte ack{};
  std::vector<double> row(p, 0.0);
  for (std::size_t i = 0; i < p; ++i) {
    for (std::size_t j = i + 1; j < p; ++j) {
      const int pi = static_cast<int>(i);
      const int pj = static_cast<int>(j);
      if (me == i) {
        send(buf.data(), kWarm, pj, kTag);
        recv(&ack, 1, pj, kTag);
        const auto t0 = std::chrono::steady_clock::now();
        send(buf.data(), kBytes, pj, kTag);
        recv(&ack, 1, pj, kTag);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
        row[j] = static_cast<double>(kBytes) / std::max(took.count(), 1e-9);
      } else if (me == j) {
        recv(buf.data(), kWarm, pi, kTag);
        send(&ack, 1, pi, kTag);
        recv(buf.data(), kBytes, pi, kTag);
        send(&ack, 1, pi, kTag);
      }
      barrier();
    }
  }
  std::vector<double> all(p * p);
  allgather(row.data(), all.data(), p, DType::F64);
  // Row i holds what rank i measured to j > i; mirror it, so every rank has the same matrix.
  for (std::size_t i = 0; i < p; ++i) {
    for (std::size_t j = 0; j < i; ++j) all[i * p + j] = all[j * p + i];
  }
  return all;
}

std::unique_ptr<Communicator> Communicator::from_env(const CommOptions& options) {
  const LaunchEnv env = launch_env_from_environment();
  std::shared_ptr<Store> store = make_launch_store(env, options.timeout, options.timeout);
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
      sites_(Sites::single(group_->size())) {}

Communicator::~Communicator() {
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
const Sites& Communicator::sites() const noexcept {
  return sites_;
}

std::uint64_t Communicator::next_seq(std::uint64_t n) {
  const std::lock_guard lock(mutex_);
  const std::uint64_t first = seq_;
  seq_ += n;
  return first;
}

std::string Communicator::describe(const char* kind, std::uint64_t seq,
                                   const std::string& detail) const {
  return fmt::format("{} #{}{}{} on comm {} (rank {} of {})", kind, seq, detail.empty() ? "" : " ",
                     detail, group_->comm_id, group_->rank, group_->size());
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size()) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: rank {} is not in this communicator of size {}", what, peer, size()));
  }
}

Work Communicator::submit(std::unique_ptr<Op> op, std::string description, bool ordered,
                          DeadlineStart start) {
  return Work(shared_->engine->submit(std::move(op), std::move(description), timeout(),
                                      static_cast<std::uint64_t>(group_->comm_id) + 1, ordered,
                                      start));
}

Work Communicator::isend(const void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                         DeadlineStart start) {
  if (auto w = try_device(DeviceCall::send_to(buf, bytes, peer, tag), start)) return *w;
  check_peer(peer, "send");
  if (tag > kMaxUserTag) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("send: tag {} exceeds 2^37 - 1", tag));
  }
  auto op = std::make_unique<PointToPoint>(group_, &counters_.send, PointToPoint::Kind::Send, peer,
                                           tag, const_cast<void*>(buf), bytes);
  return submit(std::move(op),
                fmt::format("send of {} bytes to rank {} (tag {}) on comm {} (rank {} of {})",
                            bytes, peer, tag, group_->comm_id, rank(), size()),
                false, start);
}

Work Communicator::irecv(void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                         DeadlineStart start) {
  if (auto w = try_device(DeviceCall::recv_from(buf, bytes, peer, tag), start)) return *w;
  check_peer(peer, "recv");
  if (tag > kMaxUserTag) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("recv: tag {} exceeds 2^37 - 1", tag));
  }
  auto op = std::make_unique<PointToPoint>(group_, nullptr, PointToPoint::Kind::Recv, peer, tag,
                                           buf, bytes);
  return submit(std::move(op),
                fmt::format("recv of {} bytes from rank {} (tag {}) on comm {} (rank {} of {})",
                            bytes, peer, tag, group_->comm_id, rank(), size()),
                false, start);
}

void Communicator::send(const void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
  const ProgressEngine::CallerWillWait caller_waits;
  isend(buf, bytes, peer, tag).wait();
}

void Communicator::recv(void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
  const ProgressEngine::CallerWillWait caller_waits;
  irecv(buf, bytes, peer, tag).wait();
}

Work Communicator::ibarrier() {
  const auto seq = next_seq();
  auto op = std::make_unique<DisseminationBarrier>(group_, seq);
  op->set_fingerprint(Fingerprint{.seq = seq, .kind = Fingerprint::Kind::Barrier});
  return submit(std::move(op), describe("barrier", seq, ""), true);
}

void Communicator::barrier() {
  const ProgressEngine::CallerWillWait caller_waits;
  ibarrier().wait();
}

Work Communicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  if (auto w = try_device(DeviceCall::broadcast(buf, count, dtype, root))) return *w;
  check_peer(root, "broadcast root");
  check_buffer("broadcast", "data", buf, count * kernels::dtype_size(dtype));
  const auto seq = next_seq();
  auto op = std::make_unique<BinomialBroadcast>(group_, seq, &counters_.broadcast, buf,
                                                count * kernels::dtype_size(dtype), root);
  op->set_fingerprint(Fingerprint{.seq = seq,
                                  .count = count,
                                  .root = root,
                                  .kind = Fingerprint::Kind::Broadcast,
                                  .dtype = static_cast<std::uint8_t>(dtype)},
                      CollectiveOp::Exchange::BothWays);
  return submit(
      std::move(op),
      describe("broadcast", seq,
               fmt::format("({} x {}, root {})", kernels::dtype_name(dtype), count, root)),
      true);
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  const ProgressEngine::CallerWillWait caller_waits;
  ibroadcast(buf, count, dtype, root).wait();
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op) {
  if (auto w = try_device(DeviceCall::allreduce(send, recv, count, dtype, op))) return *w;
  check_reduce_op("allreduce", dtype, op);
  check_buffer("allreduce", "send", send, count * kernels::dtype_size(dtype));
  check_buffer("allreduce", "recv", recv, count * kernels::dtype_size(dtype));
  const auto seq = next_seq();
  // A pure function of what every rank agrees on (the fingerprint then checks the table too).
  Selection chosen = shared_->algorithms->choose(
      "allreduce", size(), count * kernels::dtype_size(dtype), sites_.count());
  std::unique_ptr<CollectiveOp> algo;
  // Looked up once: the registry is fixed at build time.
  static const auto kRecursiveDoubling = find_algorithm("allreduce", "recursive_doubling")->id;
  static const auto kRabenseifner = find_algorithm("allreduce", "rabenseifner")->id;
  static const AlgorithmInfo* const kRing = find_algorithm("allreduce", "ring");
  static const auto kHierarchical = find_algorithm("allreduce", "hierarchical")->id;
  // Without a hierarchy (a split communicator: one site), hierarchical is the ring.
  if (chosen.algorithm->id == kHierarchical && !hierarchy_) chosen.algorithm = kRing;
  const auto id = chosen.algorithm->id;
  const Fingerprint fingerprint{.seq = seq,
                                .count = count,
                                .kind = Fingerprint::Kind::Allreduce,
                                .dtype = static_cast<std::uint8_t>(dtype),
                                .op = static_cast<std::uint8_t>(op),
                                .algorithm = id,
                                .segment_bytes = chosen.params.segment_bytes};
  if (id == kHierarchical) {
    algo = std::make_unique<HierarchicalAllreduce>(
        group_, hierarchy_, seq, &counters_.allreduce, send, recv, count, dtype, op,
        InterSite{.segment_bytes = chosen.params.segment_bytes}, fingerprint);
  } else if (id == kRecursiveDoubling) {
    algo = std::make_unique<RecursiveDoublingAllreduce>(group_, seq, &counters_.allreduce, send,
                                                        recv, count, dtype, op);
  } else if (id == kRabenseifner) {
    algo = std::make_unique<RabenseifnerAllreduce>(group_, seq, &counters_.allreduce, send, recv,
                                                   count, dtype, op);
  } else {
    algo = std::make_unique<RingAllreduce>(group_, seq, &counters_.allreduce, send, recv, count,
                                           dtype, op, chosen.params.segment_bytes);
  }
  algo->set_fingerprint(fingerprint);
  return submit(std::move(algo),
                describe("allreduce", seq,
                         fmt::format("({} x {}, {}, {})", kernels::dtype_name(dtype), count,
                                     kernels::reduce_op_name(op), chosen.describe())),
                true);
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype,
                             ReduceOp op) {
  const ProgressEngine::CallerWillWait caller_waits;
  iallreduce(send, recv, count, dtype, op).wait();
}

Work Communicator::iallreduce_compressed(const float* send, float* recv, std::size_t count,
                                         ReduceOp op, const Compression& compression) {
  if (op != ReduceOp::Sum && op != ReduceOp::Avg) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("allreduce_compressed: op {} is not sum or avg: compressed "
                            "collectives reduce in fp32 after decoding, which only sums",
                            kernels::reduce_op_name(op)));
  }
  check_buffer("allreduce_compressed", "send", send, count * sizeof(float));
  check_buffer("allreduce_compressed", "recv", recv, count * sizeof(float));
  // "auto": the codec the tuned rules give this size (a pure function of what every rank agrees
  // on, like the algorithm; the fingerprint then checks the spec), "none" when no rule gives one.
  const bool automatic = compression.codec == "auto";
  const std::string codec =
      automatic ? shared_->algorithms->choose_codec("allreduce", size(), count * sizeof(float))
                      .value_or("none")
                : compression.codec;
  // Refused here, before anything is sent: the canonical spec is what ranks must agree on.
  const bool powersgd = PowerSgdOptions::names_powersgd(codec);
  std::optional<PowerSgdOptions> powersgd_options;
  std::string spec;
  if (powersgd) {
    powersgd_options = PowerSgdOptions::parse(codec);
    spec = powersgd_options->spec();
  } else {
    spec = make_codec_from_spec(codec)->spec();
  }
  std::shared_ptr<const PowerSgdPlan> plan;
  if (powersgd) {
    plan = std::make_shared<const PowerSgdPlan>(
        plan_powersgd(count, compression.matrices, *powersgd_options));
  }
  if (const std::size_t i = first_non_finite(send, count); i != count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("allreduce_compressed ({}): element {} of the input is {}: a "
                            "non-finite gradient cannot be compressed; check the loss scale and "
                            "learning rate",
                            spec, i, send[i]));
  }
  // Uncompressed by choice of the tuner: the plain allreduce, whose algorithm the same rules
  // tuned, is what `strait tune` measured for "none" (and is lossless, as the ring of `none`).
  if (automatic && spec == "none") return iallreduce(send, recv, count, DType::F32, op);
  const auto seq = next_seq(powersgd ? PowerSgdAllreduce::kSeqs : 1);
  const bool average = op == ReduceOp::Avg;
  const bool gathered = spec.starts_with("topk");
  std::unique_ptr<CollectiveOp> algo;
  std::uint64_t spec_hash = codec_spec_hash(spec);
  std::string detail;
  // Several sites: compress only between them (the sites' own networks are fast).
  const bool hierarchical = !powersgd && hierarchy_ && hierarchy_->multi_site();
  static const auto kHierarchical = find_algorithm("allreduce", "hierarchical")->id;
  if (powersgd) {
    spec_hash = plan->hash(spec);
    detail = fmt::format(
        ", {} of {} matrices compressed, {} elements plain", plan->compressed.size(),
        plan->layout_matrices == 0 ? std::size_t{1} : plan->layout_matrices, plan->plain_count);
  }
  const Fingerprint fingerprint{.seq = seq,
                                .count = count,
                                .counts = spec_hash,
                                .kind = Fingerprint::Kind::CompressedAllreduce,
                                .dtype = static_cast<std::uint8_t>(DType::F32),
                                .op = static_cast<std::uint8_t>(op),
                                .algorithm = hierarchical ? kHierarchical : std::uint8_t{0}};
  if (powersgd) {
    algo = std::make_unique<PowerSgdAllreduce>(group_, seq, &counters_.allreduce, send, recv,
                                               average, compression_, *powersgd_options, plan, spec,
                                               compression.key);
  } else if (hierarchical) {
    algo = std::make_unique<HierarchicalAllreduce>(
        group_, hierarchy_, seq, &counters_.allreduce, send, recv, count, DType::F32, op,
        InterSite{.codec_spec = spec, .key = compression.key, .state = compression_}, fingerprint);
  } else if (gathered) {
    algo = std::make_unique<CompressedAllgatherAllreduce>(group_, seq, &counters_.allreduce, send,
                                                          recv, count, average, compression_, spec,
                                                          compression.key);
  } else {
    algo = std::make_unique<CompressedRingAllreduce>(group_, seq, &counters_.allreduce, send, recv,
                                                     count, average, compression_, spec,
                                                     compression.key);
  }
  algo->set_fingerprint(fingerprint);
  return submit(
      std::move(algo),
      describe("allreduce_compressed", seq,
               fmt::format("(f32 x {}, {}, {}{}{}{})", count, kernels::reduce_op_name(op), spec,
                           detail, compression.key.empty() ? "" : ", error feedback",
                           hierarchical ? ", hierarchical" : "")),
      true);
}

void Communicator::allreduce_compressed(const float* send, float* recv, std::size_t count,
                                        ReduceOp op, const Compression& compression) {
  const ProgressEngine::CallerWillWait caller_waits;
  iallreduce_compressed(send, recv, count, op, compression).wait();
}

Work Communicator::iallgather(const void* send, void* recv, std::size_t count, DType dtype) {
  if (auto w = try_device(DeviceCall::allgather(send, recv, count, dtype))) return *w;
  check_buffer("allgather", "send", send, count * kernels::dtype_size(dtype));
  check_buffer("allgather", "recv", recv, count * kernels::dtype_size(dtype) * size());
  const auto seq = next_seq();
  auto op = std::make_unique<RingAllgather>(group_, seq, &counters_.allgather, send, recv,
                                            count * kernels::dtype_size(dtype));
  op->set_fingerprint(Fingerprint{.seq = seq,
                                  .count = count,
                                  .kind = Fingerprint::Kind::Allgather,
                                  .dtype = static_cast<std::uint8_t>(dtype)});
  return submit(
      std::move(op),
      describe("allgather", seq, fmt::format("({} x {})", kernels::dtype_name(dtype), count)),
      true);
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
  const ProgressEngine::CallerWillWait caller_waits;
  iallgather(send, recv, count, dtype).wait();
}

Work Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                   DType dtype, ReduceOp op) {
  if (auto w = try_device(DeviceCall::reduce_scatter(send, recv, recv_count, dtype, op))) return *w;
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), recv_count);
  return reduce_scatter_impl(send, recv, counts, dtype, op, false);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  ReduceOp op) {
  const ProgressEngine::CallerWillWait caller_waits;
  ireduce_scatter(send, recv, recv_count, dtype, op).wait();
}

Work Communicator::ireduce_scatter_v(const void* send, void* recv,
                                     std::span<const std::size_t> recv_counts, DType dtype,
                                     ReduceOp op) {
  return reduce_scatter_impl(send, recv, recv_counts, dtype, op, true);
}

void Communicator::reduce_scatter_v(const void* send, void* recv,
                                    std::span<const std::size_t> recv_counts, DType dtype,
                                    ReduceOp op) {
  const ProgressEngine::CallerWillWait caller_waits;
  ireduce_scatter_v(send, recv, recv_counts, dtype, op).wait();
}

Work Communicator::reduce_scatter_impl(const void* send, void* recv,
                                       std::span<const std::size_t> counts, DType dtype,
                                       ReduceOp op, bool v) {
  const char* what = v ? "reduce_scatter_v" : "reduce_scatter";
  const std::size_t elem = kernels::dtype_size(dtype);
  if (v) check_span(what, "recv_counts", counts, size());
  check_reduce_op(what, dtype, op);
  const auto r = static_cast<std::size_t>(rank());
  const std::size_t total = sum(counts);
  const std::size_t before =
      std::accumulate(counts.begin(), counts.begin() + rank(), std::size_t{0});
  check_buffer(what, "send", send, total * elem);
  check_buffer(what, "recv", recv, counts[r] * elem);
  check_overlap(what, recv, counts[r] * elem, send, total * elem, at(send, before * elem),
                v ? "recv == send + the prefix sum of recv_counts before this rank"
                  : "recv == send + rank() * recv_count elements");
  const auto seq = next_seq();
  auto algo = std::make_unique<RingReduceScatter>(group_, seq, &counters_.reduce_scatter, send,
                                                  recv, counts, dtype, op);
  algo->set_fingerprint(
      Fingerprint{.seq = seq,
                  .count = v ? total : counts[r],
                  .counts = v ? counts_hash(counts) : 0,
                  .kind = v ? Fingerprint::Kind::ReduceScatterV : Fingerprint::Kind::ReduceScatter,
                  .dtype = static_cast<std::uint8_t>(dtype),
                  .op = static_cast<std::uint8_t>(op)});
  const auto shape = v ? fmt::format("{} x {}", kernels::dtype_name(dtype), list(counts))
                       : fmt::format("{} x {} per rank", kernels::dtype_name(dtype), counts[r]);
  return submit(std::move(algo),
                describe(what, seq, fmt::format("({}, {})", shape, kernels::reduce_op_name(op))),
                true);
}

Work Communicator::iallgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                                DType dtype) {
  const char* what = "allgather_v";
  const std::size_t elem = kernels::dtype_size(dtype);
  check_span(what, "counts", counts, size());
  const auto r = static_cast<std::size_t>(rank());
  const std::size_t total = sum(counts);
  const std::size_t before =
      std::accumulate(counts.begin(), counts.begin() + rank(), std::size_t{0});
  check_buffer(what, "send", send, counts[r] * elem);
  check_buffer(what, "recv", recv, total * elem);
  check_overlap(what, send, counts[r] * elem, recv, total * elem, at(recv, before * elem),
                "send == recv + the prefix sum of counts before this rank");
  const auto seq = next_seq();
  const std::vector<std::size_t> bytes = times(counts, elem);
  auto op = std::make_unique<RingAllgather>(group_, seq, &counters_.allgather, send, recv,
                                            std::span<const std::size_t>(bytes));
  op->set_fingerprint(Fingerprint{.seq = seq,
                                  .count = total,
                                  .counts = counts_hash(counts),
                                  .kind = Fingerprint::Kind::AllgatherV,
                                  .dtype = static_cast<std::uint8_t>(dtype)});
  return submit(
      std::move(op),
      describe(what, seq, fmt::format("({} x {})", kernels::dtype_name(dtype), list(counts))),
      true);
}

void Communicator::allgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                               DType dtype) {
  const ProgressEngine::CallerWillWait caller_waits;
  iallgather_v(send, recv, counts, dtype).wait();
}

Work Communicator::ireduce(const void* send, void* recv, std::size_t count, DType dtype,
                           ReduceOp op, int root) {
  if (auto w = try_device(DeviceCall::reduce(send, recv, count, dtype, op, root))) return *w;
  const char* what = "reduce";
  check_peer(root, "reduce root");
  check_reduce_op(what, dtype, op);
  const std::size_t bytes = count * kernels::dtype_size(dtype);
  check_buffer(what, "send", send, bytes);
  if (rank() == root) {
    check_buffer(what, "root's recv", recv, bytes);
    check_overlap(what, send, bytes, recv, bytes, recv, "send == recv on the root");
  }
  const auto seq = next_seq();
  auto algo =
      std::make_unique<BinomialReduce>(group_, seq, &counters_.reduce, send,
                                       rank() == root ? recv : nullptr, count, dtype, op, root);
  algo->set_fingerprint(Fingerprint{.seq = seq,
                                    .count = count,
                                    .root = root,
                                    .kind = Fingerprint::Kind::Reduce,
                                    .dtype = static_cast<std::uint8_t>(dtype),
                                    .op = static_cast<std::uint8_t>(op)},
                        CollectiveOp::Exchange::BothWays);
  return submit(std::move(algo),
                describe(what, seq,
                         fmt::format("({} x {}, {}, root {})", kernels::dtype_name(dtype), count,
                                     kernels::reduce_op_name(op), root)),
                true);
}

void Communicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                          int root) {
  const ProgressEngine::CallerWillWait caller_waits;
  ireduce(send, recv, count, dtype, op, root).wait();
}

Work Communicator::igather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  if (auto w = try_device(DeviceCall::gather(send, recv, count, dtype, root))) return *w;
  return gather_scatter_impl(send, recv, count, dtype, root, true);
}

void Communicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  const ProgressEngine::CallerWillWait caller_waits;
  igather(send, recv, count, dtype, root).wait();
}

Work Communicator::iscatter(const void* send, void* recv, std::size_t count, DType dtype,
                            int root) {
  if (auto w = try_device(DeviceCall::scatter(send, recv, count, dtype, root))) return *w;
  return gather_scatter_impl(send, recv, count, dtype, root, false);
}

void Communicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  const ProgressEngine::CallerWillWait caller_waits;
  iscatter(send, recv, count, dtype, root).wait();
}

Work Communicator::gather_scatter_impl(const void* send, void* recv, std::size_t count, DType dtype,
                                       int root, bool gather) {
  const char* what = gather ? "gather" : "scatter";
  check_peer(root, gather ? "gather root" : "scatter root");
  const std::size_t bytes = count * kernels::dtype_size(dtype);
  const std::size_t all = bytes * static_cast<std::size_t>(size());
  // Gather: every rank's send is one block, the root's recv all of them; scatter: the reverse.
  const void* one = gather ? send : recv;
  const void* many = gather ? recv : send;
  check_buffer(what, gather ? "send" : "recv", one, bytes);
  if (rank() == root) {
    check_buffer(what, gather ? "root's recv" : "root's send", many, all);
    check_overlap(what, one, bytes, many, all, at(many, static_cast<std::size_t>(root) * bytes),
                  gather ? "send == recv + root * count elements on the root"
                         : "recv == send + root * count elements on the root");
  }
  const auto seq = next_seq();
  std::unique_ptr<CollectiveOp> op;
  if (gather) {
    op = std::make_unique<BinomialGather>(group_, seq, &counters_.gather, send,
                                          rank() == root ? recv : nullptr, bytes, root);
  } else {
    op = std::make_unique<BinomialScatter>(group_, seq, &counters_.scatter,
                                           rank() == root ? send : nullptr, recv, bytes, root);
  }
  op->set_fingerprint(
      Fingerprint{.seq = seq,
                  .count = count,
                  .root = root,
                  .kind = gather ? Fingerprint::Kind::Gather : Fingerprint::Kind::Scatter,
                  .dtype = static_cast<std::uint8_t>(dtype)},
      CollectiveOp::Exchange::BothWays);
  return submit(
      std::move(op),
      describe(what, seq,
               fmt::format("({} x {} per rank, root {})", kernels::dtype_name(dtype), count, root)),
      true);
}

Work Communicator::ialltoall(const void* send, void* recv, std::size_t count, DType dtype) {
  if (auto w = try_device(DeviceCall::alltoall(send, recv, count, dtype))) return *w;
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count);
  return alltoall_impl(send, counts, recv, counts, dtype, false);
}

void Communicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
  const ProgressEngine::CallerWillWait caller_waits;
  ialltoall(send, recv, count, dtype).wait();
}

Work Communicator::ialltoall_v(const void* send, std::span<const std::size_t> send_counts,
                               void* recv, std::span<const std::size_t> recv_counts, DType dtype) {
  return alltoall_impl(send, send_counts, recv, recv_counts, dtype, true);
}

void Communicator::alltoall_v(const void* send, std::span<const std::size_t> send_counts,
                              void* recv, std::span<const std::size_t> recv_counts, DType dtype) {
  const ProgressEngine::CallerWillWait caller_waits;
  ialltoall_v(send, send_counts, recv, recv_counts, dtype).wait();
}

Work Communicator::alltoall_impl(const void* send, std::span<const std::size_t> send_counts,
                                 void* recv, std::span<const std::size_t> recv_counts, DType dtype,
                                 bool v) {
  const char* what = v ? "alltoall_v" : "alltoall";
  const std::size_t elem = kernels::dtype_size(dtype);
  if (v) {
    check_span(what, "send_counts", send_counts, size());
    check_span(what, "recv_counts", recv_counts, size());
  }
  const auto r = static_cast<std::size_t>(rank());
  if (send_counts[r] != recv_counts[r]) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: send_counts[{}] = {} but recv_counts[{}] = {}: what this rank "
                            "sends itself must fit what it receives from itself",
                            what, r, send_counts[r], r, recv_counts[r]));
  }
  const std::size_t send_bytes = sum(send_counts) * elem;
  const std::size_t recv_bytes = sum(recv_counts) * elem;
  check_buffer(what, "send", send, send_bytes);
  check_buffer(what, "recv", recv, recv_bytes);
  const bool same_layout = std::equal(send_counts.begin(), send_counts.end(), recv_counts.begin());
  check_overlap(what, send, send_bytes, recv, recv_bytes, same_layout ? recv : nullptr,
                "send == recv with send_counts == recv_counts");
  const auto seq = next_seq();
  const std::vector<std::size_t> sb = times(send_counts, elem);
  const std::vector<std::size_t> rb = times(recv_counts, elem);
  auto op =
      std::make_unique<PairwiseAlltoall>(group_, seq, &counters_.alltoall, send, sb, recv, rb);
  op->set_fingerprint(
      Fingerprint{.seq = seq,
                  .count = v ? 0 : send_counts[0],
                  .kind = v ? Fingerprint::Kind::AlltoallV : Fingerprint::Kind::Alltoall,
                  .dtype = static_cast<std::uint8_t>(dtype)});
  if (v) {
    op->set_pair_counts(std::vector<std::uint64_t>(send_counts.begin(), send_counts.end()),
                        std::vector<std::uint64_t>(recv_counts.begin(), recv_counts.end()));
  }
  const auto shape =
      v ? fmt::format("{}, send {} recv {}", kernels::dtype_name(dtype), list(send_counts),
                      list(recv_counts))
        : fmt::format("{} x {} per pair", kernels::dtype_name(dtype), send_counts[0]);
  return submit(std::move(op), describe(what, seq, fmt::format("({})", shape)), true);
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
                            "(comm/tag.h)",
                            id, kMaxComms - 1));
  }
  group->comm_id = static_cast<int>(id);
  return std::make_unique<Communicator>(Key{}, shared_, std::move(group), timeout());
}

void Communicator::abort(const std::string& why) {
  device_->abort();
  shared_->engine->abort(static_cast<std::uint64_t>(group_->comm_id) + 1, why);
}

void Communicator::set_stream(kernels::CudaStream stream) noexcept {
  device_->set_stream(stream);
}

std::optional<Work> Communicator::try_device(const DeviceCall& call, DeadlineStart start) {
  const std::optional<int> device = device_of(call, rank());
  if (!device) return std::nullopt;
  validate(call, rank(), size());
  std::string description;
  if (call.point_to_point()) {
    description =
        fmt::format("device {} {} on comm {} (rank {} of {})", device_call_name(call.kind),
                    describe_device_call(call, *device), group_->comm_id, rank(), size());
  } else {
    const char* name = device_call_name(call.kind).data();  // a literal: NUL-terminated
    description = describe(name, next_seq(), describe_device_call(call, *device));
  }
  auto op = device_->enqueue(call, *device, timeout());
  return submit(std::move(op), std::move(description), !call.point_to_point(), start);
}

CommStats Communicator::stats() const noexcept {
  CommStats s;
  s.allreduce_bytes = counters_.allreduce.load(std::memory_order_relaxed);
  s.broadcast_bytes = counters_.broadcast.load(std::memory_order_relaxed);
  s.allgather_bytes = counters_.allgather.load(std::memory_order_relaxed);
  s.send_bytes = counters_.send.load(std::memory_order_relaxed);
  s.reduce_scatter_bytes = counters_.reduce_scatter.load(std::memory_order_relaxed);
  s.reduce_bytes = counters_.reduce.load(std::memory_order_relaxed);
  s.gather_bytes = counters_.gather.load(std::memory_order_relaxed);
  s.scatter_bytes = counters_.scatter.load(std::memory_order_relaxed);
  s.alltoall_bytes = counters_.alltoall.load(std::memory_order_relaxed);
  return s;
}

}  // namespace strait::comm
