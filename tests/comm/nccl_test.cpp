#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/nccl/nccl_comm.h"
#include "core/error.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/device_reduce.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu.h"

namespace strait::comm {
namespace {

using kernels::DeviceBuffer;
using kernels::DType;
using kernels::ReduceOp;
using std::chrono::milliseconds;
using strait::test::expect_error;

int device_count() {
  int n = 0;
  kernels::cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

// Runs everywhere: argument checks come before any CUDA call; without a device the constructor
// says so (Unavailable) instead of waiting for peers.
TEST(NcclComm, RejectsBadRanksAndMissingDevices) {
  HashStore store;
  expect_error(ErrorCode::InvalidArgument, [&] { NcclComm c(store, 2, 2, 0); });
  expect_error(ErrorCode::InvalidArgument, [&] { NcclComm c(store, -1, 2, 0); });
  expect_error(ErrorCode::InvalidArgument, [&] { NcclComm c(store, 0, 0, 0); });
  std::string why;
  if (kernels::cuda_device_available(&why)) {
    expect_error(ErrorCode::InvalidArgument, [&] { NcclComm c(store, 0, 1, device_count()); });
  } else {
    expect_error(ErrorCode::Unavailable, [&] { NcclComm c(store, 0, 1, 0); });
  }
}

// Rank 1 of 2 with no rank 0: the id never arrives, and the constructor gives up at the deadline
// naming the key, rather than hanging.
TEST(NcclComm, MissingRankZeroTimesOutNamingTheKey) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  NcclCommOptions options;
  options.key = "test/nccl/orphan";
  options.timeout = milliseconds(200);
  try {
    NcclComm comm(store, 1, 2, 0, options);
    FAIL() << "constructor returned without rank 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_NE(std::string(e.what()).find("test/nccl/orphan"), std::string::npos) << e.what();
  }
}

// What one rank contributes: distinct per rank and element, exactly representable in f32.
float contribution(int rank, std::size_t i, std::uint32_t seed) {
  std::mt19937 rng(seed + static_cast<std::uint32_t>(rank) * 7919U +
                   static_cast<std::uint32_t>(i % 1024) * 104729U);
  return static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 64.0F +
         static_cast<float>(rank);
}

struct Case {
  ReduceOp op;
  bool in_place;
  std::size_t count;
};

// Each rank (one thread per device) allreduces its contribution and checks every element against
// the double-precision sum (or mean) over ranks.
void run_rank(Store& store, int rank, int world, const std::vector<Case>& cases,
              const std::string& key) {
  NcclCommOptions options;
  options.key = key;
  options.timeout = milliseconds(120000);
  NcclComm comm(store, rank, world, rank, options);
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.size(), world);
  kernels::cuda_check(cudaSetDevice(rank), "cudaSetDevice");
  cudaStream_t raw = nullptr;
  kernels::cuda_check(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "cudaStreamCreate");
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream(raw, &cudaStreamDestroy);

  std::uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "rank " << rank << "/" << world << " " << kernels::reduce_op_name(c.op)
                 << (c.in_place ? " in-place" : " out-of-place") << " count " << c.count);
    ++seed;
    std::vector<float> mine(c.count);
    for (std::size_t i = 0; i < c.count; ++i) mine[i] = contribution(rank, i, seed);
    DeviceBuffer send(c.count * sizeof(float));
    DeviceBuffer recv(c.count * sizeof(float));
    send.upload(std::span<const float>(mine));
    if (!c.in_place) {
      // Poison recv so a collective that skipped writing it cannot pass.
      const std::vector<float> poison(c.count, -12345.0F);
      recv.upload(std::span<const float>(poison));
    }
    void* out = c.in_place ? send.data() : recv.data();
    comm.allreduce(send.data(), out, c.count, DType::F32, c.op, stream.get());
    comm.synchronize(stream.get());
    std::vector<float> got(c.count);
    (c.in_place ? send : recv).download(std::span<float>(got));
    if (!c.in_place) {
      std::vector<float> untouched(c.count);
      send.download(std::span<float>(untouched));
      EXPECT_EQ(untouched, mine) << "out-of-place allreduce modified its send buffer";
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < c.count; ++i) {
      double ref = 0;
      for (int r = 0; r < world; ++r) ref += contribution(r, i, seed);
      if (c.op == ReduceOp::Avg) ref /= world;
      // f32 sums of `world` terms of magnitude < 16 + world, then one division.
      const double tol = 4.0 * world * 0x1p-24 * (16.0 + world) * world;
      if (!(std::fabs(got[i] - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << got[i] << ", reference " << ref;
      }
    }
    EXPECT_EQ(bad, 0U);
  }
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = {
      {ReduceOp::Sum, false, 1},       {ReduceOp::Sum, true, 1},
      {ReduceOp::Sum, false, 1000003}, {ReduceOp::Sum, true, 1000003},
      {ReduceOp::Avg, false, 1000003}, {ReduceOp::Avg, true, 1000003},
      {ReduceOp::Avg, false, 7},       {ReduceOp::Sum, false, 0},
  };
  return cases;
}

TEST(NcclComm, WorldSizeOneAllreduceThroughHashStore) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  run_rank(store, 0, 1, all_cases(), "test/nccl/world1");
}

