#include "comm/collective_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <string>

#include "comm/transport/tag.h"
#include "core/error.h"
#include "kernels/device_memory.h"
#include "kernels/reduce.h"

namespace strait::comm {

using Kind = CollectiveArgs::Kind;

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

void check_peer(int peer, int size, std::string_view what) {
  if (peer < 0 || peer >= size) {
    invalid(fmt::format("{}: rank {} is not in this communicator of size {}", what, peer, size));
  }
}

void check_avg(std::string_view what, kernels::DType dtype, kernels::ReduceOp op) {
  if (op == kernels::ReduceOp::Avg && !kernels::dtype_is_float(dtype)) {
    invalid(
        fmt::format("{}: avg of {} is not defined; use sum and divide, or a floating-point "
                    "dtype",
                    what, kernels::dtype_name(dtype)));
  }
  if (kernels::reduce_op_is_bitwise(op) && kernels::dtype_is_float(dtype)) {
    invalid(
        fmt::format("{}: {} of {} is not defined; bitwise ops take integer dtypes only "
                    "(int8, uint8, int32, int64)",
                    what, kernels::reduce_op_name(op), kernels::dtype_name(dtype)));
  }
}

void check_buffer(std::string_view what, const char* name, const void* buf, std::size_t bytes) {
  if (buf == nullptr && bytes != 0) {
    invalid(fmt::format("{}: the {} buffer is null but must hold {} bytes", what, name, bytes));
  }
}

void check_span(std::string_view what, const char* name, std::span<const std::size_t> counts,
                int size) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    invalid(fmt::format("{}: {} has {} entries; it needs one per rank of the communicator ({})",
                        what, name, counts.size(), size));
  }
}

// `inner` (inner_bytes) may lie within `outer` (outer_bytes) only at `in_place`.
void check_overlap(std::string_view what, const void* inner, std::size_t inner_bytes,
                   const void* outer, std::size_t outer_bytes, const void* in_place,
                   const char* layout) {
  if (inner_bytes == 0 || outer_bytes == 0 || inner == in_place) return;
  const auto a = reinterpret_cast<std::uintptr_t>(inner);
  const auto b = reinterpret_cast<std::uintptr_t>(outer);
  if (a < b + outer_bytes && b < a + inner_bytes) {
    invalid(
        fmt::format("{}: the send and recv buffers overlap, but not in place (in place "
                    "means {}); use separate buffers or the in-place layout",
                    what, layout));
  }
}

const std::byte* at(const void* base, std::size_t bytes) {
  return static_cast<const std::byte*>(base) + bytes;
}

std::size_t sum(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

// Blocks of a ring collective (reduce_scatter(_v), allgather(_v)): the total, this rank's block
// and the elements before it; plain forms have `count` per rank.
struct Blocks {
  std::size_t total, mine, before;
};
Blocks blocks(const CollectiveArgs& a, int rank, int size) {
  const auto r = static_cast<std::size_t>(rank);
  if (a.counts.empty()) return {a.count * static_cast<std::size_t>(size), a.count, a.count * r};
  return {sum(a.counts), a.counts[r], sum(a.counts.first(r))};
}

// Whether rank (the root when `root`) uses a buffer used so.
bool uses(BufferUse use, bool root) {
  return use == BufferUse::All || (use == BufferUse::Root && root);
}

}  // namespace

