// libFuzzer target for the collective header (comm/algorithms/fingerprint.h): the 40 bytes a rank
// receives from a peer ahead of each collective's data, which are compared with this rank's own
// fingerprint and, when they differ, described in the Mismatch error.
//
// Input: any bytes; each 40-byte piece is taken as a received header. Properties checked, besides
// what ASan and UBSan catch: describe() works for every bit pattern (unknown kinds, dtypes, ops,
// algorithms and sizes included) and names the sequence number; == holds exactly when the bytes
// are equal (no padding or field is left out of the comparison).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/algorithms/fingerprint.h"

using strait::comm::Fingerprint;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fingerprint_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kBytes = sizeof(Fingerprint);
  Fingerprint previous{};
  for (std::size_t off = 0; off + kBytes <= size; off += kBytes) {
    Fingerprint received{};
    std::memcpy(&received, data + off, kBytes);
    const std::string text = received.describe();
    if (text.empty()) fail("describe() returned nothing");
    if (text.find('#' + std::to_string(received.seq)) == std::string::npos) {
      fail("describe() does not name the sequence number");
    }
    const bool same_bytes = std::memcmp(&received, &previous, kBytes) == 0;
    if ((received == previous) != same_bytes) fail("== disagrees with the bytes");
    previous = received;
  }
  return 0;
}
