// CompressedAllreduceOp: what the compressed allreduce algorithms share (compressed_*_allreduce.h):
// their f32 buffers, Sum or Avg, the communicator's codecs and error-feedback state, the codec
// spec and the tensor key (empty: no error feedback).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "comm/algorithms/collective_op.h"
#include "comm/compress/compression_state.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

class CompressedAllreduceOp : public CollectiveOp {
 protected:
  CompressedAllreduceOp(OpContext ctx, CompressedBuffers b)
      : CollectiveOp(std::move(ctx)),
        send_(b.send),
        out_(b.recv),
        count_(b.count),
        average_(b.average),
        state_(std::move(b.state)),
        spec_(std::move(b.codec_spec)),
        key_(std::move(b.key)) {}

  // Avg: the decoded sum scaled by 1/P, alike on every rank.
  void scale_if_average() {
    if (average_ && count_ != 0) {
      kernels::scale(kernels::DType::F32, out_, count_, 1.0 / group().size());
    }
  }

  const float* send_;
  float* out_;
  std::size_t count_;
  bool average_;
  std::shared_ptr<CompressionState> state_;
  std::string spec_;
  std::string key_;
  Codec* codec_ = nullptr;  // state_->codec(spec_), looked up when the operation starts
};

}  // namespace strait::comm
