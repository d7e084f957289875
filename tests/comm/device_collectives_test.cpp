// Communicator on device buffers (the NCCL path, comm/device_collectives.h): ranks are threads of
// this process, one per GPU (NCCL does not support two ranks of a communicator on one device), so
// world size 1 runs on any GPU machine and larger worlds need as many GPUs. Values are checked
// against double-precision references after copying back; abort() and deadlines must end device
// operations that cannot finish. Every test skips (or, with STRAIT_REQUIRE_GPU=1, fails) without a
// device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/device_memory.h"
#include "tests/comm/comm_test_data.h"
#include "tests/comm/comm_test_ranks.h"
#include "tests/common/gpu.h"
#include "tests/common/text.h"

namespace strait::comm {
namespace {

using namespace std::chrono_literals;
using kernels::DeviceBuffer;
using kernels::DType;
using kernels::ReduceOp;
using strait::test::contains;
using testing::error_of;
using Bytes8 = std::vector<std::byte>;

constexpr std::array kAllDTypes = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                   DType::I8,  DType::U8,  DType::I32, DType::I64};

int device_count() {
  int n = 0;
  kernels::cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

// World sizes to run: 1, and one rank per GPU (at most the data helpers' limit) when there are
// two or more.
std::vector<int> worlds() {
  std::vector<int> w = {1};
  const int n = std::min(device_count(), testing::kMaxCheckedWorld);
  if (n >= 2) w.push_back(n);
  return w;
}

// Ranks as threads, rank r on GPU r.
template <class Body>
void run_device_ranks(int world, Body body, std::chrono::milliseconds timeout = 60s) {
  testing::run_ranks(
      world,
      [&](Communicator& comm) {
        kernels::cuda_check(cudaSetDevice(comm.rank()), "cudaSetDevice");
        body(comm);
      },
      timeout);
}

DeviceBuffer to_device(const Bytes8& host) {
  DeviceBuffer d(host.size());
  d.upload(std::span<const std::byte>(host));
  return d;
}

Bytes8 to_host(const DeviceBuffer& d) {
  Bytes8 h(d.bytes());
  d.download(std::span<std::byte>(h));
  return h;
}

// A stream of this thread's device, destroyed at scope end.
struct Stream {
  Stream() { kernels::cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { static_cast<void>(cudaStreamDestroy(s)); }
  cudaStream_t s = nullptr;
};

TEST(PointerDevice, DeviceMemoryIsDevicePinnedAndManagedAreNot) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  int current = 0;
  kernels::cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  DeviceBuffer device(4096);
  EXPECT_TRUE(kernels::is_device_pointer(device.data()));
  EXPECT_EQ(kernels::pointer_device(device.data()), current);
  EXPECT_EQ(kernels::pointer_device(static_cast<std::byte*>(device.data()) + 1000), current);

  void* pinned = nullptr;
  kernels::cuda_check(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault), "cudaHostAlloc");
  EXPECT_FALSE(kernels::is_device_pointer(pinned));
  static_cast<void>(cudaFreeHost(pinned));

  std::vector<float> registered(1024);
  kernels::cuda_check(cudaHostRegister(registered.data(), 4096, cudaHostRegisterDefault),
                      "cudaHostRegister");
  EXPECT_FALSE(kernels::is_device_pointer(registered.data()));
  static_cast<void>(cudaHostUnregister(registered.data()));

  void* managed = nullptr;
  kernels::cuda_check(cudaMallocManaged(&managed, 4096), "cudaMallocManaged");
  EXPECT_FALSE(kernels::is_device_pointer(managed));
  static_cast<void>(cudaFree(managed));

  std::vector<float> host(16);
  EXPECT_FALSE(kernels::is_device_pointer(host.data()));
}

// Every dtype x op x count, in place and out of place, against the double reference; the same
// checks as the host path's (tests/comm/comm_test_data.h).
TEST(DeviceCollectives, AllreduceEveryDtypeOpAndCount) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      std::uint64_t seed = 100;
      for (const DType t : kAllDTypes) {
        std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
        if (kernels::dtype_is_float(t)) ops.push_back(ReduceOp::Avg);
        for (const ReduceOp op : ops) {
          for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{65537}}) {
            for (const bool in_place : {false, true}) {
              ++seed;
              SCOPED_TRACE(::testing::Message()
                           << "world " << world << " " << kernels::dtype_name(t) << " "
                           << kernels::reduce_op_name(op) << " x " << count
                           << (in_place ? " in place" : ""));
              DeviceBuffer send = to_device(testing::make_input(t, op, seed, comm.rank(), count));
              DeviceBuffer recv = to_device(Bytes8(send.bytes(), std::byte{0xa5}));
              DeviceBuffer& out = in_place ? send : recv;
              comm.allreduce(send.data(), out.data(), count, t, op);
              const Bytes8 got = to_host(out);
              const auto bad = testing::check_allreduce(t, op, seed, world, got.data(), count);
              ASSERT_FALSE(bad.has_value()) << *bad;
            }
          }
        }
      }
    });
  }
}

