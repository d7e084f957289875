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
  const CollectiveKindInfo& info = kind_info(kind);
  std::string detail = fmt::format("({} x {}", kernels::dtype_name(dtype), count);
  if (info.reduces) detail += fmt::format(", {}", kernels::reduce_op_name(op));
  if (info.point_to_point) detail += fmt::format(", {} rank {}", info.direction, root);
  if (info.rooted) detail += fmt::format(", root {}", root);
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
  if (kind_info(a.kind).per_rank_counts) {
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
  const CollectiveKindInfo& info = kind_info(kind);
  if (device >= 0) {
    const std::string detail = device_detail(kind, dtype, count, op, root, device);
    if (info.point_to_point) return fmt::format("device {} {} {}", what, detail, where);
    return fmt::format("{} #{} {} {}", what, seq, detail, where);
  }
  if (info.point_to_point && root < 0) {
    return fmt::format("{} of {} bytes {} any rank (tag {}) {}", info.name, count, info.direction,
                       tag, where);
  }
  if (info.point_to_point) {
    return fmt::format("{} of {} bytes {} rank {} (tag {}) {}", info.name, count, info.direction,
                       root, tag, where);
  }
  if (info.send == BufferUse::None && info.recv == BufferUse::None) {
    return fmt::format("{} #{} {}", what, seq, where);
  }
  std::string detail;
  if (kind == Kind::AlltoallV) {  // a count per pair each way
    detail = fmt::format("{}, send {} recv {}", dtype_name, list(counts), list(recv_counts));
  } else {
    detail =
        fmt::format("{} x {}", dtype_name,
                    info.per_rank_counts ? list(counts) : fmt::format("{}{}", count, info.per));
  }
  if (info.reduces) detail += fmt::format(", {}", op_name);
  if (info.rooted) detail += fmt::format(", root {}", root);
  if (info.tuned) detail += fmt::format(", {}", selection.describe());
  if (kind == Kind::AllreduceCompressed) detail += compression_detail();
  return fmt::format("{} #{} ({}) {}", what, seq, detail, where);
}

std::string OpSummary::compression_detail() const {
  std::string detail = fmt::format(", {}", codec);
  if (plan) {
    detail += fmt::format(
        ", {} of {} matrices compressed, {} elements plain", plan->compressed.size(),
        plan->layout_matrices == 0 ? std::size_t{1} : plan->layout_matrices, plan->plain_count);
  }
  if (error_feedback) detail += ", error feedback";
  if (selection.algorithm != nullptr && selection.algorithm->name == "hierarchical") {
    detail += ", hierarchical";
  }
  return detail;
}

std::string describe_device(const CollectiveArgs& args, int device) {
  return device_detail(args.kind, args.dtype, args.count, args.op, args.root, device);
}

}  // namespace strait::comm
