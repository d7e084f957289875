// strait-bench's reduce_scatter, reduce, alltoall, gather, scatter and the v forms (with equal
// counts: the shapes of their plain forms). They register themselves (collectives.h), so this file
// is a source of the strait-bench executable itself (bench/CMakeLists.txt).
#include <utility>
#include <vector>

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
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
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
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
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
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
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

// One block of count elements per rank sent, size() blocks received (gather, allgather_v) or the
// reverse (scatter); size = the whole gathered / scattered buffer.
Shape gathered_shape(std::size_t bytes, std::size_t elem, int n) {
  const std::size_t count = bytes / elem / sz(n);
  return Shape{.count = count,
               .send_count = count,
               .recv_count = count * sz(n),
               .bytes = count * sz(n) * elem};
}

Shape scattered_shape(std::size_t bytes, std::size_t elem, int n) {
  Shape s = gathered_shape(bytes, elem, n);
  std::swap(s.send_count, s.recv_count);
  return s;
}

// The v forms' counts: `count` for every rank.
std::vector<std::size_t> even(const Call& c) {
  return std::vector<std::size_t>(sz(c.comm.size()), c.count);
}

// gather: the root ends with block r = rank r's send buffer; busbw (n-1)/n (nccl-tests'). In
// place, the root's send is block root of its receive buffer.
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
const CollectiveRegistration kGather{Collective{
    .name = "gather",
    .rooted = true,
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = gathered_shape,
    .in_place = [](const Shape& s,
                   int rank) { return InPlace{.send = s.count * sz(rank), .recv = 0}; },
    .run =
        [](const Call& c) {
          void* recv = c.comm.rank() == c.root ? c.recv : nullptr;
          c.comm.igather(c.send, recv, c.count, c.dtype, c.root).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      if (c.rank != c.root) return std::nullopt;
      return copied(c.input(static_cast<int>(i / c.count), i % c.count));
    },
}};

// scatter: rank r ends with block r of the root's send buffer; busbw (n-1)/n. In place, the
// receive buffer is block rank of the send buffer.
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
const CollectiveRegistration kScatter{Collective{
    .name = "scatter",
    .rooted = true,
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = scattered_shape,
    .in_place = [](const Shape& s,
                   int rank) { return InPlace{.send = 0, .recv = s.count * sz(rank)}; },
    .run =
        [](const Call& c) {
          const void* send = c.comm.rank() == c.root ? c.send : nullptr;
          c.comm.iscatter(send, c.recv, c.count, c.dtype, c.root).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      return copied(c.input(c.root, c.count * sz(c.rank) + i));
    },
}};

// allgather_v, reduce_scatter_v and alltoall_v with count elements for every rank: as allgather,
// reduce_scatter and alltoall.
// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
const CollectiveRegistration kAllgatherV{Collective{
    .name = "allgather_v",
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = gathered_shape,
    .in_place = [](const Shape& s,
                   int rank) { return InPlace{.send = s.count * sz(rank), .recv = 0}; },
    .run = [](const Call& c) { c.comm.iallgather_v(c.send, c.recv, even(c), c.dtype).wait(); },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      return copied(c.input(static_cast<int>(i / c.count), i % c.count));
    },
}};

// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
const CollectiveRegistration kReduceScatterV{Collective{
    .name = "reduce_scatter_v",
    .reduces = true,
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = [](std::size_t bytes, std::size_t elem,
                int n) { return blocks_shape(bytes, elem, n, 1); },
    .in_place = [](const Shape& s,
                   int rank) { return InPlace{.send = 0, .recv = s.count * sz(rank)}; },
    .run =
        [](const Call& c) {
          c.comm.ireduce_scatter_v(c.send, c.recv, even(c), c.dtype, c.op).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      const std::size_t at = c.count * sz(c.rank) + i;
      return reduce_expected(c.dtype, c.op, c.ranks, [&](int r) { return c.input(r, at); });
    },
}};

// NOLINTNEXTLINE(cert-err58-cpp): registered at start-up, where a failure ends the program
const CollectiveRegistration kAlltoallV{Collective{
    .name = "alltoall_v",
    .bus_factor = [](int n) { return (n - 1.0) / n; },
    .shape = [](std::size_t bytes, std::size_t elem,
                int n) { return blocks_shape(bytes, elem, n, sz(n)); },
    .in_place = same_buffer,
    .run =
        [](const Call& c) {
          const auto counts = even(c);
          c.comm.ialltoall_v(c.send, counts, c.recv, counts, c.dtype).wait();
        },
    .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
      const auto from = static_cast<int>(i / c.count);
      return copied(c.input(from, c.count * sz(c.rank) + i % c.count));
    },
}};

}  // namespace
}  // namespace strait::bench