TEST(DeviceCollectives, BroadcastFromEveryRoot) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      for (int root = 0; root < world; ++root) {
        const std::size_t count = 1000 + static_cast<std::size_t>(root);
        const std::uint64_t seed = 7 + static_cast<std::uint64_t>(root);
        const Bytes8 want = testing::make_input(DType::I64, ReduceOp::Max, seed, root, count);
        DeviceBuffer buf = to_device(comm.rank() == root ? want : Bytes8(want.size()));
        comm.broadcast(buf.data(), count, DType::I64, root);
        EXPECT_EQ(to_host(buf), want) << "root " << root << " of " << world;
      }
    });
  }
}

TEST(DeviceCollectives, AllgatherInRankOrder) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      const std::size_t count = 3001;
      DeviceBuffer send =
          to_device(testing::make_input(DType::BF16, ReduceOp::Sum, 5, comm.rank(), count));
      DeviceBuffer recv(send.bytes() * static_cast<std::size_t>(world));
      comm.allgather(send.data(), recv.data(), count, DType::BF16);
      const Bytes8 got = to_host(recv);
      for (int r = 0; r < world; ++r) {
        const Bytes8 want = testing::make_input(DType::BF16, ReduceOp::Sum, 5, r, count);
        EXPECT_EQ(std::memcmp(got.data() + static_cast<std::size_t>(r) * want.size(), want.data(),
                              want.size()),
                  0)
            << "block of rank " << r << " of " << world;
      }
    });
  }
}

// A message each way between ranks 0 and 1; the sender of the first goes second in the reply, so
// neither waits on the GPU for a receive posted behind its own send.
TEST(DeviceCollectives, SendAndRecvBetweenTwoGpus) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << device_count();
  run_device_ranks(2, [&](Communicator& comm) {
    const std::size_t bytes = (1 << 20) + 3;
    const Bytes8 ping = testing::make_input(DType::U8, ReduceOp::Max, 11, 0, bytes);
    const Bytes8 pong = testing::make_input(DType::U8, ReduceOp::Max, 12, 1, bytes);
    DeviceBuffer buf = to_device(comm.rank() == 0 ? ping : Bytes8(bytes));
    if (comm.rank() == 0) {
      comm.send(buf.data(), bytes, 1);
      comm.recv(buf.data(), bytes, 1);
      EXPECT_EQ(to_host(buf), pong);
    } else {
      comm.irecv(buf.data(), bytes, 0).wait();
      EXPECT_EQ(to_host(buf), ping);
      buf.upload(std::span<const std::byte>(pong));
      comm.isend(buf.data(), bytes, 0).wait();
    }
  });
}

