// Communicator's operations: each entry point fills a CollectiveArgs and posts it; post() is the
// one path every operation takes (NCCL's collectives.cc over enqueue.cc). Creation, split and
// sites are in communicator_create.cpp.
#include "comm/communicator.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/algorithm_registry.h"
#include "comm/algorithms/codec_rules.h"
#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/hierarchical_allreduce.h"
#include "comm/algorithms/local_mailbox.h"
#include "comm/algorithms/mailbox_allreduce.h"
#include "comm/algorithms/selection.h"
#include "comm/collective_check.h"
#include "comm/collective_describe.h"
#include "comm/communicator_shared.h"
#include "comm/compress/codec_factory.h"
#include "comm/compress/compression_state.h"
#include "comm/debug_log.h"
#include "comm/device_collectives.h"
#include "comm/flight_dump.h"
#include "comm/flight_recorder.h"
#include "comm/progress_engine.h"
#include "comm/symmetric_heap.h"
#include "core/error.h"

namespace strait::comm {

using kernels::DType;
using kernels::ReduceOp;
using Kind = CollectiveArgs::Kind;

namespace {

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

// What every rank must agree on (comm/algorithms/fingerprint.h says how each kind uses the fields).
Fingerprint fingerprint_of(const CollectiveArgs& a, std::uint64_t seq, const Selection& chosen,
                           const CodecChoice* codec) {
  const bool v = kind_info(a.kind).per_rank_counts && a.kind != Kind::AlltoallV;
  std::uint64_t count = a.count;
  if (v) count = std::accumulate(a.counts.begin(), a.counts.end(), std::uint64_t{0});
  if (a.kind == Kind::AlltoallV) count = 0;
  Fingerprint f{.seq = seq,
                .count = count,
                .counts = v ? counts_hash(a.counts) : 0,
                .root = a.rooted() ? a.root : -1,
                .kind = a.kind,
                .dtype = static_cast<std::uint8_t>(a.dtype),
                .op = a.reduces() ? static_cast<std::uint8_t>(a.op) : std::uint8_t{0}};
  if (codec != nullptr) f.counts = codec->spec_hash;
  if (a.kind == Kind::Barrier) f = Fingerprint{.seq = seq, .kind = Kind::Barrier};
  if (chosen.algorithm->fingerprinted) {
    f.algorithm = chosen.algorithm->id;
    if (a.kind == Kind::Allreduce) f.segment_bytes = chosen.params.segment_bytes;
  }
  return f;
}

// STRAIT_DEBUG=TRACE: one line per operation; formats nothing otherwise.
void log_op(const char* verb, const OpSummary& what, bool p2p) {
  const debug::Subsys subsys = p2p ? debug::kP2P : debug::kColl;
  if (debug::enabled(debug::Level::Trace, subsys)) {
    debug::log(debug::Level::Trace, subsys, "{} {}", verb, what.describe());
  }
}

const AlgorithmInfo* mailbox_algorithm() {
  static const AlgorithmInfo* const kAlgorithm = find_algorithm("allreduce", "mailbox");
  return kAlgorithm;
}

}  // namespace

std::atomic<std::uint64_t>* Communicator::counter_for(Kind kind) noexcept {
  const StatSlot slot = kind_info(kind).stat;
  return slot == StatSlot::None ? nullptr : &counters_[static_cast<std::size_t>(slot)];
}

std::uint64_t Communicator::next_seq(std::uint64_t n) {
  const std::lock_guard lock(mutex_);
  const std::uint64_t first = seq_;
  seq_ += n;
  return first;
}

Work Communicator::submit(std::unique_ptr<Op> op, Describer describe, bool ordered,
                          DeadlineStart start, std::uint64_t record_id) {
  return Work(shared_->engine->submit(std::move(op), std::move(describe), timeout(),
                                      static_cast<std::uint64_t>(group_->comm_id) + 1, ordered,
                                      start, record_id != 0 ? recorder_.get() : nullptr,
                                      record_id));
}

std::uint64_t Communicator::record(const CollectiveArgs& a, std::int64_t seq, const char* algorithm,
                                   bool device, bool started) {
  if (!recorder_) return 0;
  std::uint64_t count = a.count;
  if (kind_info(a.kind).per_rank_counts) {
    count = std::accumulate(a.counts.begin(), a.counts.end(), std::uint64_t{0});
  }
  return recorder_->record(FrEntry{.seq = seq,
                                   .kind = a.kind,
                                   .dtype = a.dtype,
                                   .op = a.op,
                                   .count = count,
                                   .bytes = count * kernels::dtype_size(a.dtype),
                                   .root = a.rooted() || a.point_to_point() ? a.root : -1,
                                   .tag = a.tag,
                                   .algorithm = algorithm,
                                   .device = device},
                           started);
}

std::optional<CodecChoice> Communicator::resolve_codec(const CollectiveArgs& args) const {
  const Compression& c = *args.compression;
  // "auto": the codec the tuned rules give this size (a pure function of what every rank agrees
  // on, like the algorithm; the fingerprint then checks the spec), "none" when no rule gives one.
  const bool automatic = c.codec == "auto";
  const std::string codec =
      automatic ? shared_->algorithms->choose_codec("allreduce", size(), args.count * sizeof(float))
                      .value_or("none")
                : c.codec;
  // Refused here, before anything is sent: the canonical spec is what ranks must agree on.
  CodecChoice choice;
  choice.key = c.key;
  if (PowerSgdOptions::names_powersgd(codec)) {
    choice.powersgd = PowerSgdOptions::parse(codec);
    choice.spec = choice.powersgd->spec();
    choice.plan = std::make_shared<const PowerSgdPlan>(
        plan_powersgd(args.count, c.matrices, *choice.powersgd));
    choice.spec_hash = choice.plan->hash(choice.spec);
  } else {
    choice.spec = make_codec_from_spec(codec)->spec();
    choice.spec_hash = codec_spec_hash(choice.spec);
  }
  const auto* send = static_cast<const float*>(args.send);
  if (const std::size_t i = first_non_finite(send, args.count); i != args.count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("allreduce_compressed ({}): element {} of the input is {}: a "
                            "non-finite gradient cannot be compressed; check the loss scale and "
                            "learning rate",
                            choice.spec, i, send[i]));
  }
  // Uncompressed by choice of the tuner: the plain allreduce, whose algorithm the same rules
  // tuned, is what `strait tune` measured for "none" (and is lossless, as the ring of `none`).
  if (automatic && choice.spec == "none") return std::nullopt;
  return choice;
}

