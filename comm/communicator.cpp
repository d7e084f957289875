#include "comm/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "comm/algorithms/binomial_broadcast.h"
#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/dissemination_barrier.h"
#include "comm/algorithms/point_to_point.h"
#include "comm/algorithms/rabenseifner_allreduce.h"
#include "comm/algorithms/recursive_doubling_allreduce.h"
#include "comm/algorithms/ring_allgather.h"
#include "comm/algorithms/ring_allreduce.h"
#include "comm/algorithms/selection.h"
#include "comm/bootstrap/launch_env.h"
#include "comm/device_call.h"
#include "comm/device_collectives.h"
#include "comm/progress_engine.h"
#include "comm/transport/ucx/ucx_transport.h"
#include "core/error.h"

namespace strait::comm {

using kernels::DType;
using kernels::ReduceOp;

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

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommOptions& options) {
  if (!store) throw Error(ErrorCode::InvalidArgument, "Communicator::create: the store is null");
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("Communicator::create: rank {} of world size {} is out of range (world "
                            "sizes 1..{})",
                            rank, size, kMaxRanks));
  }
  // Read before connecting, so that a malformed STRAIT_TUNE fails at once.
  auto algorithms =
      options.algorithms
          ? options.algorithms
          : std::make_shared<const AlgorithmTable>(AlgorithmTable::from_environment());
  auto transport =
      std::make_unique<UcxTransport>(*store, "strait/ucx", rank, size, options.timeout);
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
  return world;
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
                                           group_->size())) {}

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

std::uint64_t Communicator::next_seq() {
  const std::lock_guard lock(mutex_);
  return seq_++;
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
  isend(buf, bytes, peer, tag).wait();
}

void Communicator::recv(void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
  irecv(buf, bytes, peer, tag).wait();
}

Work Communicator::ibarrier() {
  const auto seq = next_seq();
  auto op = std::make_unique<DisseminationBarrier>(group_, seq);
  op->set_fingerprint(Fingerprint{.seq = seq, .kind = Fingerprint::Kind::Barrier});
  return submit(std::move(op), describe("barrier", seq, ""), true);
}

void Communicator::barrier() {
  ibarrier().wait();
}

Work Communicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  if (auto w = try_device(DeviceCall::broadcast(buf, count, dtype, root))) return *w;
  check_peer(root, "broadcast root");
  if (count != 0 && buf == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "broadcast: null buffer with a non-zero count");
  }
  const auto seq = next_seq();
  auto op = std::make_unique<BinomialBroadcast>(group_, seq, &counters_.broadcast, buf,
                                                count * kernels::dtype_size(dtype), root);
  op->set_fingerprint(Fingerprint{.seq = seq,
                                  .count = count,
                                  .root = root,
                                  .kind = Fingerprint::Kind::Broadcast,
                                  .dtype = static_cast<std::uint8_t>(dtype)});
  return submit(
      std::move(op),
      describe("broadcast", seq,
               fmt::format("({} x {}, root {})", kernels::dtype_name(dtype), count, root)),
      true);
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  ibroadcast(buf, count, dtype, root).wait();
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op) {
  if (auto w = try_device(DeviceCall::allreduce(send, recv, count, dtype, op))) return *w;
  if (op == ReduceOp::Avg && !kernels::dtype_is_float(dtype)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("allreduce: avg of {} is not defined; use sum and divide, or a "
                            "floating-point dtype",
                            kernels::dtype_name(dtype)));
  }
  if (count != 0 && (send == nullptr || recv == nullptr)) {
    throw Error(ErrorCode::InvalidArgument, "allreduce: null buffer with a non-zero count");
  }
  const auto seq = next_seq();
  // A pure function of what every rank agrees on (the fingerprint then checks the table too).
  const Selection chosen =
      shared_->algorithms->choose("allreduce", size(), count * kernels::dtype_size(dtype));
  std::unique_ptr<CollectiveOp> algo;
  const auto id = chosen.algorithm->id;
  if (id == find_algorithm("allreduce", "recursive_doubling")->id) {
    algo = std::make_unique<RecursiveDoublingAllreduce>(group_, seq, &counters_.allreduce, send,
                                                        recv, count, dtype, op);
  } else if (id == find_algorithm("allreduce", "rabenseifner")->id) {
    algo = std::make_unique<RabenseifnerAllreduce>(group_, seq, &counters_.allreduce, send, recv,
                                                   count, dtype, op);
  } else {
    algo = std::make_unique<RingAllreduce>(group_, seq, &counters_.allreduce, send, recv, count,
                                           dtype, op, chosen.params.segment_bytes);
  }
  algo->set_fingerprint(Fingerprint{.seq = seq,
                                    .count = count,
                                    .kind = Fingerprint::Kind::Allreduce,
                                    .dtype = static_cast<std::uint8_t>(dtype),
                                    .op = static_cast<std::uint8_t>(op),
                                    .algorithm = id,
                                    .segment_bytes = chosen.params.segment_bytes});
  return submit(std::move(algo),
                describe("allreduce", seq,
                         fmt::format("({} x {}, {}, {})", kernels::dtype_name(dtype), count,
                                     kernels::reduce_op_name(op), chosen.describe())),
                true);
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype,
                             ReduceOp op) {
  iallreduce(send, recv, count, dtype, op).wait();
}

Work Communicator::iallgather(const void* send, void* recv, std::size_t count, DType dtype) {
  if (auto w = try_device(DeviceCall::allgather(send, recv, count, dtype))) return *w;
  if (count != 0 && (send == nullptr || recv == nullptr)) {
    throw Error(ErrorCode::InvalidArgument, "allgather: null buffer with a non-zero count");
  }
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
  iallgather(send, recv, count, dtype).wait();
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
  return s;
}

}  // namespace strait::comm
