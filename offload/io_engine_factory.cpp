#include "offload/io_engine_factory.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/params.h"
#include "offload/pinned_buffer.h"
#include "offload/posix_engine.h"
#include "offload/remove_on_exit.h"
#include "offload/uring_engine.h"

namespace strait::offload {
namespace {

constexpr const char* kEnvVar = "STRAIT_IO_ENGINE";

std::optional<IoEngineKind> kind_from_env() {
  const std::optional<std::string> value = params::text(kEnvVar);
  if (!value) return std::nullopt;
  const std::string_view v(*value);
  if (v == "posix") return IoEngineKind::Posix;
  if (v == "uring") return IoEngineKind::Uring;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("{}='{}' names no I/O engine: use posix or uring, or unset it for the "
                          "automatic choice",
                          kEnvVar, v));
}

// An Error's message without the "Unavailable: " prefix that what() carries.
std::string message_of(const Error& e) {
  std::string text = e.what();
  const std::string prefix = fmt::format("{}: ", to_string(e.code()));
  if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());
  return text;
}

// Creates a UringEngine and proves that an O_DIRECT write and read round-trip through it in dir.
// Throws Unavailable with the reason when they do not; InvalidArgument when dir is not writable.
std::unique_ptr<IoEngine> probe_uring(const std::filesystem::path& dir,
                                      const IoEngineOptions& options) {
  auto engine = std::make_unique<UringEngine>(options);
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path path =
      dir / fmt::format(".strait-probe-{}-{}", ::getpid(), counter++);
  RemoveOnExit probe;  // armed once the file exists: removing a file never made would only fail
  const IoFile file = engine->open(path, OpenMode::CreateExclusive);
  probe.reset(path);
  const IoAlignment a = file.alignment();
  const std::size_t block = std::max({a.offset, a.memory, page_size()});
  const PinnedBuffer buffer(block);
  const std::span<std::byte> bytes = buffer.bytes().first(block);
  for (std::size_t i = 0; i < block; ++i) bytes[i] = static_cast<std::byte>(i * 7 + 1);
  try {
    const IoRequest write = IoRequest::write(file, 0, bytes);
    engine->run({&write, 1});
    std::fill(bytes.begin(), bytes.end(), std::byte{0});
    const IoRequest read = IoRequest::read(file, 0, bytes);
    engine->run({&read, 1});
  } catch (const Error& e) {
    engine.reset();  // waits for anything still in flight before the buffer goes away
    if (e.code() != ErrorCode::Io) throw;
    throw Error(ErrorCode::Unavailable,
                fmt::format("an O_DIRECT round trip through io_uring failed in {}: {}",
                            dir.string(), message_of(e)));
  }
  for (std::size_t i = 0; i < block; ++i) {
    if (bytes[i] != static_cast<std::byte>(i * 7 + 1)) {
      throw Error(ErrorCode::Unavailable,
                  fmt::format("an O_DIRECT round trip through io_uring in {} returned different "
                              "bytes at offset {}",
                              dir.string(), i));
    }
  }
  return engine;
}

void warn_fallback_once(const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    const std::lock_guard lock(mu);
    if (!seen.insert(reason).second) return;
  }
  spdlog::warn("offload: using the posix (pread/pwrite) I/O engine instead of io_uring: {}",
               reason);
}

}  // namespace

void check_offload_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(status)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("offload directory {} does not exist: create it or pass "
                            "--offload-dir DIR",
                            dir.string()));
  }
  if (!std::filesystem::is_directory(status)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("offload directory {} is not a directory: pass --offload-dir DIR "
                            "naming a directory",
                            dir.string()));
  }
}

IoEngineChoice make_io_engine(const std::filesystem::path& dir, const IoEngineOptions& options) {
  check_offload_dir(dir);
  std::optional<IoEngineKind> forced = options.force;
  std::string source = "IoEngineOptions::force";
  if (!forced) {
    forced = kind_from_env();
    source = fmt::format("{}={}", kEnvVar, forced ? to_string(*forced) : "");
  }
  if (forced == IoEngineKind::Posix) {
    return {std::make_unique<PosixEngine>(options), fmt::format("posix forced by {}", source)};
  }
  if (forced == IoEngineKind::Uring) {
    try {
      return {probe_uring(dir, options), fmt::format("uring forced by {}", source)};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unavailable) throw;
      throw Error(ErrorCode::Unavailable,
                  fmt::format("{} asks for the io_uring engine but it cannot work in {}: {}",
                              source, dir.string(), message_of(e)));
    }
  }
  try {
    return {probe_uring(dir, options),
            fmt::format("io_uring with O_DIRECT works in {}", dir.string())};
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unavailable) throw;
    std::string reason = message_of(e);
    warn_fallback_once(reason);
    return {std::make_unique<PosixEngine>(options), std::move(reason)};
  }
}

OffloadFile create_offload_file(const std::filesystem::path& dir, std::string_view what,
                                std::string_view kind, std::string_view tag, std::string_view ext,
                                const IoEngineOptions& io) {
  if (tag.find('/') != std::string_view::npos) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{}: tag '{}' goes into a file name and must not contain '/'", what, tag));
  }
  check_offload_dir(dir);
  IoEngineChoice choice = make_io_engine(dir, io);
  static std::atomic<unsigned> serial{0};
  OffloadFile out;
  out.path = dir / fmt::format("strait-{}-{}-pid{}-{}.{}", kind, tag, ::getpid(), serial++, ext);
  out.file = choice.engine->open(out.path, OpenMode::CreateExclusive);
  out.engine = std::move(choice.engine);
  out.reason = std::move(choice.reason);
  return out;
}

}  // namespace strait::offload