TEST(NcclComm, OneThreadPerDeviceAllreduce) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "needs two or more CUDA devices, found " << world;
  HashStore store;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        run_rank(store, r, world, all_cases(), "test/nccl/multi");
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (errors[static_cast<std::size_t>(r)]) {
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    }
  }
}

// The collectives beyond allreduce, and grouped point-to-point, on one rank of `world` (one thread
// per device): f32 values that are small integers, so every result is exact.
float value(int rank, std::size_t i) {
  return static_cast<float>(rank * 1000 + static_cast<int>(i % 997));
}

std::vector<float> download(const DeviceBuffer& d) {
  std::vector<float> h(d.bytes() / sizeof(float));
  d.download(std::span<float>(h));
  return h;
}

void run_collectives(Store& store, int rank, int world, const std::string& key) {
  NcclCommOptions options;
  options.key = key;
  options.timeout = milliseconds(120000);
  options.wait_for_init = rank % 2 == 0;  // both ways of waiting for init
  NcclComm comm(store, rank, world, rank, options);
  kernels::cuda_check(cudaSetDevice(rank), "cudaSetDevice");
  const auto w = static_cast<std::size_t>(world);
  const std::size_t n = 1001;  // elements per rank (or per block)
  std::vector<float> mine(n * w);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = value(rank, i);
  DeviceBuffer send(mine.size() * sizeof(float));
  send.upload(std::span<const float>(mine));
  DeviceBuffer recv(mine.size() * sizeof(float));
  DeviceBuffer one(n * sizeof(float));
  const int root = world - 1;

  // reduce_scatter: block `rank` of the sum over ranks.
  comm.reduce_scatter(send.data(), one.data(), n, DType::F32, ReduceOp::Sum, nullptr);
  comm.synchronize(nullptr);
  std::vector<float> got = download(one);
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += value(r, static_cast<std::size_t>(rank) * n + i);
    ASSERT_EQ(got[i], want) << "reduce_scatter element " << i;
  }
  // allgather of the first n elements.
  comm.allgather(send.data(), recv.data(), n, DType::F32, nullptr);
  comm.synchronize(nullptr);
  got = download(recv);
  for (std::size_t i = 0; i < n * w; ++i) {
    ASSERT_EQ(got[i], value(static_cast<int>(i / n), i % n)) << "allgather element " << i;
  }
  // broadcast from the last rank (out of place), reduce (max) to it.
  comm.broadcast(send.data(), one.data(), n, DType::F32, root, nullptr);
  comm.synchronize(nullptr);
  got = download(one);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(root, i)) << "broadcast " << i;
  comm.reduce(send.data(), one.data(), n, DType::F32, ReduceOp::Max, root, nullptr);
  comm.synchronize(nullptr);
  if (rank == root) {
    got = download(one);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], value(world - 1, i)) << "reduce " << i;
  }
  // gather to the root, scatter from it.
  comm.gather(send.data(), recv.data(), n, DType::F32, root, nullptr);
  comm.synchronize(nullptr);
  if (rank == root) {
    got = download(recv);
    for (std::size_t i = 0; i < n * w; ++i) {
      ASSERT_EQ(got[i], value(static_cast<int>(i / n), i % n)) << "gather element " << i;
    }
  }
  comm.scatter(send.data(), one.data(), n, DType::F32, root, nullptr);
  comm.synchronize(nullptr);
  got = download(one);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], value(root, static_cast<std::size_t>(rank) * n + i)) << "scatter " << i;
  }
  // alltoall: block j of recv is block `rank` of rank j's send.
  comm.alltoall(send.data(), recv.data(), n, DType::F32, nullptr);
  comm.synchronize(nullptr);
  got = download(recv);
  for (std::size_t i = 0; i < n * w; ++i) {
    const int from = static_cast<int>(i / n);
    ASSERT_EQ(got[i], value(from, static_cast<std::size_t>(rank) * n + i % n))
        << "alltoall element " << i;
  }
  // A ring shift in one group (with one rank: a send to itself), which needs the group: each
  // send waits on the GPU for its receive.
  {
    NcclComm::Group group;
    comm.send(send.data(), n, DType::F32, (rank + 1) % world, nullptr);
    comm.recv(one.data(), n, DType::F32, (rank + world - 1) % world, nullptr);
    group.end();
  }
  comm.synchronize(nullptr);
  got = download(one);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], value((rank + world - 1) % world, i)) << "ring shift element " << i;
  }
  EXPECT_TRUE(comm.ready());
}

