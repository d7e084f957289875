// Error feedback (EF-SGD): what a lossy encoding dropped from a tensor's gradient is kept as an
// fp32 residual and added to that tensor's next gradient before it is encoded:
//   compensated = grad + residual;  bytes = encode(compensated);
//   residual = compensated - decode(bytes)
// so the sum of everything sent tracks the sum of the gradients to within one residual
// (Seide et al. 2014; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD and other Gradient
// Compression Schemes"). It makes the biased codecs (topk, onebit) converge, and stops the rounding
// of the others from accumulating.
//
// Residuals are keyed by a stable tensor key (a parameter's name, a bucket's id), one fp32 value
// per element (4 bytes per element of memory). A key seen with a different count is reset to zeros,
// with a debug log line: the tensor's shape changed, so its old residual no longer lines up.
// Thread-safety: none; one store per thread (or per communicator's progress thread).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/compress/codec.h"

namespace strait::comm {

class ErrorFeedback {
 public:
  // Encodes grad + residual(key) into out (out.size() == codec.encoded_bytes(grad.size())) and
  // keeps what the encoding lost as the new residual. If encode throws (a NaN or Inf), the
  // residual is left as it was.
  void encode(Codec& codec, std::string_view key, std::span<const float> grad,
              std::span<std::byte> out);

  // The residual of key for a tensor of count elements: zeros when the key is new or its count
  // changed. Valid until the next call that adds or resets a key.
  std::span<float> residual(std::string_view key, std::size_t count);
  [[nodiscard]] bool contains(std::string_view key) const;
  void erase(std::string_view key);
  void clear() { residuals_.clear(); }
  [[nodiscard]] std::size_t size() const noexcept { return residuals_.size(); }

 private:
  std::map<std::string, std::vector<float>, std::less<>> residuals_;
  std::vector<float> compensated_;  // scratch, reused across calls
};

}  // namespace strait::comm
