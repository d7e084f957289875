// libFuzzer target for the sealed-message parser and replay window
// (comm/transport/sealed_message.h): the bytes a rank reads from a peer on another site.
//
// Input: arbitrary bytes. Properties checked, besides what ASan and UBSan catch:
//  - open() on the input either throws OpenError or returns (it never reads or writes out of
//    bounds); the fuzzer cannot forge a Poly1305 tag, so a success is reported as a failure;
//  - the input sealed as a plaintext opens to itself, and with any one bit flipped (the bit chosen
//    by the input) it does not open;
//  - the input read as (tag, sequence) pairs through a ReplayWindow: no sequence number is ever
//    accepted twice, and within a tag accepted numbers only grow.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "comm/security/secret.h"
#include "comm/transport/sealed_message.h"

namespace sealed = strait::comm::sealed;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "sealed_message_fuzz: %s\n", what);
  std::abort();
}

const strait::comm::Key& key() {
  static const strait::comm::Key k = [] {
    const std::string s = "sealed-message-fuzz-secret";
    return strait::comm::SharedSecret::from_bytes(
               {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()}, "fuzz")
        .derive("link");
  }();
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  std::vector<std::uint8_t> plain(size);
  try {
    sealed::open(key(), 3, 5, in, plain);
    fail("arbitrary bytes opened as a sealed message");
  } catch (const sealed::OpenError&) {
  }

  const sealed::Header h{.sender = 3, .receiver = 5, .tag = size, .seq = size * 31};
  std::vector<std::uint8_t> envelope(size + sealed::kOverhead);
  sealed::seal(key(), h, in, envelope);
  std::vector<std::uint8_t> back(size);
  sealed::open(key(), 3, 5, envelope, back);
  if (back != std::vector<std::uint8_t>(in.begin(), in.end())) fail("a round trip changed bytes");
  if (size >= 2) {
    const std::size_t bit = ((std::size_t{data[0]} << 8U) | data[1]) % (envelope.size() * 8);
    envelope[bit / 8] ^= static_cast<std::uint8_t>(1U << (bit % 8));
    try {
      sealed::open(key(), 3, 5, envelope, back);
      fail("an envelope with a flipped bit opened");
    } catch (const sealed::OpenError&) {
    }
  }

  sealed::ReplayWindow window;
  std::set<std::uint64_t> accepted;
  std::map<std::uint64_t, std::uint64_t> last;
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    const std::uint64_t tag = data[i] % 4;
    // Mostly small steps, sometimes past the window.
    const std::uint64_t seq =
        ((std::uint64_t{data[i + 1]} << 8U) | data[i + 2]) * (data[i] >= 0xf0 ? 4096 : 1);
    try {
      window.accept(1, tag, seq);
    } catch (const sealed::OpenError&) {
      continue;
    }
    if (!accepted.insert(seq).second) fail("a sequence number was accepted twice");
    const auto it = last.find(tag);
    if (it != last.end() && seq < it->second) fail("a tag went backwards");
    last[tag] = seq;
  }
  return 0;
}
