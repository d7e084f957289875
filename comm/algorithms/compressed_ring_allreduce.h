// Compressed ring allreduce of f32 (sum or avg): the ring of ring_allreduce.h with every message
// encoded by a lossy codec (comm/compress/codec.h), for links where bytes, not latency, are the
// cost. Reduce-scatter: at step k rank r encodes its partial sum of chunk r-k and sends it right;
// it decodes chunk r-k-1 from the left and adds it (fp32) to its own. After P-1 steps rank r owns
// chunk r+1 reduced in fp32; it encodes it once, and the allgather passes those bytes around the
// ring unchanged. Every rank (the owner included) decodes the same bytes: all ranks end
// bit-identical. Avg scales the decoded sum by 1/P on every rank alike.
// Bytes sent per rank: 2 (P-1)/P * encoded_bytes(count) (about count * bits/8 * 2 (P-1)/P).
// Cost: P-1 encodes and decodes of a chunk per rank in the reduce-scatter, one encode and P-1
// decodes in the allgather.
//
// Error feedback (optional, keyed by a tensor key): every encode of a value v this rank makes
// (its first send, each re-encoded partial sum, the owner's final encode) leaves an error
// v - decode(encode(v)); this rank keeps those errors, per element, as its residual and adds it to
// its next input of the same key. The errors of all ranks add up to exactly the difference
// between the result and the sum of the compensated inputs, so over many calls the results track
// the sum of the inputs (EF-SGD, Karimireddy et al. 2019; here extended to a ring whose hops
// re-encode, as 1-bit Adam keeps a worker and a server error, Tang et al. 2021).
//
// Sizes: any count (0 included) and world size; buffers are f32, caller-owned and must outlive the
// operation; send may equal recv. Errors: InvalidArgument when an encode meets a NaN or Inf (the
// input is checked before the operation starts; a partial sum that overflows fails mid-way and the
// peers then time out).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/compressed_allreduce_op.h"

namespace strait::comm {

class CompressedRingAllreduce final : public CompressedAllreduceOp {
 public:
  // `key` empty: no error feedback. `average`: Avg instead of Sum.
  CompressedRingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                          std::atomic<std::uint64_t>* bytes_sent, const float* send, float* recv,
                          std::size_t count, bool average, std::shared_ptr<CompressionState> state,
                          std::string codec_spec, std::string key);
  bool advance(Transport& t) override;

 private:
  [[nodiscard]] std::size_t chunk_of(int step, bool outgoing) const;
  void start();
  bool post_step(Transport& t);
  void finish_step();
  // Encodes out_[chunk] into `bytes`, keeping the encoding error in the residual.
  void encode_chunk(std::size_t chunk, std::vector<std::byte>& bytes);

  std::span<float> residual_;  // empty without error feedback
  bool started_ = false;
  bool posted_ = false;
  int step_ = 0;
  // Outgoing and incoming encoded chunks; shared with the requests, which may outlive a failed op.
  std::shared_ptr<std::vector<std::byte>> sending_;
  std::shared_ptr<std::vector<std::byte>> receiving_;
  std::vector<float> decoded_;  // scratch for the owner's own decode
};

}  // namespace strait::comm
