// PowerSgdState: what PowerSGD keeps per tensor key between calls (comm/algorithms/
// powersgd_allreduce.h): the fp32 error-feedback residual of the whole buffer (zero outside the
// compressed matrices) and every compressed matrix's last Q, the warm start of the next call's
// power iteration. A key seen with another plan (count, layout, rank or spec: PowerSgdPlan::hash)
// starts again from zeros and a fresh Q, with a debug log line.
// Memory per key: 4 bytes per element of the buffer, plus 4 * sum of cols * r.
// Thread-safety: none; kept in a communicator's CompressionState, used by its operations only,
// one at a time under the progress engine's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace strait::comm {

class PowerSgdState {
 public:
  struct Entry {
    std::uint64_t plan_hash{};
    std::vector<float> error;  // count elements
    std::vector<float> q;      // sum of cols * r: the compressed matrices' Q, in plan order
    std::uint64_t calls{};     // completed calls since the last reset
  };

  // The entry of `key` for a plan of `count` elements and `q_count` Q elements; reset (zeros, no
  // calls) when the key is new or its plan_hash differs. Stays valid until erase() / clear().
  Entry& entry(std::string_view key, std::uint64_t plan_hash, std::size_t count,
               std::size_t q_count);
  [[nodiscard]] bool contains(std::string_view key) const { return entries_.contains(key); }
  void erase(std::string_view key);
  void clear() { entries_.clear(); }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

 private:
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace strait::comm
