#include "comm/algorithms/recursive_doubling_allreduce.h"

#include <cstring>
#include <utility>

#include "comm/algorithms/scratch.h"

namespace strait::comm {

RecursiveDoublingAllreduce::RecursiveDoublingAllreduce(OpContext ctx, const ReduceBuffers& b)
    : AllreduceOp(std::move(ctx), b),
      bytes_(b.count * kernels::dtype_size(b.dtype)),
      fold_(this->group().rank, this->group().size()) {}

bool RecursiveDoublingAllreduce::post_step(Transport& t) {
  const int r = group().rank;
  const int last = fold_.log2() + 1;
  std::byte* other = current_ == out_ ? scratch_.get() : out_;
  if (step_ == 0) {  // the fold
    if (fold_.sits_out()) {
      send_to(t, r + 1, step_, out_, bytes_);
      return true;
    }
    if (fold_.folds_in()) {
      recv_from(t, r - 1, step_, other, bytes_)->keep_alive = scratch_;
      return true;
    }
    return false;
  }
  if (step_ < last) {
    if (fold_.sits_out()) return false;
    partner_ = fold_.new_rank() ^ (1 << (step_ - 1));
    const int peer = fold_.real_rank(partner_);
    // A framed message keeps its own frame alive; the others read or write the scratch.
    const RequestPtr rx = recv_from(t, peer, step_, other, bytes_);
    if (!rx->keep_alive) rx->keep_alive = scratch_;
    const RequestPtr tx = send_to(t, peer, step_, current_, bytes_);
    if (!tx->keep_alive) tx->keep_alive = scratch_;
    return true;
  }
  // The unfold. The ranks that ran the algorithm hold the result in current_.
  if (!fold_.sits_out()) {
    if (current_ != out_ && bytes_ != 0) std::memcpy(out_, current_, bytes_);
    current_ = out_;
    scale_if_avg(out_, count_);
  }
  if (fold_.folds_in()) {
    send_to(t, r - 1, step_, out_, bytes_);
    return true;
  }
  if (fold_.sits_out()) {
    recv_from(t, r + 1, step_, out_, bytes_);
    return true;
  }
  return false;
}

void RecursiveDoublingAllreduce::finish_step() {
  const auto op = elementwise_op();
  std::byte* other = current_ == out_ ? scratch_.get() : out_;
  const int last = fold_.log2() + 1;
  if (step_ == last || fold_.sits_out()) return;
  // The lower-ranked side's partial goes first, on both partners: reduce(inout, in) computes
  // inout op in, so the side that holds the higher partial reduces into the one it received.
  const bool mine_first = step_ > 0 && fold_.new_rank() < partner_;
  if (mine_first) {
    kernels::reduce(dtype_, op, current_, other, count_);
  } else {
    kernels::reduce(dtype_, op, other, current_, count_);
    current_ = other;
  }
}

bool RecursiveDoublingAllreduce::advance(Transport& t) {
  if (!started_) {
    started_ = true;
    copy_input();
    if (bytes_ != 0 && group().size() > 1 && !fold_.sits_out()) {
      scratch_ = scratch_buffer(bytes_);
    }
    current_ = out_;
    // The first step's partner gets the fingerprint inside the data (one message each way, and
    // both are posted at once, before anything can fail); partners of later steps and ring
    // neighbours still get theirs up front, so a rank learns of a disagreement before it waits
    // on them. Not with a fold: a folding rank could fail at the fold before its first step.
    const bool no_fold = fold_.pof2() == group().size();
    if (no_fold && fold_.log2() >= 1 && bytes_ <= kMaxFramedPayload) {
      frame_first_exchange_with(fold_.real_rank(fold_.new_rank() ^ 1));
    }
    fold_.for_each_partner([&](int peer) { exchange_fingerprints(t, peer); });
    exchange_fingerprints_around_ring(t);
  }
  return run_steps(t, fold_.log2() + 1);
}

}  // namespace strait::comm
