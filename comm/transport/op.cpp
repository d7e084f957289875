#include "comm/transport/op.h"

#include <fmt/format.h>

namespace strait::comm {

Error timeout_error(const std::string& description, std::chrono::milliseconds timeout,
                    const std::string& waiting_for) {
  return Error(ErrorCode::Timeout,
               fmt::format("{} did not finish within {} ms; still waiting for {}. A rank may be "
                           "stuck, dead or calling a different operation; raise the timeout "
                           "(STRAIT_TIMEOUT_S) if it is only slow",
                           description, timeout.count(), waiting_for));
}

}  // namespace strait::comm