void check_host(const CollectiveArgs& a, int rank, int size) {
  const std::string_view what = collective_name(a.kind);
  const std::size_t elem = kernels::dtype_size(a.dtype);
  const std::size_t bytes = a.count * elem;
  const bool root = rank == a.root;
  switch (a.kind) {
    case Kind::Send:
    case Kind::Recv:
      if (a.kind == Kind::Recv && a.root == CollectiveArgs::kAnySource) {
        if (a.source == nullptr) invalid("recv from any source: no place for the sender's rank");
      } else {
        check_peer(a.root, size, what);
      }
      if (a.tag > kMaxUserTag) invalid(fmt::format("{}: tag {} exceeds 2^37 - 1", what, a.tag));
      return;
    case Kind::Barrier: return;
    case Kind::Broadcast:
      check_peer(a.root, size, "broadcast root");
      check_buffer(what, "data", a.recv, bytes);
      return;
    case Kind::Allreduce:
      check_avg(what, a.dtype, a.op);
      check_buffer(what, "send", a.send, bytes);
      check_buffer(what, "recv", a.recv, bytes);
      return;
    case Kind::AllreduceCompressed:
      if (a.op != kernels::ReduceOp::Sum && a.op != kernels::ReduceOp::Avg) {
        invalid(
            fmt::format("allreduce_compressed: op {} is not sum or avg: compressed "
                        "collectives reduce in fp32 after decoding, which only sums",
                        kernels::reduce_op_name(a.op)));
      }
      check_buffer(what, "send", a.send, bytes);
      check_buffer(what, "recv", a.recv, bytes);
      return;
    case Kind::Allgather:
      check_buffer(what, "send", a.send, bytes);
      check_buffer(what, "recv", a.recv, bytes * static_cast<std::size_t>(size));
      return;
    case Kind::AllgatherV: {
      check_span(what, "counts", a.counts, size);
      const Blocks b = blocks(a, rank, size);
      check_buffer(what, "send", a.send, b.mine * elem);
      check_buffer(what, "recv", a.recv, b.total * elem);
      check_overlap(what, a.send, b.mine * elem, a.recv, b.total * elem,
                    at(a.recv, b.before * elem),
                    "send == recv + the prefix sum of counts before this rank");
      return;
    }
    case Kind::ReduceScatter:
    case Kind::ReduceScatterV: {
      const bool v = a.kind == Kind::ReduceScatterV;
      if (v) check_span(what, "recv_counts", a.counts, size);
      check_avg(what, a.dtype, a.op);
      const Blocks b = blocks(a, rank, size);
      check_buffer(what, "send", a.send, b.total * elem);
      check_buffer(what, "recv", a.recv, b.mine * elem);
      check_overlap(what, a.recv, b.mine * elem, a.send, b.total * elem,
                    at(a.send, b.before * elem),
                    v ? "recv == send + the prefix sum of recv_counts before this rank"
                      : "recv == send + rank() * recv_count elements");
      return;
    }
    case Kind::Reduce:
      check_peer(a.root, size, "reduce root");
      check_avg(what, a.dtype, a.op);
      check_buffer(what, "send", a.send, bytes);
      if (root) {
        check_buffer(what, "root's recv", a.recv, bytes);
        check_overlap(what, a.send, bytes, a.recv, bytes, a.recv, "send == recv on the root");
      }
      return;
    case Kind::Gather:
    case Kind::Scatter: {
      const bool gather = a.kind == Kind::Gather;
      check_peer(a.root, size, gather ? "gather root" : "scatter root");
      const std::size_t all = bytes * static_cast<std::size_t>(size);
      // Gather: every rank's send is one block, the root's recv all of them; scatter: the reverse.
      const void* one = gather ? a.send : a.recv;
      const void* many = gather ? a.recv : a.send;
      check_buffer(what, gather ? "send" : "recv", one, bytes);
      if (root) {
        check_buffer(what, gather ? "root's recv" : "root's send", many, all);
        check_overlap(what, one, bytes, many, all,
                      at(many, static_cast<std::size_t>(a.root) * bytes),
                      gather ? "send == recv + root * count elements on the root"
                             : "recv == send + root * count elements on the root");
      }
      return;
    }
    case Kind::Alltoall:
    case Kind::AlltoallV: {
      const bool v = a.kind == Kind::AlltoallV;
      const auto r = static_cast<std::size_t>(rank);
      std::size_t send_total = a.count * static_cast<std::size_t>(size);
      std::size_t recv_total = send_total;
      bool same_layout = true;
      if (v) {
        check_span(what, "send_counts", a.counts, size);
        check_span(what, "recv_counts", a.recv_counts, size);
        if (a.counts[r] != a.recv_counts[r]) {
          invalid(
              fmt::format("{}: send_counts[{}] = {} but recv_counts[{}] = {}: what this rank "
                          "sends itself must fit what it receives from itself",
                          what, r, a.counts[r], r, a.recv_counts[r]));
        }
        send_total = sum(a.counts);
        recv_total = sum(a.recv_counts);
        same_layout = std::equal(a.counts.begin(), a.counts.end(), a.recv_counts.begin());
      }
      check_buffer(what, "send", a.send, send_total * elem);
      check_buffer(what, "recv", a.recv, recv_total * elem);
      check_overlap(what, a.send, send_total * elem, a.recv, recv_total * elem,
                    same_layout ? a.recv : nullptr, "send == recv with send_counts == recv_counts");
      return;
    }
  }
}

