// strait-bench's reduce_scatter, reduce and alltoall. They register themselves (collectives.h), so
// this file is a source of the strait-bench executable itself (bench/CMakeLists.txt).
#include "bench/collectives.h"

namespace strait::bench {
namespace {

std::size_t sz(int n) {
  return static_cast<std::size_t>(n);
}

// A send buffer of n blocks of count = bytes / elem / n elements, of which each rank receives
// recv_blocks; size = the whole send buffer.
Shape blocks_shape(std::size_t bytes, std::size_t elem, int n, std::size_t recv_blocks) {
  const std::size_t count = bytes / elem / sz(n);
  return Shape{.count = count,
               .send_count = count * sz(n),
               .recv_count = count * recv_blocks,
               .bytes = count * sz(n) * elem};
}

// reduce_scatter: rank r ends with block r (count elements) of the reduction of every rank's
// n * count elements; size = the whole send buffer; busbw (n-1)/n. In place (nccl-tests), the
// result lands in the send buffer at rank * count.
const CollectiveRegistration kReduceScatter{Collective{
    .name = "reduce_scatter",
    .reduces = true,
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = [](std::size_t bytes, std::size_t elem,
                int n) { return blocks_shape(bytes, elem, n, 1); },
    .in_place = [](const Shape& s,
                   int rank) { return InPlace{.send = 0, .recv = s.count * sz(rank)}; },
    .run =
        [](const Call& c) {
          c.comm.ireduce_scatter(c.send, c.recv, c.count, c.dtype, c.op).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      const std::size_t at = c.count * sz(c.rank) + i;
      return reduce_expected(c.dtype, c.op, c.ranks, [&](int r) { return c.input(r, at); });
    },
}};

// reduce: the root ends with the reduction; other ranks' receive buffers are not defined.
// busbw 1.
const CollectiveRegistration kReduce{Collective{
    .name = "reduce",
    .reduces = true,
    .rooted = true,
    .bus_factor = [](int /*n*/) { return 1.0; },
    .shape = whole_buffer_shape,
    .in_place = same_buffer,
    .run =
        [](const Call& c) {
          // In place, only the root's recv is the send buffer; elsewhere recv is not used.
          void* recv = c.comm.rank() != c.root && c.recv == c.send ? nullptr : c.recv;
          c.comm.ireduce(c.send, recv, c.count, c.dtype, c.op, c.root).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      if (c.rank != c.root) return std::nullopt;
      return reduce_expected(c.dtype, c.op, c.ranks, [&](int r) { return c.input(r, i); });
    },
}};

// alltoall: block p of rank r's send buffer (count elements each) goes to block r of rank p's
// receive buffer; size = one rank's whole buffer; busbw (n-1)/n.
const CollectiveRegistration kAlltoall{Collective{
    .name = "alltoall",
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = [](std::size_t bytes, std::size_t elem,
                int n) { return blocks_shape(bytes, elem, n, sz(n)); },
    .in_place = same_buffer,
    .run = [](const Call& c) { c.comm.ialltoall(c.send, c.recv, c.count, c.dtype).wait(); },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      const auto from = static_cast<int>(i / c.count);
      return copied(c.input(from, c.count * sz(c.rank) + i % c.count));
    },
}};

}  // namespace
}  // namespace strait::bench
