#include "comm/algorithms/rabenseifner_allreduce.h"

#include <algorithm>
#include <utility>

#include "comm/algorithms/scratch.h"
#include "comm/transport/partition.h"

namespace strait::comm {

RabenseifnerAllreduce::RabenseifnerAllreduce(OpContext ctx, const ReduceBuffers& b)
    : AllreduceOp(std::move(ctx), b), fold_(this->group().rank, this->group().size()) {}

std::size_t RabenseifnerAllreduce::block_offset(Window w) const {
  return parts(count_, static_cast<std::size_t>(fold_.pof2()), static_cast<std::size_t>(w.first),
               static_cast<std::size_t>(w.last))
      .offset;
}

std::size_t RabenseifnerAllreduce::block_bytes(Window w) const {
  return parts(count_, static_cast<std::size_t>(fold_.pof2()), static_cast<std::size_t>(w.first),
               static_cast<std::size_t>(w.last))
             .count *
         elem_;
}

bool RabenseifnerAllreduce::post_step(Transport& t) {
  const int r = group().rank;
  const int levels = fold_.log2();
  const int v = fold_.new_rank();
  if (step_ == 0) {  // the fold
    if (fold_.sits_out()) {
      send_to(t, r + 1, step_, out_, count_ * elem_);
      return true;
    }
    if (fold_.folds_in()) {
      recv_from(t, r - 1, step_, scratch_.get(), count_ * elem_)->keep_alive = scratch_;
      return true;
    }
    return false;
  }
  if (fold_.sits_out()) {
    if (step_ < 2 * levels + 1) return false;
    recv_from(t, r + 1, step_, out_, count_ * elem_);  // the unfold
    return true;
  }
  if (step_ == levels + 1) {
    // The reduce-scatter is over: this rank owns block v. Scaling it before the allgather scales
    // every element once, and everyone copies the owner's bits.
    scale_if_avg(at(block_offset(mine_)), block_bytes(mine_) / elem_);
  }
  if (step_ <= levels) {  // reduce-scatter: halve the window
    const int distance = fold_.pof2() >> step_;
    const int peer = fold_.real_rank(v ^ distance);
    const int mid = mine_.first + distance;
    const bool keep_lower = (v & distance) == 0;
    const Window lower{mine_.first, mid};
    const Window upper{mid, mine_.last};
    incoming_ = keep_lower ? lower : upper;
    const Window outgoing = keep_lower ? upper : lower;
    recv_from(t, peer, step_, scratch_.get(), block_bytes(incoming_))->keep_alive = scratch_;
    send_to(t, peer, step_, at(block_offset(outgoing)), block_bytes(outgoing));
    return true;
  }
  if (step_ <= 2 * levels) {  // allgather: swap windows with the partner
    const int distance = 1 << (step_ - levels - 1);
    const int peer = fold_.real_rank(v ^ distance);
    const Window theirs{mine_.first ^ distance, (mine_.first ^ distance) + distance};
    recv_from(t, peer, step_, at(block_offset(theirs)), block_bytes(theirs));
    send_to(t, peer, step_, at(block_offset(mine_)), block_bytes(mine_));
    incoming_ = theirs;
    return true;
  }
  if (fold_.folds_in()) {  // the unfold
    send_to(t, r - 1, step_, out_, count_ * elem_);
    return true;
  }
  return false;
}

void RabenseifnerAllreduce::finish_step() {
  const auto op = elementwise_op();
  const int levels = fold_.log2();
  if (fold_.sits_out()) return;
  if (step_ == 0) {
    kernels::reduce(dtype_, op, out_, scratch_.get(), count_);
  } else if (step_ <= levels) {
    kernels::reduce(dtype_, op, at(block_offset(incoming_)), scratch_.get(),
                    block_bytes(incoming_) / elem_);
    mine_ = incoming_;
  } else if (step_ <= 2 * levels) {
    mine_ = Window{std::min(mine_.first, incoming_.first), std::max(mine_.last, incoming_.last)};
  }
}

bool RabenseifnerAllreduce::advance(Transport& t) {
  if (!started_) {
    started_ = true;
    copy_input();
    mine_ = Window{0, fold_.pof2()};
    if (count_ != 0 && !fold_.sits_out() && group().size() > 1) {
      // The largest piece received: the whole vector (the fold) or the lower half (first halving).
      const std::size_t bytes =
          fold_.folds_in() ? count_ * elem_ : block_bytes(Window{0, fold_.pof2() / 2});
      scratch_ = scratch_buffer(std::max<std::size_t>(bytes, 1));
    }
    fold_.for_each_partner([&](int peer) { exchange_fingerprints(t, peer); });
    exchange_fingerprints_around_ring(t);
  }
  return run_steps(t, 2 * fold_.log2() + 1);
}

}  // namespace strait::comm
