// run_ranks: N ranks as N threads of this process, each with its own Communicator (its own UCX
// worker and progress engine) created through Communicator::create over one shared HashStore, the
// way separate processes would over a TcpStore. UCX connects the workers of one process exactly
// as it connects processes (shared memory), so the collectives run their real code paths.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/hash_store.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace strait::comm::testing {

// Every operation of the tests fails within this rather than hang (a broken collective then shows
// as a Timeout naming what it waited for, not as a stuck ctest entry).
inline constexpr std::chrono::milliseconds kTestTimeout{30'000};

inline CommOptions options_with_timeout(std::chrono::milliseconds timeout) {
  CommOptions o;
  o.timeout = timeout;
  return o;
}

// Runs body(comm) for ranks 0..world-1, one thread each, rank r's communicator created with
// options_of(r); an exception escaping a rank's body is a test failure naming the rank. Returns
// once every rank has finished.
template <class OptionsOf, class Body>
void run_ranks_with(int world, OptionsOf options_of, Body body) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = Communicator::create(store, r, world, options_of(r));
          body(*comm);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < world; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    if (!e.empty()) ADD_FAILURE() << "rank " << r << " of " << world << " threw: " << e;
  }
}

// As run_ranks_with, every rank with the default options and `timeout`.
template <class Body>
void run_ranks(int world, Body body, std::chrono::milliseconds timeout = kTestTimeout) {
  run_ranks_with(
      world, [timeout](int) { return options_with_timeout(timeout); }, std::move(body));
}

// For tests where some ranks take no part: they wait at the gate, keeping their communicator (and
// so their UCX endpoints) alive until the ranks under test are done. A rank that destroyed its
// communicator early would turn the others' pending sends into PeerLost.
class Gate {
 public:
  void open() {
    open_.store(true);
    open_.notify_all();
  }
  void wait() const { open_.wait(false); }

 private:
  std::atomic<bool> open_{false};
};

// Opens a gate when the scope ends, however it ends (a failed ASSERT returns early).
class OpenOnExit {
 public:
  explicit OpenOnExit(Gate& gate) : gate_(gate) {}
  OpenOnExit(const OpenOnExit&) = delete;
  OpenOnExit& operator=(const OpenOnExit&) = delete;
  ~OpenOnExit() { gate_.open(); }

 private:
  Gate& gate_;
};

// The Error `f` throws; a test failure (and nullopt) when it throws nothing or something else.
template <class F>
std::optional<Error> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a strait::Error, got: " << e.what();
    return std::nullopt;
  }
  ADD_FAILURE() << "expected a strait::Error, nothing was thrown";
  return std::nullopt;
}

}  // namespace strait::comm::testing
