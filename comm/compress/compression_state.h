// CompressionState: what a communicator's compressed collectives keep between calls: one codec
// per spec (a codec with stochastic rounding carries its random stream from call to call), the
// error-feedback residuals per tensor key, and PowerSGD's residuals and warm-start Qs per key.
// Thread-safety: none. A communicator's operations run one at a time under its progress engine's
// lock (comm/progress_engine.h), which is the only place this is used.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "comm/compress/codec_factory.h"
#include "comm/compress/error_feedback.h"
#include "comm/compress/powersgd_state.h"

namespace strait::comm {

class CompressionState {
 public:
  // The codec of `spec` ("int8", "int4:block=32", ...), made on first use. Throws
  // InvalidArgument for a spec make_codec_from_spec() refuses.
  Codec& codec(std::string_view spec) {
    auto it = codecs_.find(spec);
    if (it == codecs_.end()) {
      it = codecs_.emplace(std::string(spec), make_codec_from_spec(spec)).first;
    }
    return *it->second;
  }
  ErrorFeedback& error_feedback() noexcept { return error_feedback_; }
  PowerSgdState& powersgd() noexcept { return powersgd_; }

 private:
  std::map<std::string, std::unique_ptr<Codec>, std::less<>> codecs_;
  ErrorFeedback error_feedback_;
  PowerSgdState powersgd_;
};

}  // namespace strait::comm