// What post() and run_in_mailbox() share: an operation on host buffers, checked, its algorithm
// (and codec) chosen and described; number() then gives it its sequence number and fingerprint.
struct Communicator::Prepared {
  CollectiveArgs args;  // what runs: "auto" compression that comes to "none" is the plain allreduce
  std::optional<CodecChoice> codec{};
  Selection chosen{};
  OpSummary what{};
  std::uint64_t seq = 0;
  Fingerprint fingerprint{};

  void number(std::uint64_t first_seq) {
    seq = first_seq;
    what.seq = seq;
    fingerprint = fingerprint_of(args, seq, chosen, codec ? &*codec : nullptr);
  }
};

Communicator::Prepared Communicator::prepare(const CollectiveArgs& args) const {
  Prepared p{.args = args};
  check_host(p.args, rank(), size());
  if (args.kind == Kind::AllreduceCompressed) {
    p.codec = resolve_codec(args);
    if (!p.codec) {
      p.args = CollectiveArgs::allreduce(args.send, args.recv, args.count, DType::F32, args.op);
      check_host(p.args, rank(), size());
    }
  }
  // The row: chosen by the rules (a pure function of what every rank agrees on; the fingerprint
  // then checks the table too), by the codec, or the collective's only one.
  const bool multi_site = hierarchy_ && hierarchy_->multi_site();
  if (p.codec) {
    p.chosen.algorithm = &choose_compressed(*p.codec, multi_site);
  } else {
    // The v forms with counts every rank shares choose by their mean block; alltoall_v's ranks
    // share no size (count 0: its rules match from 0 bytes).
    std::size_t count = p.args.count;
    if (p.args.kind == Kind::AllgatherV || p.args.kind == Kind::ReduceScatterV) {
      count = std::accumulate(p.args.counts.begin(), p.args.counts.end(), std::size_t{0}) /
              static_cast<std::size_t>(size());
    }
    const std::size_t bytes = count * kernels::dtype_size(p.args.dtype);
    const std::string_view name = collective_name(p.args.kind);
    // Rules naming the mailbox are passed over where the ranks share no memory (a vector longer
    // than a slot goes through it in pieces).
    p.chosen = shared_->algorithms->choose(name, size(), bytes, sites_.count(),
                                           group_->mailbox ? nullptr : mailbox_algorithm());
    // The single-copy collectives need the mailbox too (all ranks have one, or none has).
    if (!group_->mailbox && p.chosen.algorithm->name == "single_copy") {
      p.chosen =
          shared_->algorithms->choose(name, size(), bytes, sites_.count(), p.chosen.algorithm);
    }
  }
  // Without a hierarchy (a split communicator: one site), hierarchical is the ring.
  static const AlgorithmInfo* const kHierarchical = find_algorithm("allreduce", "hierarchical");
  static const AlgorithmInfo* const kRing = find_algorithm("allreduce", "ring");
  if (p.chosen.algorithm == kHierarchical && !hierarchy_) p.chosen.algorithm = kRing;

  p.what = OpSummary::of(p.args, group_->comm_id, rank(), size());
  p.what.selection = p.chosen;
  if (p.codec) {
    p.what.codec = p.codec->spec;
    p.what.plan = p.codec->plan;
    p.what.error_feedback = !p.codec->key.empty();
  }
  return p;
}

