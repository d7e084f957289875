#include "comm/compress/error_feedback.h"

#include <spdlog/spdlog.h>

namespace strait::comm {

std::span<float> ErrorFeedback::residual(std::string_view key, std::size_t count) {
  auto it = residuals_.find(key);
  if (it == residuals_.end()) {
    it = residuals_.emplace(std::string(key), std::vector<float>(count, 0.0F)).first;
  } else if (it->second.size() != count) {
    spdlog::debug(
        "error feedback: tensor '{}' changed from {} to {} elements; its residual is reset", key,
        it->second.size(), count);
    it->second.assign(count, 0.0F);
  }
  return it->second;
}

bool ErrorFeedback::contains(std::string_view key) const {
  return residuals_.contains(key);
}

void ErrorFeedback::erase(std::string_view key) {
  const auto it = residuals_.find(key);
  if (it != residuals_.end()) residuals_.erase(it);
}

void ErrorFeedback::encode(Codec& codec, std::string_view key, std::span<const float> grad,
                           std::span<std::byte> out) {
  const std::span<float> r = residual(key, grad.size());
  compensated_.resize(grad.size());
  for (std::size_t i = 0; i < grad.size(); ++i) compensated_[i] = grad[i] + r[i];
  const std::span<const float> c(compensated_.data(), grad.size());
  codec.encode(c, out);  // throws before the residual is touched
  codec.decode(out, r);
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = c[i] - r[i];
}

}  // namespace strait::comm
