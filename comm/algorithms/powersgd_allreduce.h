// PowerSGD allreduce: a rank-r approximation of the sum (or mean) of f32 gradient matrices from one
// step of power iteration, warm-started from the previous call, with error feedback (Vogels,
// Karimireddy & Jaggi, NeurIPS 2019, "PowerSGD: Practical Low-Rank Gradient Compression",
// Algorithm 1; as PyTorch's ddp_comm_hooks/powerSGD_hook.py). Options, plan and numerics:
// comm/compress/powersgd.h; per-key state: comm/compress/powersgd_state.h.
//
// Per call, for each compressed matrix (rows x cols = n x m, row-major; r the rank; W ranks):
//   M = grad + error                                (error: this rank's fp32 residual of the key)
//   Q = orthogonalize(warm Q of the key, or N(0,1) from (seed, call) on the first call; the same
//       on every rank); a warm Q that orthogonalizes to a zero column is drawn afresh
//   P = M Q                                         (n x r, one streaming pass over M)
//   allreduce(sum) of [every uncompressed element | every P]   one allreduce, one round of latency
//   P^ = orthogonalize(P)                           (identical on every rank: same input and code)
//   Q = M^T P^                                      (m x r, one streaming pass over M)
//   allreduce(sum) of [every Q]; Avg: Q /= W
//   out = P^ Q^T                                    (fixed-order loop, not BLAS: identical bits)
//   error = M - out (Avg) or M - out / W (Sum)      (so the ranks' residuals add up to what the
//                                                    sum of their M lost)
// Uncompressed elements end as a plain fp32 ring allreduce of them (Avg: then * 1/W) and keep no
// residual (PyTorch keeps local - mean there, which sums to zero over the ranks). Both allreduces
// are RingAllreduce (comm/algorithms/ring_allreduce.h) over the op's own buffers, pipelined in the
// segments of the built-in table (8 KiB under 1 MiB, else 1 MiB), on their own sequence numbers:
// the op takes kSeqs consecutive ones. Every rank ends bit-identical: the rings give every rank the
// same P and Q, and everything after them is deterministic fp32 code.
//
// Wire bytes per rank: the two rings over (plain_count + sum n r) and (sum m r) f32 elements, i.e.
// 2 (W-1)/W * 4 * (plain_count + sum (n + m) r): with 2 ranks exactly 4 bytes per uncompressed
// element plus (n + m) * r * 4 per matrix (4096 x 4096, r 4: 128 KiB instead of 64 MiB).
// Key: empty means no error feedback and no warm start (every call starts from the seed's Q).
// One operation per key at a time (the next call of a key reads what this one leaves).
//
// Errors: the Communicator refuses NaN / Inf input, bad specs and bad layouts (InvalidArgument)
// before submitting; ranks whose specs or plans differ fail with Mismatch (the fingerprint's counts
// is PowerSgdPlan::hash). Buffers: f32, caller-owned, valid until completion; send may equal recv.
// Thread-safety: as every Op, advanced by the progress engine only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/collective_op.h"
#include "comm/algorithms/ring_allreduce.h"
#include "comm/compress/compression_state.h"
#include "comm/compress/powersgd.h"

namespace strait::comm {

class PowerSgdAllreduce final : public CollectiveOp {
 public:
  // Sequence numbers an operation takes: its own (the fingerprint's) and one per allreduce.
  static constexpr std::uint64_t kSeqs = 3;

  // `plan` from plan_powersgd(b.count, ...); b.codec_spec the canonical spec; b.key empty: no
  // state.
  PowerSgdAllreduce(OpContext ctx, CompressedBuffers b, PowerSgdOptions options,
                    std::shared_ptr<const PowerSgdPlan> plan);
  bool advance(Transport& t) override;
  void cancel(Transport& t) override;
  [[nodiscard]] std::string waiting_for() const override;

 private:
  enum class Stage : std::uint8_t { Start, ReduceP, ReduceQ, Done };
  // M, Q and P; then the first allreduce.
  void start();
  // Uncompressed elements out, P orthogonalized, Q = M^T P; then the second allreduce.
  void after_p();
  // out = P Q^T, the residual, the warm start.
  void finish();
  // Advances the current allreduce; when it fails, a disagreeing fingerprint is the better cause.
  bool drive(Transport& t);
  [[nodiscard]] std::unique_ptr<RingAllreduce> ring(std::uint64_t seq_offset, float* data,
                                                    std::size_t count) const;

  const float* send_;
  float* out_;
  bool average_;
  std::shared_ptr<CompressionState> state_;
  PowerSgdOptions options_;
  std::shared_ptr<const PowerSgdPlan> plan_;
  std::string spec_;
  std::string key_;
  Stage stage_ = Stage::Start;
  const float* m_ = nullptr;  // M: the key's residual buffer (M = grad + error) or send
  PowerSgdState::Entry* entry_ = nullptr;
  std::vector<float> first_;   // [uncompressed elements | P of each matrix]
  std::vector<float> second_;  // [Q of each matrix]
  std::vector<float> scratch_;
  std::unique_ptr<RingAllreduce> phase_;
};

}  // namespace strait::comm