TEST(NcclComm, WorldSizeOneCollectivesAndGroups) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  run_collectives(store, 0, 1, "test/nccl/colls1");
}

TEST(NcclComm, OneThreadPerDeviceCollectivesAndGroups) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "needs two or more CUDA devices, found " << world;
  HashStore store;
  std::vector<std::jthread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        run_collectives(store, r, world, "test/nccl/colls");
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
}

TEST(NcclComm, RejectsRootsAndPeersOutsideTheCommunicator) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  NcclCommOptions options;
  options.key = "test/nccl/ranks";
  NcclComm comm(store, 0, 1, 0, options);
  DeviceBuffer buf(16 * sizeof(float));
  expect_error(ErrorCode::InvalidArgument,
               [&] { comm.broadcast(buf.data(), buf.data(), 16, DType::F32, 1, nullptr); });
  expect_error(ErrorCode::InvalidArgument,
               [&] { comm.send(buf.data(), 16, DType::F32, -1, nullptr); });
  expect_error(ErrorCode::InvalidArgument,
               [&] { comm.alltoall(buf.data(), buf.data(), 16, DType::F32, nullptr); });
  EXPECT_FALSE(comm.aborted());
}

TEST(NcclComm, AbortMakesLaterCallsFailWithAborted) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  NcclCommOptions options;
  options.key = "test/nccl/abort";
  NcclComm comm(store, 0, 1, 0, options);
  DeviceBuffer buf(16 * sizeof(float));
  EXPECT_FALSE(comm.aborted());
  comm.abort();
  comm.abort();  // idempotent
  EXPECT_TRUE(comm.aborted());
  expect_error(ErrorCode::Aborted, [&] {
    comm.allreduce(buf.data(), buf.data(), 16, DType::F32, ReduceOp::Sum, nullptr);
  });
  expect_error(ErrorCode::Aborted, [&] { comm.synchronize(nullptr); });
}

TEST(NcclComm, RejectsAvgOfIntegersAndNullBuffers) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  HashStore store;
  NcclCommOptions options;
  options.key = "test/nccl/args";
  NcclComm comm(store, 0, 1, 0, options);
  DeviceBuffer buf(16 * sizeof(std::int32_t));
  expect_error(ErrorCode::InvalidArgument, [&] {
    comm.allreduce(buf.data(), buf.data(), 16, DType::I32, ReduceOp::Avg, nullptr);
  });
  expect_error(ErrorCode::InvalidArgument, [&] {
    comm.allreduce(nullptr, buf.data(), 16, DType::F32, ReduceOp::Sum, nullptr);
  });
  // The communicator is still usable after refused arguments.
  comm.allreduce(buf.data(), buf.data(), 16, DType::I32, ReduceOp::Sum, nullptr);
  comm.synchronize(nullptr);
  EXPECT_FALSE(comm.aborted());
}

}  // namespace
}  // namespace strait::comm