Work Communicator::post(const CollectiveArgs& args) {
  // Memory kind, resolved once: device buffers go to the NCCL backend, a sibling of the host
  // algorithms.
  int device = -1;
  if (memory_of(args, rank(), &device) == MemoryKind::Device) {
    validate_device(args, rank(), size());
    OpSummary what = OpSummary::of(args, group_->comm_id, rank(), size());
    what.device = device;
    if (!args.point_to_point()) what.seq = next_seq();
    auto op = device_->enqueue(args, device, timeout());
    const std::uint64_t id = record(
        args, args.point_to_point() ? -1 : static_cast<std::int64_t>(what.seq), "nccl", true);
    log_op("post", what, args.point_to_point());
    return submit(
        std::move(op), [what = std::move(what)] { return what.describe(); }, !args.point_to_point(),
        args.start, id);
  }
  Prepared p = prepare(args);
  const CollectiveArgs& a = p.args;
  const bool p2p = a.point_to_point();
  p.number(p2p ? 0 : next_seq(sequence_numbers(*p.chosen.algorithm)));
  const CodecChoice* codec = p.codec ? &*p.codec : nullptr;
  auto op = build_algorithm(*p.chosen.algorithm,
                            BuildContext{.args = a,
                                         .context = {group_, p.seq, counter_for(a.kind)},
                                         .hierarchy = hierarchy_,
                                         .params = p.chosen.params,
                                         .fingerprint = p.fingerprint,
                                         .codec = codec,
                                         .compression = compression_});
  if (!p2p) {
    op->set_fingerprint(p.fingerprint);
    if (group_->mailbox) {
      const std::lock_guard lock(mutex_);  // announcements in the order of the calls
      op->set_announcement(group_->mailbox->announce(p.fingerprint));
    }
    if (a.kind == Kind::AlltoallV) {
      op->set_pair_counts(std::vector<std::uint64_t>(a.counts.begin(), a.counts.end()),
                          std::vector<std::uint64_t>(a.recv_counts.begin(), a.recv_counts.end()));
    }
  }
  const std::uint64_t id = record(a, p2p ? -1 : static_cast<std::int64_t>(p.seq),
                                  p.chosen.algorithm->name.data(), false);
  log_op("post", p.what, p2p);
  return submit(
      std::move(op), [what = std::move(p.what)] { return what.describe(); }, !p2p, a.start, id);
}

void Communicator::run(const CollectiveArgs& args) {
  if (args.kind == Kind::Allreduce && group_->mailbox && run_in_mailbox(args)) return;
  const ProgressEngine::CallerWillWait caller_waits;
  post(args).wait();
}

