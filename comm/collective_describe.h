// What a posted operation is, kept so that its description ("allreduce #3 (f32 x 9, sum,
// ring@seg=1M) on comm 0 (rank 1 of 2)") is formatted only when an error or a log needs it
// (WorkState's Describer). It owns copies of what it names (a v-form's counts, a codec spec), so
// it outlives the caller's spans.
// describe_device(args, device): "(f32 x 5, sum) on GPU 0 via NCCL", the device path's detail.
// Thread-safety: values; describe() is const.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/selection.h"
#include "comm/collective_args.h"
#include "comm/compress/powersgd.h"

namespace strait::comm {

struct OpSummary {
  CollectiveArgs::Kind kind = CollectiveArgs::Kind::Barrier;
  const char* name = nullptr;  // replaces the kind's name ("connection barrier"); null: the kind's
  std::uint64_t seq = 0;
  int comm_id = 0;
  int rank = 0;
  int size = 0;
  std::size_t count = 0;
  kernels::DType dtype = kernels::DType::U8;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;
  int root = 0;
  std::uint64_t tag = 0;
  std::vector<std::size_t> counts{};           // v-forms
  std::vector<std::size_t> recv_counts{};      // alltoall_v
  Selection selection{};                       // allreduce
  std::string codec{};                         // allreduce_compressed: the canonical codec spec
  std::shared_ptr<const PowerSgdPlan> plan{};  // powersgd: what it compresses
  bool error_feedback = false;                 // allreduce_compressed with a key
  int device = -1;                             // >= 0: the operation runs on this GPU via NCCL

  // What the arguments say; the caller fills seq, selection, the codec's fields and device.
  static OpSummary of(const CollectiveArgs& args, int comm_id, int rank, int size);
  [[nodiscard]] std::string describe() const;

 private:
  // allreduce_compressed's part: ", int8, error feedback, hierarchical".
  [[nodiscard]] std::string compression_detail() const;
};

[[nodiscard]] std::string describe_device(const CollectiveArgs& args, int device);

}  // namespace strait::comm
