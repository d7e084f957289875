#include "comm/collective_describe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <span>

namespace strait::comm {

using Kind = CollectiveArgs::Kind;

namespace {

// "[3, 0, 5]", or the first 8 and the number of entries.
std::string list(std::span<const std::size_t> counts) {
  constexpr std::size_t kShown = 8;
  if (counts.size() <= kShown) return fmt::format("[{}]", fmt::join(counts, ", "));
  return fmt::format("[{}, ...] ({} entries)", fmt::join(counts.first(kShown), ", "),
                     counts.size());
}

// "(f32 x 5, sum) on GPU 0 via NCCL".
std::string device_detail(Kind kind, kernels::DType dtype, std::size_t count, kernels::ReduceOp op,
                          int root, int device) {
  std::string detail = fmt::format("({} x {}", kernels::dtype_name(dtype), count);
  if (kind == Kind::Allreduce || kind == Kind::ReduceScatter || kind == Kind::Reduce) {
    detail += fmt::format(", {}", kernels::reduce_op_name(op));
  }
  switch (kind) {
    case Kind::Send: detail += fmt::format(", to rank {}", root); break;
    case Kind::Recv: detail += fmt::format(", from rank {}", root); break;
    case Kind::Broadcast:
    case Kind::Reduce:
    case Kind::Gather:
    case Kind::Scatter: detail += fmt::format(", root {}", root); break;
    default: break;
  }
  return detail + fmt::format(") on GPU {} via NCCL", device);
}

}  // namespace

OpSummary OpSummary::of(const CollectiveArgs& a, int comm_id, int rank, int size) {
  OpSummary s{.kind = a.kind,
              .comm_id = comm_id,
              .rank = rank,
              .size = size,
              .count = a.count,
              .dtype = a.dtype,
              .op = a.op,
              .root = a.root,
              .tag = a.tag};
  if (a.kind == Kind::AllgatherV || a.kind == Kind::ReduceScatterV || a.kind == Kind::AlltoallV) {
    s.counts.assign(a.counts.begin(), a.counts.end());
    s.recv_counts.assign(a.recv_counts.begin(), a.recv_counts.end());
  }
  return s;
}

std::string OpSummary::describe() const {
  const std::string where = fmt::format("on comm {} (rank {} of {})", comm_id, rank, size);
  const std::string_view what = name != nullptr ? name : collective_name(kind);
  const auto dtype_name = kernels::dtype_name(dtype);
  const auto op_name = kernels::reduce_op_name(op);
  if (device >= 0) {
    const std::string detail = device_detail(kind, dtype, count, op, root, device);
    if (kind == Kind::Send || kind == Kind::Recv) {
      return fmt::format("device {} {} {}", what, detail, where);
    }
    return fmt::format("{} #{} {} {}", what, seq, detail, where);
  }
  std::string detail;
  switch (kind) {
    case Kind::Send:
      return fmt::format("send of {} bytes to rank {} (tag {}) {}", count, root, tag, where);
    case Kind::Recv:
      return fmt::format("recv of {} bytes from rank {} (tag {}) {}", count, root, tag, where);
    case Kind::Barrier: return fmt::format("{} #{} {}", what, seq, where);
    case Kind::Broadcast:
      detail = fmt::format("({} x {}, root {})", dtype_name, count, root);
      break;
    case Kind::Allreduce:
      detail = fmt::format("({} x {}, {}, {})", dtype_name, count, op_name, selection.describe());
      break;
    case Kind::AllreduceCompressed:
      detail = fmt::format("(f32 x {}, {}, {}", count, op_name, codec);
      if (plan) {
        detail += fmt::format(
            ", {} of {} matrices compressed, {} elements plain", plan->compressed.size(),
            plan->layout_matrices == 0 ? std::size_t{1} : plan->layout_matrices, plan->plain_count);
      }
      if (error_feedback) detail += ", error feedback";
      if (selection.algorithm != nullptr && selection.algorithm->name == "hierarchical") {
        detail += ", hierarchical";
      }
      detail += ")";
      break;
    case Kind::Allgather: detail = fmt::format("({} x {})", dtype_name, count); break;
    case Kind::AllgatherV: detail = fmt::format("({} x {})", dtype_name, list(counts)); break;
    case Kind::ReduceScatter:
      detail = fmt::format("({} x {} per rank, {})", dtype_name, count, op_name);
      break;
    case Kind::ReduceScatterV:
      detail = fmt::format("({} x {}, {})", dtype_name, list(counts), op_name);
      break;
    case Kind::Reduce:
      detail = fmt::format("({} x {}, {}, root {})", dtype_name, count, op_name, root);
      break;
    case Kind::Gather:
    case Kind::Scatter:
      detail = fmt::format("({} x {} per rank, root {})", dtype_name, count, root);
      break;
    case Kind::Alltoall: detail = fmt::format("({} x {} per pair)", dtype_name, count); break;
    case Kind::AlltoallV:
      detail = fmt::format("({}, send {} recv {})", dtype_name, list(counts), list(recv_counts));
      break;
  }
  return fmt::format("{} #{} {} {}", what, seq, detail, where);
}

std::string describe_device(const CollectiveArgs& args, int device) {
  return device_detail(args.kind, args.dtype, args.count, args.op, args.root, device);
}

}  // namespace strait::comm
