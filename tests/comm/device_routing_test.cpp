// The device-buffer routing that runs in every build, GPU or not: host memory is never taken for
// device memory (so host buffers always take the UCX path, and nothing throws without a device),
// and the device path's argument checks (comm/collective_check.h), which make no CUDA call.
// The device path itself is tested in nccl_test.cpp (GPU machines).
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective_check.h"
#include "comm/collective_describe.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/device_memory.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using kernels::DType;
using kernels::ReduceOp;
using Kind = CollectiveArgs::Kind;
using strait::test::contains;

constexpr std::array kAllKinds = {
    Kind::Send,          Kind::Recv,   Kind::Broadcast, Kind::Allreduce, Kind::Allgather,
    Kind::ReduceScatter, Kind::Reduce, Kind::Gather,    Kind::Scatter,   Kind::Alltoall};

TEST(PointerDevice, HostMemoryIsNeverDeviceMemory) {
  std::vector<float> heap(1024);
  float stack[16] = {};
  static int global = 0;
  const auto owned = std::make_unique<std::byte[]>(1 << 20);
  for (const void* p : {static_cast<const void*>(heap.data()), static_cast<const void*>(stack),
                        static_cast<const void*>(&global), static_cast<const void*>(owned.get()),
                        static_cast<const void*>(owned.get() + 12345)}) {
    EXPECT_FALSE(kernels::is_device_pointer(p)) << p;
    EXPECT_EQ(kernels::pointer_device(p), std::nullopt) << p;
  }
  EXPECT_FALSE(kernels::is_device_pointer(nullptr));
}

TEST(DeviceRouting, HostAndNullBuffersTakeTheHostPath) {
  std::vector<float> a(64);
  std::vector<float> b(64);
  for (const Kind kind : kAllKinds) {
    for (const int rank : {0, 1}) {  // root and non-root
      const CollectiveArgs call{.kind = kind,
                                .send = a.data(),
                                .recv = b.data(),
                                .count = 4,
                                .dtype = DType::F32,
                                .root = 0};
      EXPECT_EQ(device_of(call, rank), std::nullopt) << collective_name(kind);
      const CollectiveArgs empty{.kind = kind, .count = 0, .dtype = DType::F32, .root = 0};
      EXPECT_EQ(device_of(empty, rank), std::nullopt) << collective_name(kind);
    }
  }
}

// Expects validate_device() to throw InvalidArgument whose message contains `needle`.
void expect_invalid(const CollectiveArgs& call, int rank, int size, const std::string& needle) {
  try {
    validate_device(call, rank, size);
    ADD_FAILURE() << collective_name(call.kind) << ": accepted, expected '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_TRUE(contains(e.what(), needle)) << e.what();
    EXPECT_TRUE(contains(e.what(), std::string(collective_name(call.kind)))) << e.what();
  }
}

TEST(DeviceRouting, ValidateRefusesWhatNcclCannotDo) {
  float x[8] = {};
  float y[8] = {};
  expect_invalid({.kind = Kind::Broadcast, .recv = x, .count = 8, .root = 2}, 0, 2,
                 "root 2 is not in this communicator of size 2");
  expect_invalid({.kind = Kind::Send, .send = x, .count = 8, .root = -1}, 0, 2, "rank -1");
  expect_invalid({.kind = Kind::Send, .send = x, .count = 8, .root = 1}, 1, 2, "send to itself");
  expect_invalid({.kind = Kind::Recv, .recv = x, .count = 8, .root = 0}, 0, 2,
                 "receive from itself");
  expect_invalid({.kind = Kind::Recv, .recv = x, .count = 8, .root = CollectiveArgs::kAnySource}, 0,
                 2, "NCCL cannot receive from any source");
  expect_invalid({.kind = Kind::Send, .send = x, .count = 8, .root = 1, .tag = 7}, 0, 2, "tag 7");
  expect_invalid({.kind = Kind::Allreduce,
                  .send = x,
                  .recv = y,
                  .count = 8,
                  .dtype = DType::I32,
                  .op = ReduceOp::Avg},
                 0, 2, "avg of i32");
  expect_invalid({.kind = Kind::Allreduce, .send = nullptr, .recv = y, .count = 8}, 0, 2,
                 "null buffer");
  expect_invalid({.kind = Kind::Reduce, .send = x, .recv = nullptr, .count = 8, .root = 0}, 0, 2,
                 "null buffer");
  expect_invalid({.kind = Kind::Alltoall, .send = x, .recv = x, .count = 4}, 0, 2, "not in place");
}

