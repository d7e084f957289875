// Elementwise sum / scaled sum / scale of device buffers. Memory-bound: 16-byte vector loads and
// stores over the aligned body, elementwise head and tail, one grid-stride loop so a bounded grid
// covers any count. 16-bit floats are combined in f32 and rounded to nearest even once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/elementwise.h"

namespace strait::kernels::detail {
namespace {

// up(): the element widened to its accumulation type; down(): rounded back (nearest even).
template <class T>
struct Num;

template <>
struct Num<float> {
  using Acc = float;
  __device__ static float up(float x) { return x; }
  __device__ static float down(float x) { return x; }
};

template <>
struct Num<double> {
  using Acc = double;
  __device__ static double up(double x) { return x; }
  __device__ static double down(double x) { return x; }
};

template <>
struct Num<__half> {
  using Acc = float;
  __device__ static float up(__half x) { return __half2float(x); }
  __device__ static __half down(float x) { return __float2half_rn(x); }
};

template <>
struct Num<__nv_bfloat16> {
  using Acc = float;
  __device__ static float up(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 down(float x) { return __float2bfloat16_rn(x); }
};

constexpr std::size_t kVecBytes = 16;

template <class T>
struct alignas(kVecBytes) Vec {
  T v[kVecBytes / sizeof(T)];
};

template <class T, ElementwiseOp kOp>
__device__ __forceinline__ T combine(T x, T y, typename Num<T>::Acc factor) {
  using N = Num<T>;
  if constexpr (kOp == ElementwiseOp::Sum) {
    return N::down(N::up(x) + N::up(y));
  } else if constexpr (kOp == ElementwiseOp::SumScale) {
    return N::down((N::up(x) + N::up(y)) * factor);
  } else {
    return N::down(N::up(x) * factor);
  }
}

// a[head, head + nvec * kN) is the 16-byte-aligned body, done as vectors; the `head` elements
// before it and the tail after it are done one by one. No __restrict__: a may equal b.
template <class T, ElementwiseOp kOp>
__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_kernel(T* a, const T* b, std::size_t head, std::size_t nvec, std::size_t count,
                       typename Num<T>::Acc factor) {
  constexpr std::size_t kN = kVecBytes / sizeof(T);
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  const std::size_t tid = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;

  auto* av = reinterpret_cast<Vec<T>*>(a + head);
  const auto* bv = reinterpret_cast<const Vec<T>*>(b + head);
  for (std::size_t i = tid; i < nvec; i += stride) {
    Vec<T> x = av[i];
    if constexpr (kOp == ElementwiseOp::Scale) {
#pragma unroll
      for (std::size_t k = 0; k < kN; ++k) x.v[k] = combine<T, kOp>(x.v[k], x.v[k], factor);
    } else {
      const Vec<T> y = bv[i];
#pragma unroll
      for (std::size_t k = 0; k < kN; ++k) x.v[k] = combine<T, kOp>(x.v[k], y.v[k], factor);
    }
    av[i] = x;
  }

  const std::size_t body_end = head + nvec * kN;
  const std::size_t scalars = count - nvec * kN;
  for (std::size_t j = tid; j < scalars; j += stride) {
    const std::size_t i = j < head ? j : body_end + (j - head);
    a[i] = combine<T, kOp>(a[i], kOp == ElementwiseOp::Scale ? a[i] : b[i], factor);
  }
}

template <class T, ElementwiseOp kOp>
cudaError_t launch_typed(void* inout, const void* in, std::size_t count, double factor,
                         unsigned max_blocks, cudaStream_t stream) {
  constexpr std::size_t kN = kVecBytes / sizeof(T);
  auto* a = static_cast<T*>(inout);
  // Scale reads only a; pointing b at a keeps the pointer arithmetic in the kernel defined.
  const auto* b = kOp == ElementwiseOp::Scale ? a : static_cast<const T*>(in);

  // Vectors need a and b at the same offset modulo 16: peel elements up to the next boundary.
  const auto ma = reinterpret_cast<std::uintptr_t>(a) % kVecBytes;
  const auto mb = reinterpret_cast<std::uintptr_t>(b) % kVecBytes;
  std::size_t head = count;
  std::size_t nvec = 0;
  if (ma == mb) {
    head = std::min(count, ((kVecBytes - ma) % kVecBytes) / sizeof(T));
    nvec = (count - head) / kN;
  }
  const std::size_t work = std::max(nvec, count - nvec * kN);
  const std::size_t wanted = (work + kElementwiseThreads - 1) / kElementwiseThreads;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>(wanted, max_blocks));

  using Acc = typename Num<T>::Acc;
  elementwise_kernel<T, kOp><<<blocks, kElementwiseThreads, 0, stream>>>(a, b, head, nvec, count,
                                                                         static_cast<Acc>(factor));
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_op(ElementwiseOp op, void* inout, const void* in, std::size_t count,
                      double factor, unsigned max_blocks, cudaStream_t stream) {
  switch (op) {
    case ElementwiseOp::Sum:
      return launch_typed<T, ElementwiseOp::Sum>(inout, in, count, factor, max_blocks, stream);
    case ElementwiseOp::SumScale:
      return launch_typed<T, ElementwiseOp::SumScale>(inout, in, count, factor, max_blocks, stream);
    case ElementwiseOp::Scale:
      return launch_typed<T, ElementwiseOp::Scale>(inout, in, count, factor, max_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_elementwise(DType dtype, ElementwiseOp op, void* inout, const void* in,
                               std::size_t count, double factor, unsigned max_blocks,
                               cudaStream_t stream) {
  switch (dtype) {
    case DType::F32: return launch_op<float>(op, inout, in, count, factor, max_blocks, stream);
    case DType::F64: return launch_op<double>(op, inout, in, count, factor, max_blocks, stream);
    case DType::F16: return launch_op<__half>(op, inout, in, count, factor, max_blocks, stream);
    case DType::BF16:
      return launch_op<__nv_bfloat16>(op, inout, in, count, factor, max_blocks, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace strait::kernels::detail