bool Communicator::run_in_mailbox(const CollectiveArgs& args) {
  LocalMailbox& box = *group_->mailbox;
  const std::size_t bytes = args.count * kernels::dtype_size(args.dtype);
  const auto stream = static_cast<std::uint64_t>(group_->comm_id) + 1;
  if (box.finished() != box.taken()) return false;
  claim_next_slot(box, bytes);
  int device = -1;
  if (memory_of(args, rank(), &device) == MemoryKind::Device) return false;
  if (shared_->engine->broken(stream)) return false;
  // post()'s preparation: a peer whose call went through the engine (a non-blocking one) runs
  // the same protocol with the same fingerprint. For this communicator it depends on the count,
  // dtype and op alone (its rules, ranks and sites do not change): a repeated call reuses the
  // last one's, which is a third of a short call's instructions (callgrind: 760 of 2,110).
  // One lock for the preparation, the sequence number, the announcement and the slot's ticket.
  std::unique_lock lock(mutex_);
  const Prepared* memo = mailbox_memo_.get();
  std::optional<Prepared> fresh;
  if (memo == nullptr || memo->args.count != args.count || memo->args.dtype != args.dtype ||
      memo->args.op != args.op) {
    lock.unlock();
    fresh.emplace(prepare(args));
    if (fresh->chosen.algorithm != mailbox_algorithm()) return false;
    lock.lock();
    // Allocated once: calls that alternate shapes copy into it rather than allocate.
    if (mailbox_memo_) {
      *mailbox_memo_ = *fresh;
    } else {
      mailbox_memo_ = std::make_shared<Prepared>(*fresh);
    }
  } else {
    check_host(args, rank(), size());
    fresh.emplace(*memo);
    fresh->args = args;
  }
  Prepared& p = *fresh;
  p.number(seq_++);
  const std::uint64_t announcement = box.announce(p.fingerprint);
  // A vector that fits a slot (every short call) is one call on the stack: the fast path does
  // not allocate. Longer ones go a slot at a time.
  std::optional<MailboxCall> one;
  std::vector<MailboxCall> pieces;
  if (bytes <= LocalMailbox::kPayloadBytes) {
    one.emplace(box, *group_, args.send, args.recv, args.count, args.dtype, args.op);
  } else {
    pieces = mailbox_pieces(box, *group_, args.send, args.recv, args.count, args.dtype, args.op);
  }
  lock.unlock();
  // Posted before the bookkeeping below (the flight record, the log), which then runs while the
  // peers' slots cross to this core instead of delaying this rank's slot.
  MailboxCall& first = one ? *one : pieces.front();
  first.try_post(p.fingerprint, announcement);
  const std::uint64_t id = record(p.args, static_cast<std::int64_t>(p.seq), "mailbox", false, true);
  log_op("run", p.what, false);
  // What errors need; one pointer each, so that std::function keeps them without allocating.
  const InlineWait wait{
      .timeout = timeout(),
      .yield = !shared_->engine->transport().core_per_local_rank(),
      .announcement = announcement,
      .broken = [engine = shared_->engine.get(), stream]() -> std::optional<Error> {
        auto cause = engine->broken(stream);
        if (!cause) return std::nullopt;
        return Error(cause->code(), fmt::format("aborted: {}", cause->message()));
      },
      .describe = [what = &p.what] { return what->describe(); },
  };
  try {
    run_inline(one ? std::span<MailboxCall>(&*one, 1) : std::span<MailboxCall>(pieces),
               p.fingerprint, wait);
  } catch (const Error& e) {
    // As the engine does with a failed operation: later calls fail at once (their peers may be
    // gone or out of step).
    shared_->engine->fail_stream(stream, e);
    if (recorder_) {
      recorder_->failed(id, e);
      fr::on_failure(*recorder_, e);
    }
    throw;
  }
  if (recorder_) recorder_->finished(id);
  counter_for(Kind::Allreduce)->fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

SymmetricBuffer Communicator::alloc(std::size_t bytes) {
  if (!group_->symmetric) {  // ranks on several hosts: ordinary memory, read as any other
    if (bytes == 0) throw Error(ErrorCode::InvalidArgument, "alloc: 0 bytes; ask for at least 1");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw Error(ErrorCode::Unavailable,
                  fmt::format("alloc of {} bytes: mmap: {}", bytes, std::strerror(errno)));
    }
    return SymmetricBuffer(nullptr, 0, p, bytes);
  }
  return group_->symmetric->allocate(*shared_->store,
                                     fmt::format("strait/symmetric/{}", group_->comm_id),
                                     *group_->mailbox, bytes, timeout());
}

// The entry points: one record each.

Work Communicator::isend(const void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                         DeadlineStart start) {
  return post(CollectiveArgs::send_to(buf, bytes, peer, tag, start));
}
Work Communicator::irecv(void* buf, std::size_t bytes, int peer, std::uint64_t tag,
                         DeadlineStart start) {
  return post(CollectiveArgs::recv_from(buf, bytes, peer, tag, start));
}
Work Communicator::irecv_any(void* buf, std::size_t bytes, std::shared_ptr<int> source,
                             std::uint64_t tag) {
  return post(CollectiveArgs::recv_from_any(buf, bytes, tag, std::move(source)));
}
std::uint64_t Communicator::sequence_number() {
  const std::lock_guard lock(mutex_);
  return seq_;
}
void Communicator::send(const void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
  run(CollectiveArgs::send_to(buf, bytes, peer, tag));
}
void Communicator::recv(void* buf, std::size_t bytes, int peer, std::uint64_t tag) {
  run(CollectiveArgs::recv_from(buf, bytes, peer, tag));
}