TEST(DeviceCollectives, MixedHostAndDeviceBuffersAreRefusedNamingWhichIsWhich) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  run_device_ranks(1, [&](Communicator& comm) {
    DeviceBuffer dev(64 * sizeof(float));
    std::vector<float> host(64);
    const auto e =
        error_of([&] { comm.allreduce(host.data(), dev.data(), 64, DType::F32, ReduceOp::Sum); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(e->what(),
                         "the send buffer is host memory but the recv buffer is "
                         "device memory of GPU 0"))
        << e->what();
    // Refused before anything ran: the communicator still works.
    comm.allreduce(dev.data(), dev.data(), 64, DType::F32, ReduceOp::Sum);
  });
}

// The call is enqueued on the caller's stream in program order: copies queued on the same stream
// before and after it see its input and its output, with no synchronisation in between.
TEST(DeviceCollectives, RunsInProgramOrderOnTheCommunicatorsStream) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      const Stream stream;
      comm.set_stream(stream.s);
      const std::size_t count = 1 << 20;
      const Bytes8 in = testing::make_input(DType::F32, ReduceOp::Sum, 21, comm.rank(), count);
      Bytes8 out(in.size());
      DeviceBuffer dev(in.size());
      kernels::cuda_check(
          cudaMemcpyAsync(dev.data(), in.data(), in.size(), cudaMemcpyHostToDevice, stream.s),
          "upload");
      Work w = comm.iallreduce(dev.data(), dev.data(), count, DType::F32, ReduceOp::Sum);
      kernels::cuda_check(
          cudaMemcpyAsync(out.data(), dev.data(), out.size(), cudaMemcpyDeviceToHost, stream.s),
          "download");
      w.wait();
      kernels::cuda_check(cudaStreamSynchronize(stream.s), "cudaStreamSynchronize");
      const auto bad =
          testing::check_allreduce(DType::F32, ReduceOp::Sum, 21, world, out.data(), count);
      EXPECT_FALSE(bad.has_value()) << *bad;
      comm.set_stream(nullptr);
    });
  }
}

// Host and device operations on one communicator complete in submission order, each correct.
TEST(DeviceCollectives, InterleaveWithHostOperationsInOrder) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      const std::size_t count = 4096;
      Bytes8 host = testing::make_input(DType::F64, ReduceOp::Sum, 31, comm.rank(), count);
      DeviceBuffer dev =
          to_device(testing::make_input(DType::F64, ReduceOp::Sum, 32, comm.rank(), count));
      Work a = comm.iallreduce(host.data(), host.data(), count, DType::F64, ReduceOp::Sum);
      Work b = comm.iallreduce(dev.data(), dev.data(), count, DType::F64, ReduceOp::Sum);
      b.wait();
      EXPECT_TRUE(a.test()) << "the device allreduce completed before the host one submitted "
                               "ahead of it";
      a.wait();
      EXPECT_FALSE(
          testing::check_allreduce(DType::F64, ReduceOp::Sum, 31, world, host.data(), count)
              .has_value());
      const Bytes8 got = to_host(dev);
      EXPECT_FALSE(testing::check_allreduce(DType::F64, ReduceOp::Sum, 32, world, got.data(), count)
                       .has_value());
    });
  }
}

// A sub-communicator gets its own NCCL communicator (its own store key), next to its parent's.
TEST(DeviceCollectives, SplitCommunicatorsHaveTheirOwnNcclCommunicator) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int world : worlds()) {
    run_device_ranks(world, [&](Communicator& comm) {
      DeviceBuffer a =
          to_device(testing::make_input(DType::F32, ReduceOp::Max, 41, comm.rank(), 100));
      comm.allreduce(a.data(), a.data(), 100, DType::F32, ReduceOp::Max);
      auto sub = comm.split(/*color=*/0, /*key=*/-comm.rank());  // reversed order
      ASSERT_NE(sub, nullptr);
      DeviceBuffer b =
          to_device(testing::make_input(DType::F32, ReduceOp::Min, 42, sub->rank(), 100));
      sub->allreduce(b.data(), b.data(), 100, DType::F32, ReduceOp::Min);
      const Bytes8 got_a = to_host(a);
      const Bytes8 got_b = to_host(b);
      EXPECT_FALSE(testing::check_allreduce(DType::F32, ReduceOp::Max, 41, world, got_a.data(), 100)
                       .has_value());
      EXPECT_FALSE(testing::check_allreduce(DType::F32, ReduceOp::Min, 42, world, got_b.data(), 100)
                       .has_value());
    });
  }
}