void validate_device(const CollectiveArgs& a, int rank, int size) {
  const std::string_view name = collective_name(a.kind);
  const auto fail = [&](const std::string& why) {
    invalid(fmt::format("device {}: {}", name, why));
  };
  if (a.kind == Kind::Recv && a.root == CollectiveArgs::kAnySource) {
    fail("NCCL cannot receive from any source; name the peer, or receive into host memory");
  }
  if (a.root < 0 || a.root >= size) {
    fail(fmt::format("{} {} is not in this communicator of size {}",
                     a.point_to_point() ? "rank" : "root", a.root, size));
  }
  if (a.point_to_point()) {
    if (a.root == rank) {
      fail(
          fmt::format("rank {} cannot {} itself on the GPU: NCCL's send and receive each wait "
                      "for the other; copy the buffer (cudaMemcpyAsync) instead",
                      rank, a.kind == Kind::Send ? "send to" : "receive from"));
    }
    if (a.tag != 0) {
      fail(
          fmt::format("tag {}: NCCL matches sends and receives between two ranks in the "
                      "order posted, not by tag; pass tag 0 for device buffers",
                      a.tag));
    }
  }
  if (a.reduces() && a.op == kernels::ReduceOp::Avg && !kernels::dtype_is_float(a.dtype)) {
    fail(fmt::format("avg of {} is not defined; use sum and divide, or a floating-point dtype",
                     kernels::dtype_name(a.dtype)));
  }
  if (a.count == 0) return;
  const CollectiveKindInfo& info = kind_info(a.kind);
  const bool root = rank == a.root;
  if ((uses(info.send, root) && a.send == nullptr) ||
      (uses(info.recv, root) && a.recv == nullptr)) {
    fail("null buffer with a non-zero count");
  }
  if (a.kind == Kind::Alltoall && a.send == a.recv) {
    fail("send and recv are the same buffer: alltoall is not in place");
  }
}

MemoryKind memory_of(const CollectiveArgs& a, int rank, int* device) {
  const bool root = rank == a.root;
  struct Used {
    const char* name;
    const void* p;
  };
  std::array<Used, 2> used{};
  std::size_t n = 0;
  const auto use = [&](BufferUse u, const char* name, const void* p) {
    if (uses(u, root) && p != nullptr) used[n++] = Used{name, p};
  };
  const CollectiveKindInfo& info = kind_info(a.kind);
  use(info.send, "send", a.send);
  use(info.recv, "recv", a.recv);
  std::array<std::optional<int>, 2> on{};
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    on[i] = kernels::pointer_device(used[i].p);
    any = any || on[i].has_value();
  }
  if (!any) return MemoryKind::Host;
  if (n == 2 && on[0] != on[1]) {
    const auto where = [&](std::size_t i) {
      return on[i] ? fmt::format("device memory of GPU {}", *on[i]) : std::string("host memory");
    };
    invalid(
        fmt::format("{}: the {} buffer is {} but the {} buffer is {}: pass both in host "
                    "memory (UCX) or both on the communicator's GPU (NCCL)",
                    collective_name(a.kind), used[0].name, where(0), used[1].name, where(1)));
  }
  if (!a.device_capable()) {
    invalid(
        fmt::format("{}: the buffers are memory of GPU {}, but {} runs on host memory only "
                    "(NCCL has no such operation): copy them to host memory first",
                    collective_name(a.kind), *on[0], collective_name(a.kind)));
  }
  if (device != nullptr) *device = *on[0];
  return MemoryKind::Device;
}

std::optional<int> device_of(const CollectiveArgs& args, int rank) {
  int device = -1;
  if (memory_of(args, rank, &device) == MemoryKind::Host) return std::nullopt;
  return device;
}

}  // namespace strait::comm
