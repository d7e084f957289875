// The collectives strait-bench measures, each described once: how a size in bytes becomes its
// buffers (nccl-tests' conventions), how it is called, what every rank must hold afterwards and
// its bus-bandwidth factor.
//
// Conventions (nccl-tests' doc/PERFORMANCE.md and src/*.cu): "size" is the largest buffer of a
// rank in bytes (the full gathered / scattered buffer for allgather, reduce_scatter and
// alltoall), "count" the count argument of the call (per rank for those three: size / elem / n).
// algbw = size / time; busbw = algbw * factor: 2(n-1)/n for allreduce; (n-1)/n for
// reduce_scatter, allgather and alltoall; 1 for broadcast, reduce and sendrecv. In place means
// nccl-tests' layout: allgather sends from recv + rank * count, reduce_scatter receives into
// send + rank * count, the others use one buffer.
// Registration: the built-in collectives are listed in collectives.cpp; a source compiled into
// strait-bench may add more with a static CollectiveRegistration (bench/collectives_more.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_data.h"
#include "comm/communicator.h"

namespace strait::bench {

// One rank's buffers for one size, in elements.
struct Shape {
  std::size_t count = 0;       // the count argument of the call
  std::size_t send_count = 0;  // elements in the send buffer
  std::size_t recv_count = 0;  // elements in the receive buffer
  std::size_t bytes = 0;       // the "size" column: max(send, recv) * element size
};

// Element offsets of send and recv inside the one buffer of an in-place call.
struct InPlace {
  std::size_t send = 0;
  std::size_t recv = 0;
};

// What one call gets.
struct Call {
  comm::Communicator& comm;
  const void* send;
  void* recv;
  std::size_t count;
  kernels::DType dtype;
  kernels::ReduceOp op;
  int root;
  std::string_view codec;  // allreduce: empty, or the codec of allreduce_compressed
};

// The data an element is checked against: the collective, the world and this rank.
struct Context {
  kernels::DType dtype;
  kernels::ReduceOp op;
  int root;
  int rank;
  int ranks;
  std::size_t count;  // Shape::count
  // What rank r contributed at index i of its send buffer.
  [[nodiscard]] double input(int r, std::size_t i) const { return input_value(dtype, op, r, i); }
};

struct Collective {
  std::string_view name;
  bool reduces = false;      // takes -o; its table shows the reduction
  bool rooted = false;       // takes -r; its table shows the root
  bool out_of_place = true;  // strait has a form with separate buffers
  int min_ranks = 1;
  double (*bus_factor)(int ranks) = nullptr;
  // `bytes` is the size asked for; the shape may round it down to whole elements per rank.
  Shape (*shape)(std::size_t bytes, std::size_t elem_size, int ranks) = nullptr;
  // In place, send and recv point into one buffer of max(send, recv) elements at these offsets;
  // null when strait has no in-place form.
  InPlace (*in_place)(const Shape& s, int rank) = nullptr;
  void (*run)(const Call& c) = nullptr;
  // The expected value of recv[i] on this rank; nullopt when the call leaves it undefined.
  std::optional<Expected> (*expected)(const Context& c, std::size_t i) = nullptr;
};

// Every collective this build of strait-bench has, in registration order.
const std::vector<Collective>& collectives();
// The collective named `name`; InvalidArgument listing the known names otherwise.
const Collective& find_collective(std::string_view name);

// Adds a collective to collectives() during static initialisation.
struct CollectiveRegistration {
  explicit CollectiveRegistration(const Collective& c);
};

// Shared pieces. One buffer of bytes / elem_size elements, sent and received:
Shape whole_buffer_shape(std::size_t bytes, std::size_t elem_size, int ranks);
// send and recv at the start of the one buffer:
InPlace same_buffer(const Shape& s, int rank);

}  // namespace strait::bench
