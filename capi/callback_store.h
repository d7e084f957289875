// CallbackStore: a comm::Store over the C callbacks of a straitStore_t (capi/strait.h), so
// that a communicator can bootstrap over a store its program already has (torch.distributed's
// c10d Store, driven from Python through ctypes), with no port of strait's own.
//
// Each Store call is one callback call; get() calls again with a buffer of the length the
// callback reported when the value did not fit (a few times at most, should the value keep
// growing), and wait() without a wait callback gets each key in turn within the one deadline.
// Thread-safety: as the callbacks (strait.h asks them to be safe from several threads).
// Errors: a callback's non-zero return becomes the Error of that code (straitTimeout: Timeout,
// straitPeerLost: PeerLost, ...; a value that is no straitResult_t: Internal), naming the
// callback, the key and the code. The constructor throws InvalidArgument for a struct not set up
// with STRAIT_STORE_INITIALIZER, of an unknown size, or missing set, get or add.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "capi/strait.h"
#include "comm/bootstrap/store.h"

namespace strait::capi {

class CallbackStore final : public comm::Store {
 public:
  // `function` names the C entry point in error messages. Copies the struct.
  CallbackStore(const straitStore_t& callbacks, const char* function);

  using Store::set;
  void set(const std::string& key, const comm::Bytes& value) override;
  comm::Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  // Throws the error of a non-zero callback return; `keys` names the keys ("key \"a\"").
  static void check(int rc, const char* callback, const std::string& keys,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));

  straitStore_t callbacks_{};
};

}  // namespace strait::capi
