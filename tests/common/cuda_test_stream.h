// TestStream: an owned non-default CUDA stream for the GPU tests, so kernels run on a real stream
// as a collective's would. CUDA builds only (include it under STRAIT_HAVE_CUDA). Errors: the
// constructor and sync() throw strait::Error (kernels/cuda/cuda_error.h) on a CUDA failure.
// Thread-safety: one owner.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "kernels/cuda/cuda_error.h"

namespace strait::test {

class TestStream {
 public:
  TestStream() {
    cudaStream_t s = nullptr;
    kernels::cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    s_.reset(s);
  }
  [[nodiscard]] cudaStream_t get() const { return s_.get(); }
  void sync() const { kernels::cuda_check(cudaStreamSynchronize(get()), "cudaStreamSynchronize"); }

 private:
  struct Destroy {
    void operator()(cudaStream_t s) const noexcept { static_cast<void>(cudaStreamDestroy(s)); }
  };
  std::unique_ptr<CUstream_st, Destroy> s_;
};

}  // namespace strait::test
