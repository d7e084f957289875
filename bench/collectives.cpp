#include "bench/collectives.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strait::bench {
namespace {

double one(int /*ranks*/) {
  return 1.0;
}

// allreduce: every rank ends with the reduction of all; busbw 2(n-1)/n.
Collective allreduce() {
  return Collective{
      .name = "allreduce",
      .reduces = true,
      .bus_factor = [](int n) { return 2.0 * (n - 1) / n; },
      .shape = whole_buffer_shape,
      .in_place = same_buffer,
      .run =
          [](const Call& c) {
            if (c.codec.empty()) return c.comm.allreduce(c.send, c.recv, c.count, c.dtype, c.op);
            c.comm.allreduce_compressed(static_cast<const float*>(c.send),
                                        static_cast<float*>(c.recv), c.count, c.op,
                                        comm::Compression{std::string(c.codec), ""});
          },
      .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
        return reduce_expected(c.dtype, c.op, c.ranks, [&](int r) { return c.input(r, i); });
      },
  };
}

// allgather: count per rank; recv holds rank r's block at r * count; busbw (n-1)/n.
Collective allgather() {
  return Collective{
      .name = "allgather",
      .bus_factor = [](int n) { return (n - 1.0) / n; },
      .shape =
          [](std::size_t bytes, std::size_t elem, int n) {
            const std::size_t count = bytes / elem / static_cast<std::size_t>(n);
            const std::size_t all = count * static_cast<std::size_t>(n);
            return Shape{
                .count = count, .send_count = count, .recv_count = all, .bytes = all * elem};
          },
      .in_place =
          [](const Shape& s, int rank) {
            return InPlace{.send = s.count * static_cast<std::size_t>(rank), .recv = 0};
          },
      .run = [](const Call& c) { c.comm.allgather(c.send, c.recv, c.count, c.dtype); },
      .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
        return copied(c.input(static_cast<int>(i / c.count), i % c.count));
      },
  };
}

// broadcast: the root's buffer everywhere; busbw 1. strait's broadcast has one buffer only.
Collective broadcast() {
  return Collective{
      .name = "broadcast",
      .rooted = true,
      .out_of_place = false,
      .bus_factor = one,
      .shape = whole_buffer_shape,
      .in_place = same_buffer,
      .run = [](const Call& c) { c.comm.broadcast(c.recv, c.count, c.dtype, c.root); },
      .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
        return copied(c.input(c.root, i));
      },
  };
}

// sendrecv (nccl-tests'): rank r sends to r+1 and receives from r-1, around the ring; busbw 1.
Collective sendrecv() {
  return Collective{
      .name = "sendrecv",
      .min_ranks = 2,
      .bus_factor = one,
      .shape = whole_buffer_shape,
      .run =
          [](const Call& c) {
            const int n = c.comm.size();
            const int rank = c.comm.rank();
            const std::size_t bytes = c.count * kernels::dtype_size(c.dtype);
            auto recv = c.comm.irecv(c.recv, bytes, (rank + n - 1) % n);
            auto send = c.comm.isend(c.send, bytes, (rank + 1) % n);
            send.wait();
            recv.wait();
          },
      .expected = [](const Context& c, std::size_t i) -> std::optional<Expected> {
        return copied(c.input((c.rank + c.ranks - 1) % c.ranks, i));
      },
  };
}

std::vector<Collective>& registry() {
  static std::vector<Collective> all{allreduce(), allgather(), broadcast(), sendrecv()};
  return all;
}

}  // namespace

const std::vector<Collective>& collectives() {
  return registry();
}

CollectiveRegistration::CollectiveRegistration(const Collective& c) {
  registry().push_back(c);
}

const Collective& find_collective(std::string_view name) {
  std::string known;
  for (const auto& c : collectives()) {
    if (c.name == name) return c;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", c.name);
  }
  throw Error(
      ErrorCode::InvalidArgument,
      fmt::format("unknown collective '{}': this build of strait-bench has {}", name, known));
}

Shape whole_buffer_shape(std::size_t bytes, std::size_t elem, int /*ranks*/) {
  const std::size_t count = bytes / elem;
  return Shape{.count = count, .send_count = count, .recv_count = count, .bytes = count * elem};
}

InPlace same_buffer(const Shape& /*s*/, int /*rank*/) {
  return InPlace{};
}

}  // namespace strait::bench
