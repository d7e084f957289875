// Micro-benchmarks of the CPU building blocks (Google Benchmark): the reduction inner loop of the
// collectives, the codecs of compressed collectives (per SIMD level, and on the GPU when built
// with CUDA), the AdamW kernel, the optimizer state in RAM and on disk, and one forward + backward
// of the reference transformer's stage. Bytes/s and items/s are reported so the figures compare
// with memory bandwidth and FLOP rates. Run: build/bench/strait_micro_bench
// [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/compress/codec_factory.h"
#include "comm/security/secret.h"
#include "comm/transport/peer_memory.h"
#include "comm/transport/sealed_message.h"
#include "kernels/adamw.h"
#include "kernels/cpu_features.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "model/transformer.h"
#include "offload/optimizer_offload.h"

#if STRAIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <memory>

#include "core/params.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/quantize.h"
#include "kernels/device_reduce.h"
#include "kernels/topk.h"
#endif

namespace {

using strait::kernels::DType;
using strait::kernels::ReduceOp;
using strait::kernels::SimdLevel;

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// inout += in over f32: 3 x 4 bytes of memory traffic per element.
void BM_ReduceSumF32(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto a = random_floats(n, 1);
  const auto b = random_floats(n, 2);
  for ([[maybe_unused]] auto _ : state) {
    strait::kernels::reduce(DType::F32, ReduceOp::Sum, a.data(), b.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 12));
}
BENCHMARK(BM_ReduceSumF32)->RangeMultiplier(16)->Range(1 << 10, 1 << 24);

// The receiver's side of a single-copy reduce-scatter segment (comm/transport/ucx): a 32 MiB f32
// message read with process_vm_readv (from this process, as from a peer) and summed into a 32 MiB
// accumulator. Arg 0: as before 2026-12-02, each 1 MiB ring segment read whole into one of 4
// scratch slots, then reduced; arg N: read in N-byte pieces into one buffer of N, each reduced at
// once (UcxTransport::kReducePiece). Bytes: the message's.
void BM_PeerReadReduce(benchmark::State& state) {
  constexpr std::size_t kBytes = std::size_t{32} << 20;
  constexpr std::size_t kSegment = std::size_t{1} << 20;
  const auto piece = static_cast<std::size_t>(state.range(0));
  const auto msg = random_floats(kBytes / 4, 3);
  auto acc = random_floats(kBytes / 4, 4);
  std::vector<std::byte> buf(piece == 0 ? 4 * kSegment : piece);
  const pid_t self = ::getpid();
  const auto remote = reinterpret_cast<std::uintptr_t>(msg.data());
  auto* out = reinterpret_cast<std::byte*>(acc.data());
  for ([[maybe_unused]] auto _ : state) {
    const std::size_t step = piece == 0 ? kSegment : piece;
    for (std::size_t at = 0, slot = 0; at < kBytes; at += step, slot = (slot + 1) % 4) {
      std::byte* dst = piece == 0 ? buf.data() + slot * kSegment : buf.data();
      if (strait::comm::read_peer_memory(self, remote + at, dst, step).error != 0) {
        state.SkipWithError("process_vm_readv failed (ptrace rules?)");
        return;
      }
      strait::kernels::reduce(DType::F32, ReduceOp::Sum, out + at, dst, step / 4);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_PeerReadReduce)
    ->Arg(0)
    ->Arg(32 << 10)
    ->Arg(64 << 10)
    ->Arg(128 << 10)
    ->Arg(256 << 10)
    ->Arg(512 << 10)
    ->Arg(1 << 20);

// GELU (tanh form) over f32 activations of one MLP of the reference transformer (B = 4, T = 128,
// 4C = 512): elements per second. Inputs from a unit normal, as LayerNorm'd projections are.
std::vector<float> normal_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void BM_GeluForward(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto x = normal_floats(n, 3);
  std::vector<float> y(n);
  for ([[maybe_unused]] auto _ : state) {
    strait::kernels::gelu_forward(y.data(), x.data(), static_cast<std::ptrdiff_t>(n));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_GeluForward)->Arg(4 * 128 * 512);

void BM_GeluBackward(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto x = normal_floats(n, 3);
  const auto dy = normal_floats(n, 4);
  std::vector<float> dx(n);
  for ([[maybe_unused]] auto _ : state) {
    strait::kernels::gelu_backward(dx.data(), x.data(), dy.data(), static_cast<std::ptrdiff_t>(n));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_GeluBackward)->Arg(4 * 128 * 512);
// The AEAD of sealed links (comm/transport/sealed_message.h, XChaCha20-Poly1305 from libsodium) on
// one core: seal (arg 1 = 0) or open (1) a message of arg 0 bytes. The ceiling a sealed link's
// busbw is held against (bench/RESULTS.md).
void BM_SealedMessage(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool open = state.range(1) != 0;
  const std::string text = "micro-bench-secret-0123456789";
  const strait::comm::Key key =
      strait::comm::SharedSecret::from_bytes(
          {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}, "bench")
          .derive("link");
  std::vector<std::uint8_t> plain(n, 0x5a);
  std::vector<std::uint8_t> sealed(n + strait::comm::sealed::kOverhead);
  strait::comm::sealed::seal(key, {.sender = 0, .receiver = 1, .tag = 1, .seq = 0}, plain, sealed);
  std::uint64_t seq = 0;
  for (auto _ : state) {
    if (open) {
      strait::comm::sealed::open(key, 0, 1, sealed, plain);
    } else {
      strait::comm::sealed::seal(key, {.sender = 0, .receiver = 1, .tag = 1, .seq = ++seq}, plain,
                                 sealed);
    }
    benchmark::DoNotOptimize(sealed.data());
    benchmark::DoNotOptimize(plain.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_SealedMessage)
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1})
    ->Args({64 << 20, 0})
    ->Args({64 << 20, 1})
    ->Unit(benchmark::kMillisecond);

// Codecs over 64 MiB of f32 (16 Mi elements, far beyond the caches), for each SIMD level the CPU
// runs: BM_CodecEncode/<codec>/<level> and BM_CodecDecodeAdd/<codec>/<level>. Bytes/s counts the
// f32 side only (4 bytes per element: read by encode, read and written back by decode_add), so the
// figures compare across codecs whatever their wire size.
constexpr std::size_t kCodecElements = std::size_t{16} << 20;

void codec_bench(benchmark::State& state, const char* spec, strait::kernels::SimdLevel level,
                 bool decode_add) {
  strait::kernels::set_simd_level_for_testing(level);
  auto codec = strait::comm::make_codec_from_spec(spec);
  const auto x = random_floats(kCodecElements, 5);
  std::vector<std::byte> wire(codec->encoded_bytes(x.size()));
  std::vector<float> acc(x.size(), 0.0F);
  codec->encode(x, wire);
  for ([[maybe_unused]] auto _ : state) {
    if (decode_add) {
      codec->decode_add(wire, acc);
    } else {
      codec->encode(x, wire);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * x.size() * 4));
  state.counters["wire_bytes_per_element"] =
      static_cast<double>(wire.size()) / static_cast<double>(x.size());
  strait::kernels::set_simd_level_for_testing(strait::kernels::cpu_simd_level());
}

// Registered from main(): a throwing static initialiser could not be caught.
void register_codec_benchmarks() {
  using strait::kernels::SimdLevel;
  for (const char* spec : {"int8", "int4", "onebit", "bf16"}) {
    for (const auto level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
      if (level > strait::kernels::cpu_simd_level()) continue;
      for (const bool add : {false, true}) {
        const auto name = fmt::format("BM_Codec{}/{}/{}", add ? "DecodeAdd" : "Encode", spec,
                                      strait::kernels::simd_level_name(level));
        benchmark::RegisterBenchmark(name.c_str(), codec_bench, spec, level, add)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

#if STRAIT_HAVE_CUDA
// GPU codecs (kernels/cuda/quantize.h) over 256 MiB of f32 (64 Mi elements, far beyond the L2):
// BM_DeviceCodecEncode/<codec> and BM_DeviceCodecDecodeAdd/<codec>, timed with CUDA events on the
// legacy default stream (manual time: the kernels only, not the host's launch loop). Bytes/s counts
// the f32 side only, as BM_Codec does, so the figures compare with the CPU's and with HBM
// bandwidth. Without a device each reports the reason as an error. bench/gpu_check.sh runs them.
constexpr std::size_t kDeviceCodecElements = std::size_t{64} << 20;

enum class DeviceCodec : std::uint8_t { Bf16, F16, Int8, Int8Stochastic, Int4, Onebit, Topk };

struct DeviceCodecCase {
  const char* name;
  DeviceCodec codec;
};

std::size_t device_wire_bytes(DeviceCodec c, std::size_t n) {
  using namespace strait::kernels;
  switch (c) {
    case DeviceCodec::Bf16:
    case DeviceCodec::F16: return 2 * n;
    case DeviceCodec::Int8:
    case DeviceCodec::Int8Stochastic: return absmax_encoded_bytes({8, 256}, n);
    case DeviceCodec::Int4: return absmax_encoded_bytes({4, 64}, n);
    case DeviceCodec::Onebit: return sign_encoded_bytes(256, n);
    case DeviceCodec::Topk: return topk_count(0.01, n) * kTopkPairBytes;
  }
  return 0;
}

// The comm codecs' default formats (comm/compress/codec.h): int8 block 256, int4 block 64, onebit
// block 256, topk fraction 0.01.
void device_encode(DeviceCodec c, std::span<const float> x, std::span<std::byte> wire,
                   std::uint64_t* status) {
  using namespace strait::kernels;
  switch (c) {
    case DeviceCodec::Bf16: device_encode_bf16(x, wire, status, nullptr); break;
    case DeviceCodec::F16: device_encode_f16(x, wire, status, nullptr); break;
    case DeviceCodec::Int8:
      device_absmax_encode({8, 256}, x, wire, Rounding::Nearest, 0, status, nullptr);
      break;
    case DeviceCodec::Int8Stochastic:
      device_absmax_encode({8, 256}, x, wire, Rounding::Stochastic, 1, status, nullptr);
      break;
    case DeviceCodec::Int4:
      device_absmax_encode({4, 64}, x, wire, Rounding::Nearest, 0, status, nullptr);
      break;
    case DeviceCodec::Onebit: device_sign_encode(256, x, wire, status, nullptr); break;
    case DeviceCodec::Topk:
      device_topk_encode(x, wire.size() / kTopkPairBytes, wire, status, nullptr);
      break;
  }
}

void device_decode_add(DeviceCodec c, std::span<const std::byte> wire, std::span<float> acc,
                       std::uint64_t* status) {
  using namespace strait::kernels;
  switch (c) {
    case DeviceCodec::Bf16: device_decode_bf16(wire, acc, Accumulate::Yes, nullptr); break;
    case DeviceCodec::F16: device_decode_f16(wire, acc, Accumulate::Yes, nullptr); break;
    case DeviceCodec::Int8:
    case DeviceCodec::Int8Stochastic:
      device_absmax_decode({8, 256}, wire, acc, Accumulate::Yes, nullptr);
      break;
    case DeviceCodec::Int4:
      device_absmax_decode({4, 64}, wire, acc, Accumulate::Yes, nullptr);
      break;
    case DeviceCodec::Onebit: device_sign_decode(256, wire, acc, Accumulate::Yes, nullptr); break;
    case DeviceCodec::Topk: device_topk_decode(wire, acc, Accumulate::Yes, status, nullptr); break;
  }
}

struct EventDestroy {
  void operator()(cudaEvent_t e) const noexcept { static_cast<void>(cudaEventDestroy(e)); }
};
using Event = std::unique_ptr<CUevent_st, EventDestroy>;

Event make_event() {
  cudaEvent_t e = nullptr;
  strait::kernels::cuda_check(cudaEventCreate(&e), "cudaEventCreate");
  return Event(e);
}

void device_codec_bench(benchmark::State& state, DeviceCodec codec, bool decode_add) {
  using strait::kernels::cuda_check;
  std::string why;
  if (!strait::kernels::cuda_device_available(&why)) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const std::size_t n = kDeviceCodecElements;
  const auto host = random_floats(n, 5);
  strait::kernels::DeviceBuffer x(n * 4);
  strait::kernels::DeviceBuffer acc(n * 4);
  strait::kernels::DeviceBuffer wire(device_wire_bytes(codec, n));
  strait::kernels::DeviceBuffer status(sizeof(std::uint64_t));
  x.upload(std::span<const float>(host));
  acc.upload(std::span<const float>(host));
  const std::span<const float> xs(static_cast<const float*>(x.data()), n);
  const std::span<float> accs(static_cast<float*>(acc.data()), n);
  const std::span<std::byte> ws(static_cast<std::byte*>(wire.data()), wire.bytes());
  auto* st = static_cast<std::uint64_t*>(status.data());
  device_encode(codec, xs, ws, st);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const Event start = make_event();
  const Event stop = make_event();
  for ([[maybe_unused]] auto _ : state) {
    cuda_check(cudaEventRecord(start.get(), nullptr), "cudaEventRecord");
    if (decode_add) {
      device_decode_add(codec, ws, accs, st);
    } else {
      device_encode(codec, xs, ws, st);
    }
    cuda_check(cudaEventRecord(stop.get(), nullptr), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
    float ms = 0.0F;
    cuda_check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
    state.SetIterationTime(static_cast<double>(ms) / 1e3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 4));
  state.counters["wire_bytes_per_element"] =
      static_cast<double>(wire.bytes()) / static_cast<double>(n);
}

// Registered from main(): a throwing static initialiser could not be caught.
void register_device_codec_benchmarks() {
  const DeviceCodecCase cases[] = {
      {"bf16", DeviceCodec::Bf16}, {"fp16", DeviceCodec::F16},
      {"int8", DeviceCodec::Int8}, {"int8_stochastic", DeviceCodec::Int8Stochastic},
      {"int4", DeviceCodec::Int4}, {"onebit", DeviceCodec::Onebit},
      {"topk", DeviceCodec::Topk}};
  for (const DeviceCodecCase& c : cases) {
    for (const bool add : {false, true}) {
      if (add && c.codec == DeviceCodec::Int8Stochastic) continue;  // decodes as int8
      const auto name = fmt::format("BM_DeviceCodec{}/{}", add ? "DecodeAdd" : "Encode", c.name);
      benchmark::RegisterBenchmark(name.c_str(), device_codec_bench, c.codec, add)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}
#endif  // STRAIT_HAVE_CUDA

// inout += in for one dtype on one SIMD path (BM_Reduce/<dtype>_<level>/<bytes per buffer>).
// Bytes/s counts the memory traffic, 3 x the buffer size per call (read inout and in, write
// inout), as BM_ReduceSumF32 does. The scalar path is the plain C++ loop at -O3 (what GCC
// auto-vectorises for baseline x86-64), so it is the baseline the SIMD paths are compared with.
void BM_Reduce(benchmark::State& state, DType dtype, SimdLevel level) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / strait::kernels::dtype_size(dtype);
  const auto fa = random_floats(n, 1);
  const auto fb = random_floats(n, 2);
  std::vector<std::uint8_t> a(bytes), b(bytes);
  for (std::size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32:
        std::memcpy(a.data() + 4 * i, &fa[i], 4);
        std::memcpy(b.data() + 4 * i, &fb[i], 4);
        break;
      default: {
        const bool bf = dtype == DType::BF16;
        const std::uint16_t ha =
            bf ? strait::kernels::f32_to_bf16(fa[i]) : strait::kernels::f32_to_f16(fa[i]);
        const std::uint16_t hb =
            bf ? strait::kernels::f32_to_bf16(fb[i]) : strait::kernels::f32_to_f16(fb[i]);
        std::memcpy(a.data() + 2 * i, &ha, 2);
        std::memcpy(b.data() + 2 * i, &hb, 2);
      }
    }
  }
  if (level > strait::kernels::cpu_simd_level()) {
    state.SkipWithError("this CPU lacks the level");
    return;
  }
  const SimdLevel previous = strait::kernels::simd_level();
  strait::kernels::set_simd_level_for_testing(level);
  for ([[maybe_unused]] auto _ : state) {
    strait::kernels::reduce(dtype, ReduceOp::Sum, a.data(), b.data(), n);
    benchmark::ClobberMemory();
  }
  strait::kernels::set_simd_level_for_testing(previous);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes * 3));
}

// f32, bf16 and f16 on every level, at 4 KiB (L1), 256 KiB (L2) and 16 MiB (memory). Levels the
// CPU lacks report an error instead of a figure.
#define STRAIT_BENCH_REDUCE(dtype, level)                                       \
  BENCHMARK_CAPTURE(BM_Reduce, dtype##_##level, DType::dtype, SimdLevel::level) \
      ->Arg(4 << 10)                                                            \
      ->Arg(256 << 10)                                                          \
      ->Arg(16 << 20)
STRAIT_BENCH_REDUCE(F32, Scalar);
STRAIT_BENCH_REDUCE(F32, Avx2);
STRAIT_BENCH_REDUCE(F32, Avx512);
STRAIT_BENCH_REDUCE(BF16, Scalar);
STRAIT_BENCH_REDUCE(BF16, Avx2);
STRAIT_BENCH_REDUCE(BF16, Avx512);
STRAIT_BENCH_REDUCE(F16, Scalar);
STRAIT_BENCH_REDUCE(F16, Avx2);
STRAIT_BENCH_REDUCE(F16, Avx512);

// One AdamW step: reads p, g, m, v and writes p, m, v (28 bytes per parameter).
void BM_AdamW(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = random_floats(n, 3);
  const auto g = random_floats(n, 4);
  std::vector<float> m(n, 0.0F), v(n, 0.0F);
  strait::kernels::AdamWHyper h;
  std::int64_t t = 0;
  for ([[maybe_unused]] auto _ : state) {
    strait::kernels::adamw_step(p, g, m, v, h, ++t);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 28));
}
BENCHMARK(BM_AdamW)->Arg(1 << 20)->Arg(1 << 24);

// The same over a persistent pool (kernels::ParallelAdamW): range(0) parameters, range(1) threads.
void BM_AdamWThreads(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = random_floats(n, 3);
  const auto g = random_floats(n, 4);
  std::vector<float> m(n, 0.0F), v(n, 0.0F);
  strait::kernels::ParallelAdamW opt(static_cast<unsigned>(state.range(1)));
  strait::kernels::AdamWHyper h;
  std::int64_t t = 0;
  for ([[maybe_unused]] auto _ : state) {
    opt.step(p, g, m, v, h, ++t);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 28));
}
BENCHMARK(BM_AdamWThreads)->Args({1 << 24, 1})->Args({1 << 24, 2})->UseRealTime();

// One AdamW step through the optimizer-state offload (offload/optimizer_offload.h): range(0)
// parameters, range(1) 0 = moments in RAM, 1 = in a file in STRAIT_BENCH_DIR (default /var/tmp),
// range(2) pinned chunk buffers, range(3) parameters per chunk, on 2 threads. Counters: the share
// of the step spent waiting for I/O, and the disk traffic (both directions) per second of step.
void BM_AdamWState(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = random_floats(n, 3);
  const auto g = random_floats(n, 4);
  strait::offload::OptimizerOffloadOptions o;
  o.where = state.range(1) == 0 ? strait::offload::OptimizerOffload::Cpu
                                : strait::offload::OptimizerOffload::Nvme;
  o.threads = 2;
  o.file.dir = strait::params::text("STRAIT_BENCH_DIR").value_or("/var/tmp");
  o.file.buffers = static_cast<unsigned>(state.range(2));
  o.file.chunk_params = static_cast<std::size_t>(state.range(3));
  const auto opt = strait::offload::make_adamw_state(n, o);
  strait::kernels::AdamWHyper h;
  std::int64_t t = 0;
  double wait = 0, total = 0, bytes = 0;
  for ([[maybe_unused]] auto _ : state) {
    opt->step(p, g, h, ++t);
    const auto s = opt->last_step_stats();
    wait += s.io_wait_s;
    total += s.total_s;
    bytes += static_cast<double>(s.bytes_read + s.bytes_written);
  }
  state.counters["io_wait_share"] = total > 0 ? wait / total : 0;
  state.counters["disk_GBps"] = total > 0 ? bytes / total / 1e9 : 0;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_AdamWState)
    ->ArgNames({"params", "nvme", "buffers", "chunk"})
    ->Args({1 << 24, 0, 3, 1 << 19})
    ->Args({1 << 24, 1, 3, 1 << 19})
    ->Args({1 << 24, 1, 4, 1 << 19})
    ->Args({1 << 24, 1, 6, 1 << 19})
    ->Args({1 << 24, 1, 3, 1 << 21})
    ->Args({1 << 24, 1, 4, 1 << 21})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Forward + backward of one microbatch (B = 4 sequences of 128 bytes) through the default
// 4-layer, 128-wide model on one stage and one OpenBLAS thread: the unit of work of `strait train`.
void BM_TransformerMicrobatch(benchmark::State& state) {
  strait::kernels::set_gemm_threads(1);
  const strait::sched::GptConfig cfg;  // the defaults of `strait train`
  const int b = 4;
  strait::sched::StageModel<float> model(cfg, {0, cfg.layers}, b, 1, 1337);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(b * cfg.ctx));
  std::vector<std::int32_t> targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 31) % 256);
    targets[i] = static_cast<std::int32_t>((i * 17 + 5) % 256);
  }
  for ([[maybe_unused]] auto _ : state) {
    benchmark::DoNotOptimize(model.forward(0, tokens.data(), targets.data(), b, cfg.ctx));
    model.backward(0, nullptr, 1.0F, nullptr);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * b * cfg.ctx);  // tokens
}
BENCHMARK(BM_TransformerMicrobatch)->Unit(benchmark::kMillisecond);

// The backward of one microbatch on one stage of the default model split in 2 (stage 0: layers
// [0, 2) with the embeddings; stage 1: [2, 4) with the head), as `strait train --stages 2` runs it:
// fused (1F1B, GPipe) or as B then W (ZB-H1). Only the backward is timed. With cold = 1 another
// microbatch's forward runs (untimed) between B and W, as ZB-H1 defers W past other work.
void BM_TransformerBackward(benchmark::State& state) {
  strait::kernels::set_gemm_threads(1);
  const int stage = static_cast<int>(state.range(0));
  const bool split = state.range(1) != 0;
  const bool cold = state.range(2) != 0;
  const strait::sched::GptConfig cfg;
  const int b = 4;
  const int half = cfg.layers / 2;
  const strait::sched::LayerRange range =
      stage == 0 ? strait::sched::LayerRange{0, half} : strait::sched::LayerRange{half, cfg.layers};
  strait::sched::StageModel<float> model(cfg, range, b, 2, 1337);
  const std::size_t n = static_cast<std::size_t>(b) * static_cast<std::size_t>(cfg.ctx);
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((i * 31 + 7) % 256);
  std::vector<float> acts(n * static_cast<std::size_t>(cfg.dim));
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (float& x : acts) x = normal(gen);
  std::vector<float> grad(acts.size());
  for (float& x : grad) x = 1e-3F * normal(gen);
  std::vector<float> out(acts.size());
  auto forward = [&](int slot) {
    if (stage == 0) {
      model.forward(slot, ids.data(), b, cfg.ctx, out.data());
    } else {
      benchmark::DoNotOptimize(model.forward(slot, acts.data(), ids.data(), b, cfg.ctx));
    }
  };
  const float* dout = stage == 0 ? grad.data() : nullptr;
  float* din = stage == 0 ? nullptr : out.data();
  for ([[maybe_unused]] auto _ : state) {
    state.PauseTiming();
    forward(0);
    state.ResumeTiming();
    if (!split) {
      model.backward(0, dout, 0.125F, din);
      continue;
    }
    model.backward_input(0, dout, 0.125F, din);
    if (cold) {
      state.PauseTiming();
      forward(1);
      model.backward(1, dout, 0.125F, din);
      state.ResumeTiming();
    }
    model.backward_weight(0);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * b * cfg.ctx);  // tokens
}
BENCHMARK(BM_TransformerBackward)
    ->ArgNames({"stage", "split", "cold"})
    ->Args({0, 0, 0})
    ->Args({0, 1, 0})
    ->Args({0, 1, 1})
    ->Args({1, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  register_codec_benchmarks();
#if STRAIT_HAVE_CUDA
  register_device_codec_benchmarks();
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
