#include "comm/compress/powersgd_state.h"

#include <spdlog/spdlog.h>

namespace strait::comm {

PowerSgdState::Entry& PowerSgdState::entry(std::string_view key, std::uint64_t plan_hash,
                                           std::size_t count, std::size_t q_count) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(std::string(key), Entry{}).first;
  } else if (it->second.plan_hash == plan_hash) {
    return it->second;
  } else {
    spdlog::debug("powersgd: tensor '{}' changed its layout; its error and Q are reset", key);
  }
  Entry& e = it->second;
  e.plan_hash = plan_hash;
  e.error.assign(count, 0.0F);
  e.q.assign(q_count, 0.0F);
  e.calls = 0;
  return e;
}

void PowerSgdState::erase(std::string_view key) {
  const auto it = entries_.find(key);
  if (it != entries_.end()) entries_.erase(it);
}

}  // namespace strait::comm
