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
// Pipelining (as ring_allreduce.h's segmented ring): chunks larger than kSegmentElements are cut
// into segments at multiples of the codec's granularity() (its block, so the values and the bytes
// are those of the whole chunk), and segment s of step k is encoded and sent as soon as segment s
// of step k-1 has arrived and been decoded, with up to kWindow segments in flight each way: the
// link never idles while a rank encodes or decodes, and no step waits for a whole chunk.
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
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/compressed_allreduce_op.h"
#include "comm/algorithms/ring_engine.h"

namespace strait::comm {

class CompressedRingAllreduce final : public CompressedAllreduceOp, private RingEngine::Policy {
 public:
  // Elements (fp32) per pipeline segment, before rounding to the codec's granularity: 1 MiB of
  // input, a few hundred KiB or less on the wire, large enough that a message's fixed costs do
  // not show and small enough that encoding one segment hides behind sending the previous one.
  static constexpr std::size_t kSegmentElements = std::size_t{1} << 18;
  // Segments in flight each way.
  static constexpr std::size_t kWindow = 4;

  // `key` empty: no error feedback. `average`: Avg instead of Sum.
  CompressedRingAllreduce(OpContext ctx, CompressedBuffers b);
  bool advance(Transport& t) override;

 private:
  using Bytes = std::shared_ptr<std::vector<std::byte>>;
  // The engine's units (comm/algorithms/ring_engine.h); a piece is the range of the output a unit
  // covers.
  struct Piece {
    std::size_t offset = 0;  // elements, into out_
    std::size_t count = 0;
  };
  [[nodiscard]] Piece piece(std::size_t unit, bool outgoing) const;
  [[nodiscard]] int step_of(std::size_t unit) const {
    return static_cast<int>(unit / ring_.segments());
  }
  void start();
  // Encodes out_[piece] into a new buffer, keeping the encoding error in the residual.
  Bytes encode(Piece piece);
  // The ring's policy: encoded messages land in buffers of their own; the reduce-scatter decodes
  // and adds them, the allgather decodes them and keeps them to forward unchanged.
  RingEngine::Landing landing(std::size_t unit) override;
  void arrived(std::size_t unit) override;
  RingEngine::Outgoing outgoing(std::size_t unit) override;

  std::span<float> residual_;  // empty without error feedback
  bool started_ = false;
  std::size_t segment_elems_ = 0;  // a multiple of the codec's granularity
  RingEngine ring_;
  std::deque<Bytes> landed_;  // the buffers of the receives posted, oldest first
  std::map<std::size_t, Bytes>
      to_forward_;              // allgather bytes received, by the unit that sends them
  std::vector<float> decoded_;  // scratch of the error-feedback decode
};

}  // namespace strait::comm
