// strait_device_busbw: device-buffer allreduce bandwidth through Communicator (the NCCL path:
// Work handles, progress engine, events) next to the same NCCL calls made directly on an NcclComm
// in the same run, nccl-tests style: for each size, time per operation, algorithm bandwidth
// (bytes / time) and bus bandwidth (algbw * 2(n-1)/n, what each link carries in a ring; 0 for one
// rank, where nothing crosses a link).
//
// Ranks are threads of this process, one per GPU (NCCL's rule). Usage:
//   strait_device_busbw [--ranks N] [--min-bytes B] [--max-bytes B] [--iters K] [--dtype f32|bf16]
// Defaults: every visible GPU, 8 B .. 256 MiB (x4 steps), 20 timed iterations after 5 warm-up.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "comm/nccl/nccl_comm.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"

namespace {

using strait::comm::Communicator;
using strait::comm::HashStore;
using strait::comm::NcclComm;
using strait::comm::Work;
using strait::kernels::DType;
using strait::kernels::ReduceOp;
using Clock = std::chrono::steady_clock;

struct Args {
  int ranks = 0;  // 0: every GPU
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  int iters = 20;
  DType dtype = DType::F32;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{} needs a value", k));
    const std::string v = argv[++i];
    if (k == "--ranks") {
      a.ranks = std::stoi(v);
    } else if (k == "--min-bytes") {
      a.min_bytes = std::stoull(v);
    } else if (k == "--max-bytes") {
      a.max_bytes = std::stoull(v);
    } else if (k == "--iters") {
      a.iters = std::stoi(v);
    } else if (k == "--dtype") {
      if (v != "f32" && v != "bf16") throw std::invalid_argument("--dtype is f32 or bf16");
      a.dtype = v == "f32" ? DType::F32 : DType::BF16;
    } else {
      throw std::invalid_argument(fmt::format("unknown flag {}", k));
    }
  }
  if (a.iters < 1 || a.min_bytes < 1 || a.max_bytes < a.min_bytes) {
    throw std::invalid_argument("need --iters >= 1 and 1 <= --min-bytes <= --max-bytes");
  }
  return a;
}

struct Row {
  std::size_t bytes = 0;
  double strait_us = 0;
  double nccl_us = 0;
};

// Seconds per operation: `warmup` untimed runs, then `iters` timed ones, all ranks starting
// together (the barrier) so the slowest rank's time is what a job would see.
template <class Run, class Finish>
double time_per_op(std::barrier<>& sync, int iters, Run run, Finish finish) {
  for (int i = 0; i < 5; ++i) run();
  finish();
  sync.arrive_and_wait();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) run();
  finish();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  sync.arrive_and_wait();
  return s / iters;
}

void rank_main(const Args& a, int rank, int world, const std::shared_ptr<HashStore>& store,
               std::barrier<>& sync, std::vector<Row>& rows) {
  strait::kernels::cuda_check(cudaSetDevice(rank), "cudaSetDevice");
  auto comm = Communicator::create(store, rank, world);
  strait::comm::NcclCommOptions options;
  options.key = "bench/nccl/raw";
  NcclComm raw(*store, rank, world, rank, options);
  const std::size_t elem = strait::kernels::dtype_size(a.dtype);
  strait::kernels::DeviceBuffer buf(a.max_bytes);
  std::size_t i = 0;
  for (std::size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4, ++i) {
    const std::size_t count = std::max<std::size_t>(bytes / elem, 1);
    const int iters = bytes >= (std::size_t{64} << 20) ? std::max(a.iters / 4, 1) : a.iters;
    std::vector<Work> works;
    const double ours = time_per_op(
        sync, iters,
        [&] {
          works.push_back(comm->iallreduce(buf.data(), buf.data(), count, a.dtype, ReduceOp::Sum));
        },
        [&] {
          for (Work& w : works) w.wait();  // complete in order: the last is the slowest
          works.clear();
        });
    const double theirs = time_per_op(
        sync, iters,
        [&] { raw.allreduce(buf.data(), buf.data(), count, a.dtype, ReduceOp::Sum, nullptr); },
        [&] { raw.synchronize(nullptr); });
    if (rank == 0) rows.push_back(Row{count * elem, ours * 1e6, theirs * 1e6});
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    int devices = 0;
    strait::kernels::cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    const int world = a.ranks > 0 ? a.ranks : devices;
    if (world < 1 || world > devices) {
      throw std::invalid_argument(
          fmt::format("{} ranks need {} GPUs (one each, NCCL's rule); this machine has {}", world,
                      world, devices));
    }
    auto store = std::make_shared<HashStore>();
    std::barrier<> sync(world);
    std::vector<Row> rows;
    {
      std::vector<std::jthread> threads;
      threads.reserve(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          try {
            rank_main(a, r, world, store, sync, rows);
          } catch (const std::exception& e) {
            fmt::print(stderr, "strait_device_busbw: rank {}: {}\n", r, e.what());
            std::fflush(stderr);
            std::_Exit(1);  // the other ranks would wait for this one until their timeout
          }
        });
      }
    }
    const double bus = world > 1 ? 2.0 * (world - 1) / world : 0.0;
    fmt::print("# allreduce (sum, {}, in place) of device buffers, {} rank(s), one per GPU\n",
               strait::kernels::dtype_name(a.dtype), world);
    fmt::print("# {:>12} {:>12} {:>12} {:>10} {:>10} {:>12} {:>10}\n", "bytes", "strait us",
               "algbw GB/s", "busbw GB/s", "nccl us", "nccl busbw", "overhead");
    for (const Row& r : rows) {
      const double algbw = static_cast<double>(r.bytes) / (r.strait_us * 1e3);
      const double nccl_algbw = static_cast<double>(r.bytes) / (r.nccl_us * 1e3);
      fmt::print("  {:>12} {:>12.1f} {:>12.2f} {:>10.2f} {:>10.1f} {:>12.2f} {:>9.0f}%\n", r.bytes,
                 r.strait_us, algbw, algbw * bus, r.nccl_us, nccl_algbw * bus,
                 100.0 * (r.strait_us / r.nccl_us - 1.0));
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "strait_device_busbw: {}\n", e.what());
    return 1;
  }
}