TEST(DeviceRouting, ValidateAcceptsBuffersUnusedOffTheRoot) {
  float x[8] = {};
  // The root's buffer only: recv of reduce and gather, send of scatter, may be null elsewhere.
  EXPECT_NO_THROW(validate_device({.kind = Kind::Reduce, .send = x, .count = 8, .root = 0}, 1, 2));
  EXPECT_NO_THROW(validate_device({.kind = Kind::Gather, .send = x, .count = 8, .root = 0}, 1, 2));
  EXPECT_NO_THROW(validate_device({.kind = Kind::Scatter, .recv = x, .count = 8, .root = 0}, 1, 2));
  EXPECT_NO_THROW(
      validate_device({.kind = Kind::Broadcast, .recv = x, .count = 8, .root = 1}, 0, 2));
  EXPECT_NO_THROW(validate_device({.kind = Kind::Send, .send = x, .count = 8, .root = 1}, 0, 2));
  // count 0: null buffers are fine; avg of floats is.
  EXPECT_NO_THROW(validate_device(
      {.kind = Kind::Allreduce, .count = 0, .dtype = DType::F32, .op = ReduceOp::Avg}, 0, 2));
}

TEST(DeviceRouting, DescriptionNamesDtypeCountOpRootAndGpu) {
  EXPECT_EQ(describe_device(
                {.kind = Kind::Allreduce, .count = 5, .dtype = DType::F32, .op = ReduceOp::Sum}, 0),
            "(f32 x 5, sum) on GPU 0 via NCCL");
  EXPECT_EQ(
      describe_device(
          {.kind = Kind::Reduce, .count = 3, .dtype = DType::BF16, .op = ReduceOp::Max, .root = 2},
          1),
      "(bf16 x 3, max, root 2) on GPU 1 via NCCL");
  EXPECT_EQ(describe_device({.kind = Kind::Send, .count = 64, .root = 1}, 0),
            "(u8 x 64, to rank 1) on GPU 0 via NCCL");
}

// Host buffers keep going through UCX with a stream set (the stream is never touched: this one is
// not a real stream), and every byte is counted by the host algorithms, which the device path
// would not do.
TEST(DeviceRouting, HostBuffersTakeTheUcxPathWithAStreamSet) {
  testing::run_ranks(2, [](Communicator& comm) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a recognisable bogus handle, never dereferenced
    comm.set_stream(reinterpret_cast<kernels::CudaStream>(std::uintptr_t{0x5a5a}));
    std::vector<float> in(1000, static_cast<float>(comm.rank() + 1));
    std::vector<float> out(1000);
    comm.allreduce(in.data(), out.data(), in.size(), DType::F32, ReduceOp::Sum);
    for (const float v : out) ASSERT_EQ(v, 3.0F);
    EXPECT_GT(comm.stats().allreduce_bytes, 0U);
    std::vector<float> gathered(2000);
    comm.allgather(in.data(), gathered.data(), in.size(), DType::F32);
    EXPECT_EQ(gathered[0], 1.0F);
    EXPECT_EQ(gathered[1000], 2.0F);
    float b = comm.rank() == 1 ? 42.0F : 0.0F;
    comm.broadcast(&b, 1, DType::F32, 1);
    EXPECT_EQ(b, 42.0F);
    if (comm.rank() == 0) {
      comm.send(in.data(), 16, 1, /*tag=*/9);  // tags are fine on the host path
    } else {
      std::array<float, 4> got{};
      comm.recv(got.data(), sizeof got, 0, 9);
      EXPECT_EQ(got, (std::array<float, 4>{1.0F, 1.0F, 1.0F, 1.0F}));  // rank 0's input
    }
  });
}

}  // namespace
}  // namespace strait::comm