// Rank 1 never makes a device call, so rank 0's first one waits for NCCL's initialisation, which
// waits for rank 1; abort() from another thread ends it with Aborted well before the timeout.
TEST(DeviceCollectives, AbortEndsADeviceOperationWaitingForAPeer) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  testing::Gate done;
  testing::run_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          done.wait();
          return;
        }
        const testing::OpenOnExit release(done);
        kernels::cuda_check(cudaSetDevice(0), "cudaSetDevice");
        DeviceBuffer buf(1024 * sizeof(float));
        std::optional<Error> error;
        const auto start = std::chrono::steady_clock::now();
        std::thread caller([&] {
          error = error_of([&] {
            comm.iallreduce(buf.data(), buf.data(), 1024, DType::F32, ReduceOp::Sum).wait();
          });
        });
        std::this_thread::sleep_for(500ms);
        comm.abort("test abort");
        caller.join();
        const auto took = std::chrono::steady_clock::now() - start;
        ASSERT_TRUE(error.has_value());
        EXPECT_EQ(error->code(), ErrorCode::Aborted) << error->what();
        EXPECT_LT(took, 30s) << "abort() did not end the device operation";
        // Later device operations fail at once too.
        const auto later = error_of(
            [&] { comm.allreduce(buf.data(), buf.data(), 1024, DType::F32, ReduceOp::Sum); });
        ASSERT_TRUE(later.has_value());
        EXPECT_EQ(later->code(), ErrorCode::Aborted) << later->what();
      },
      120s);
}

// A host function holds the stream, so the GPU cannot finish the allreduce queued behind it; the
// operation's deadline fails it with Timeout naming what it waited for (and aborts the NCCL
// communicator) instead of waiting for the stream. The aborted NCCL kernel may then fault when
// the stream moves on; ctest runs each test in its own process, so no other test sees that.
void CUDART_CB hold_stream(void* gate) {
  const auto until = std::chrono::steady_clock::now() + 10s;  // never hold it forever
  auto* open = static_cast<std::atomic<bool>*>(gate);
  while (!open->load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
}

TEST(DeviceCollectives, DeadlineEndsADeviceOperationTheGpuCannotFinish) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  std::atomic<bool> open{false};
  run_device_ranks(1, [&](Communicator& comm) {
    const Stream stream;
    comm.set_stream(stream.s);
    DeviceBuffer buf(1024 * sizeof(float));
    comm.allreduce(buf.data(), buf.data(), 1024, DType::F32, ReduceOp::Sum);  // NCCL is up
    kernels::cuda_check(cudaLaunchHostFunc(stream.s, hold_stream, &open), "cudaLaunchHostFunc");
    comm.set_timeout(300ms);
    // Let the stream go after 2 s whatever happens: a deadline that did not apply would then let
    // the allreduce succeed (and fail the test) rather than hang it.
    const std::jthread opener([&] {
      std::this_thread::sleep_for(2s);
      open.store(true);
    });
    const auto start = std::chrono::steady_clock::now();
    const auto e =
        error_of([&] { comm.allreduce(buf.data(), buf.data(), 1024, DType::F32, ReduceOp::Sum); });
    const auto took = std::chrono::steady_clock::now() - start;
    static_cast<void>(cudaStreamSynchronize(stream.s));  // the aborted kernel may report an error
    static_cast<void>(cudaGetLastError());
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code(), ErrorCode::Timeout) << e->what();
    EXPECT_TRUE(contains(e->what(), "the GPU to finish")) << e->what();
    EXPECT_LT(took, 8s) << "the deadline did not end the device operation";
  });
}

}  // namespace
}  // namespace strait::comm
