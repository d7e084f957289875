// AllreduceOp: what the allreduce algorithms share (comm/algorithms/*_allreduce.h): their buffers
// and element type, the copy of the input into the output, Avg as Sum then a scale by 1/P, and,
// for those that run numbered steps one after another, the loop that runs them.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

#include "comm/algorithms/collective_op.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class AllreduceOp : public CollectiveOp {
 protected:
  // `send` may equal `recv` (in place). Buffers are caller-owned and must outlive the operation.
  AllreduceOp(OpContext ctx, const ReduceBuffers& b)
      : CollectiveOp(std::move(ctx)),
        send_(b.send),
        out_(static_cast<std::byte*>(b.recv)),
        count_(b.count),
        dtype_(b.dtype),
        op_(b.op),
        elem_(kernels::dtype_size(b.dtype)) {}

  // The output starts as this rank's input.
  void copy_input() {
    if (send_ != out_ && count_ != 0) std::memcpy(out_, send_, count_ * elem_);
  }
  // The elementwise op: Avg reduces as Sum, and scale_if_avg() divides once at the end.
  [[nodiscard]] kernels::ReduceOp elementwise_op() const noexcept {
    return op_ == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : op_;
  }
  void scale_if_avg(std::byte* data, std::size_t count) const {
    if (op_ == kernels::ReduceOp::Avg && count != 0) {
      kernels::scale(dtype_, data, count, 1.0 / group().size());
    }
  }

  // For algorithms of numbered steps 0 .. last: each step posts its messages (post_step returns
  // false when this rank has none in it), waits for them, then finish_step() uses what arrived.
  // step_ is the step being run; the tags carry it.
  bool run_steps(Transport& t, int last) {
    while (step_ <= last) {
      if (!posted_) {
        if (!post_step(t)) {
          ++step_;
          continue;
        }
        posted_ = true;
      }
      if (!all_done(t)) return false;
      finish_step();
      posted_ = false;
      ++step_;
    }
    return true;
  }
  virtual bool post_step(Transport& /*t*/) { return false; }
  virtual void finish_step() {}

  const void* send_;
  std::byte* out_;
  std::size_t count_;
  kernels::DType dtype_;
  kernels::ReduceOp op_;
  std::size_t elem_;  // bytes per element
  int step_ = 0;
  bool posted_ = false;
};

}  // namespace strait::comm
