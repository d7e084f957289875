#include "comm/algorithms/mailbox_allreduce.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "comm/transport/op.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strait::comm {
namespace {

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

MailboxCall::MailboxCall(LocalMailbox& box, const Group& group, const void* send, void* recv,
                         std::size_t count, kernels::DType dtype, kernels::ReduceOp op)
    : box_(box),
      group_(group),
      send_(send),
      recv_(recv),
      count_(count),
      dtype_(dtype),
      op_(op),
      ticket_(box.take_ticket()) {}

bool MailboxCall::try_post(const Fingerprint& fingerprint,
                           std::optional<std::uint64_t> announcement) {
  if (posted_) return true;
  if (box_.finished() != ticket_) return false;  // an earlier call still reads (two slots)
  fingerprint_ = fingerprint;
  announcement_ = announcement;
  LocalMailbox::Slot& slot = box_.mine(ticket_);
  slot.fingerprint = fingerprint;
  slot.fingerprint_hash = fingerprint_hash(fingerprint);
  if (count_ != 0) std::memcpy(slot.data, send_, count_ * kernels::dtype_size(dtype_));
  slot.ticket.store(ticket_ + 1, std::memory_order_release);
  posted_ = true;
  return true;
}

bool MailboxCall::try_finish() {
  const int p = group_.size();
  while (arrived_ < p) {
    if (box_.of(arrived_, ticket_).ticket.load(std::memory_order_acquire) != ticket_ + 1) {
      return false;
    }
    ++arrived_;
  }
  const std::uint64_t mine = box_.mine(ticket_).fingerprint_hash;
  for (int r = 0; r < p; ++r) {
    const LocalMailbox::Slot& theirs = box_.of(r, ticket_);
    if (theirs.fingerprint_hash != mine) {
      throw mismatch_error(group_, r, theirs.fingerprint, fingerprint_);
    }
  }
  // Every rank sums in rank order, from the slots: the same bits everywhere.
  const std::size_t bytes = count_ * kernels::dtype_size(dtype_);
  auto* out = static_cast<std::byte*>(recv_);
  if (bytes != 0 && out != nullptr) {
    std::memcpy(out, box_.of(0, ticket_).data, bytes);
    const auto op = op_ == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : op_;
    for (int r = 1; r < p; ++r) kernels::reduce(dtype_, op, out, box_.of(r, ticket_).data, count_);
    if (op_ == kernels::ReduceOp::Avg) kernels::scale(dtype_, out, count_, 1.0 / p);
  }
  box_.finish(ticket_);
  return true;
}

int MailboxCall::waiting_on() const noexcept {
  if (!posted_) return -1;
  return arrived_ < group_.size() ? arrived_ : -1;
}

std::string MailboxCall::waiting_for() const {
  if (!posted_) return "this rank's earlier mailbox calls to finish";
  const int r = waiting_on();
  if (r < 0) return "nothing (it was about to finish)";
  return fmt::format(
      "the vector from {} in the shared-memory mailbox (if it called an "
      "operation of another size or kind, that one goes through the network)",
      group_.describe_rank(r));
}

void MailboxCall::check_announced() const {
  const int r = waiting_on();
  if (!announcement_ || r < 0) return;
  if (auto d = box_.disagreeing(r, fingerprint_, *announcement_)) {
    throw mismatch_error(group_, r, *d, fingerprint_);
  }
}

std::string MailboxCall::lost(int r) const {
  if (!box_.peer_exited(r)) return {};
  return fmt::format("{}'s process exited", group_.describe_rank(r));
}

Error MailboxCall::lost_error(const std::string& lost) const {
  return Error(ErrorCode::PeerLost,
               fmt::format("{}; this rank was still waiting for {}", lost, waiting_for()));
}

MailboxAllreduce::MailboxAllreduce(OpContext ctx, const ReduceBuffers& b)
    : AllreduceOp(std::move(ctx), b),
      call_(*group().mailbox, group(), b.send, b.recv, b.count, b.dtype, b.op) {}

bool MailboxAllreduce::advance(Transport& t) {
  if (!call_.try_post(fingerprint() != nullptr ? *fingerprint() : Fingerprint{}, announcement())) {
    return false;
  }
  if (call_.try_finish()) {
    count_sent(count_ * elem_);
    return true;
  }
  call_.check_announced();
  // The transport's view of the peer (its pidfd, checked every few ms by the engine).
  const int r = call_.waiting_on();
  const int world = group().world_ranks.at(static_cast<std::size_t>(r));
  if (const auto& lost = t.peer_lost(world); !lost.empty()) throw call_.lost_error(lost);
  return false;
}

std::string MailboxAllreduce::waiting_for() const {
  return call_.waiting_for();
}

void run_inline(MailboxCall& call, const Fingerprint& fingerprint, const InlineWait& wait) {
  // Polls between checks of the clock, the peers' pidfds and the communicator's state.
  constexpr unsigned kCheckEvery = 1024;
  // Spinning this long without an answer means the peers are busy elsewhere (computing, or in
  // another operation): sleep between polls from then on, 10 us doubling to 500 us, so a rank
  // that waits long leaves its core to others.
  constexpr auto kSpinBudget = std::chrono::milliseconds(2);
  constexpr auto kFirstSleep = std::chrono::microseconds(10);
  constexpr auto kLongestSleep = std::chrono::microseconds(500);
  std::chrono::steady_clock::time_point start{};  // of the waiting: set at the first check
  std::chrono::microseconds sleep{0};
  for (unsigned polls = 1;; ++polls) {
    try {
      if (call.try_post(fingerprint, wait.announcement) && call.try_finish()) return;
    } catch (const Error& e) {  // as the engine reports an operation's errors
      throw Error(e.code(), fmt::format("{}: {}", wait.describe(), e.message()));
    }
    if (sleep.count() > 0) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(2 * sleep, std::chrono::microseconds(kLongestSleep));
    } else if (wait.yield) {
      ::sched_yield();
    } else {
      relax();
    }
    if (sleep.count() == 0 && polls % kCheckEvery != 0) continue;
    if (auto e = wait.broken ? wait.broken() : std::nullopt) {
      throw Error(e->code(), fmt::format("{}: {}", wait.describe(), e->message()));
    }
    try {
      call.check_announced();
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", wait.describe(), e.message()));
    }
    if (const int r = call.waiting_on(); r >= 0) {
      if (std::string lost = call.lost(r); !lost.empty()) {
        const Error e = call.lost_error(lost);
        throw Error(e.code(), fmt::format("{}: {}", wait.describe(), e.message()));
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (start == std::chrono::steady_clock::time_point{}) start = now;
    if (now - start >= wait.timeout) {
      throw timeout_error(wait.describe(), wait.timeout, call.waiting_for());
    }
    if (sleep.count() == 0 && now - start > kSpinBudget) sleep = kFirstSleep;
  }
}

}  // namespace strait::comm