Work Communicator::ibarrier() {
  return post(CollectiveArgs::barrier());
}
void Communicator::barrier() {
  run(CollectiveArgs::barrier());
}

Work Communicator::ibroadcast(void* buf, std::size_t count, DType dtype, int root) {
  return post(CollectiveArgs::broadcast(buf, count, dtype, root));
}
void Communicator::broadcast(void* buf, std::size_t count, DType dtype, int root) {
  run(CollectiveArgs::broadcast(buf, count, dtype, root));
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op) {
  return post(CollectiveArgs::allreduce(send, recv, count, dtype, op));
}
void Communicator::allreduce(const void* send, void* recv, std::size_t count, DType dtype,
                             ReduceOp op) {
  run(CollectiveArgs::allreduce(send, recv, count, dtype, op));
}

Work Communicator::iallreduce_compressed(const float* send, float* recv, std::size_t count,
                                         ReduceOp op, const Compression& compression) {
  return post(CollectiveArgs::allreduce_compressed(send, recv, count, op, compression));
}
void Communicator::allreduce_compressed(const float* send, float* recv, std::size_t count,
                                        ReduceOp op, const Compression& compression) {
  run(CollectiveArgs::allreduce_compressed(send, recv, count, op, compression));
}

Work Communicator::iallgather(const void* send, void* recv, std::size_t count, DType dtype) {
  return post(CollectiveArgs::allgather(send, recv, count, dtype));
}
void Communicator::allgather(const void* send, void* recv, std::size_t count, DType dtype) {
  run(CollectiveArgs::allgather(send, recv, count, dtype));
}

Work Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                   DType dtype, ReduceOp op) {
  return post(CollectiveArgs::reduce_scatter(send, recv, recv_count, dtype, op));
}
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype,
                                  ReduceOp op) {
  run(CollectiveArgs::reduce_scatter(send, recv, recv_count, dtype, op));
}

Work Communicator::ireduce_scatter_v(const void* send, void* recv,
                                     std::span<const std::size_t> recv_counts, DType dtype,
                                     ReduceOp op) {
  return post(CollectiveArgs::reduce_scatter_v(send, recv, recv_counts, dtype, op));
}
void Communicator::reduce_scatter_v(const void* send, void* recv,
                                    std::span<const std::size_t> recv_counts, DType dtype,
                                    ReduceOp op) {
  run(CollectiveArgs::reduce_scatter_v(send, recv, recv_counts, dtype, op));
}

Work Communicator::iallgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                                DType dtype) {
  return post(CollectiveArgs::allgather_v(send, recv, counts, dtype));
}
void Communicator::allgather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                               DType dtype) {
  run(CollectiveArgs::allgather_v(send, recv, counts, dtype));
}

Work Communicator::ireduce(const void* send, void* recv, std::size_t count, DType dtype,
                           ReduceOp op, int root) {
  return post(CollectiveArgs::reduce(send, recv, count, dtype, op, root));
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                          int root) {
  run(CollectiveArgs::reduce(send, recv, count, dtype, op, root));
}

Work Communicator::igather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  return post(CollectiveArgs::gather(send, recv, count, dtype, root));
}
void Communicator::gather(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  run(CollectiveArgs::gather(send, recv, count, dtype, root));
}

Work Communicator::iscatter(const void* send, void* recv, std::size_t count, DType dtype,
                            int root) {
  return post(CollectiveArgs::scatter(send, recv, count, dtype, root));
}
void Communicator::scatter(const void* send, void* recv, std::size_t count, DType dtype, int root) {
  run(CollectiveArgs::scatter(send, recv, count, dtype, root));
}

Work Communicator::ialltoall(const void* send, void* recv, std::size_t count, DType dtype) {
  return post(CollectiveArgs::alltoall(send, recv, count, dtype));
}
void Communicator::alltoall(const void* send, void* recv, std::size_t count, DType dtype) {
  run(CollectiveArgs::alltoall(send, recv, count, dtype));
}

Work Communicator::ialltoall_v(const void* send, std::span<const std::size_t> send_counts,
                               void* recv, std::span<const std::size_t> recv_counts, DType dtype) {
  return post(CollectiveArgs::alltoall_v(send, send_counts, recv, recv_counts, dtype));
}
void Communicator::alltoall_v(const void* send, std::span<const std::size_t> send_counts,
                              void* recv, std::span<const std::size_t> recv_counts, DType dtype) {
  run(CollectiveArgs::alltoall_v(send, send_counts, recv, recv_counts, dtype));
}

}  // namespace strait::comm
