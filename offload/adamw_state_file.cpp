#include "offload/adamw_state_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <vector>

#include "core/error.h"
#include "offload/io_engine_factory.h"
#include "offload/pinned_buffer.h"
#include "offload/remove_on_exit.h"

namespace strait::offload {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t round_up(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace

struct AdamWStateFile::Impl {
  std::size_t count = 0;
  std::size_t chunk = 0;      // parameters per chunk
  std::size_t alignment = 0;  // bytes
  std::size_t chunks = 0;
  std::uint64_t bytes = 0;
  std::string reason;
  std::string failure;  // set when a step failed partway
  kernels::ParallelAdamW opt;
  AdamWStepStats stats;  // of the last step()
  // Destruction runs bottom-up: the engine drains in-flight transfers, then the file is closed,
  // the buffers unmapped and the file removed.
  RemoveOnExit remover;
  std::vector<PinnedBuffer> buffers;
  IoFile file;
  std::unique_ptr<IoEngine> engine;

  Impl(std::size_t n, const AdamWStateFileOptions& options) : count(n), opt(options.threads) {
    if (options.chunk_params == 0 || options.buffers < 2) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: chunk_params ({}) must be positive and buffers ({}) "
                              "at least 2",
                              options.chunk_params, options.buffers));
    }
    OffloadFile f = create_offload_file(options.dir, "adamw offload", "adamw", options.tag,
                                        "moments", options.io);
    engine = std::move(f.engine);
    reason = std::move(f.reason);
    file = std::move(f.file);
    const std::filesystem::path path = f.path;
    remover.reset(path);

    const IoAlignment a = file.alignment();
    alignment = std::max({page_size(), a.offset, a.memory});
    chunk = round_up(options.chunk_params, alignment / sizeof(float));
    chunks = (count + chunk - 1) / chunk;
    const std::size_t full = count / chunk;
    bytes = std::uint64_t{full} * 2 * chunk * sizeof(float);
    if (count % chunk != 0) bytes += 2 * round_up(count % chunk * sizeof(float), alignment);
    preallocate(file, bytes);
    if (!options.keep_name) {
      // The open descriptor keeps the (now nameless) extents; the kernel frees them at exit.
      std::error_code ec;
      std::filesystem::remove(path, ec);
      if (!ec) remover.reset({});
    }

    const std::size_t nbuf = std::min<std::size_t>(options.buffers, chunks);
    const std::size_t buffer_bytes =
        2 * round_up(std::min(chunk, count) * sizeof(float), alignment);
    std::vector<std::span<std::byte>> spans;
    for (std::size_t i = 0; i < nbuf; ++i) {
      buffers.emplace_back(buffer_bytes);
      spans.push_back(buffers.back().bytes());
    }
    engine->register_buffers(spans);
    const IoFile* const files[] = {&file};
    engine->register_files(files);
    spdlog::debug(
        "offload: AdamW moments of {} parameters in {} ({} bytes, {} chunks of {}; {} "
        "engine: {})",
        count, path.string(), bytes, chunks, chunk, to_string(engine->kind()), reason);
  }

  [[nodiscard]] std::size_t chunk_count(std::size_t k) const {
    return std::min(chunk, count - k * chunk);
  }
  [[nodiscard]] std::size_t half_bytes(std::size_t k) const {
    return round_up(chunk_count(k) * sizeof(float), alignment);
  }
  [[nodiscard]] IoRequest request(IoOp op, std::size_t k, const PinnedBuffer& buffer) const {
    const std::uint64_t offset = std::uint64_t{k} * 2 * chunk * sizeof(float);
    const std::span<std::byte> extent = buffer.bytes().first(2 * half_bytes(k));
    return op == IoOp::Read ? IoRequest::read(file, offset, extent)
                            : IoRequest::write(file, offset, extent);
  }

  void check_usable() const {
    if (!failure.empty()) {
      throw Error(ErrorCode::Aborted,
                  fmt::format("adamw offload {}: an earlier step failed partway ({}), so "
                              "parameters and moments are inconsistent; restore them from a "
                              "checkpoint with write_moments() or recreate the optimizer",
                              file.path().string(), failure));
    }
  }

  void settle(std::optional<IoEngine::Ticket>& ticket) {
    if (!ticket) return;
    try {
      engine->wait(*ticket);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) ticket.reset();  // done, though failed
      throw;
    }
    ticket.reset();
  }

  // settle(), counting the time blocked in tally.io_wait_s.
  void settle_timed(std::optional<IoEngine::Ticket>& ticket, AdamWStepStats& tally) {
    if (!ticket) return;
    const auto start = Clock::now();
    const auto add = [&] {
      tally.io_wait_s += std::chrono::duration<double>(Clock::now() - start).count();
    };
    try {
      settle(ticket);
    } catch (...) {
      add();
      throw;
    }
    add();
  }

  // Streams every chunk through the buffers: optionally read it, run body(k, m, v) on the
  // chunk's moments, optionally write it back. Up to `prefetch` reads run ahead of the body and
  // writes finish in the background; a buffer is reused only after its previous write is done.
  // The time in body, the time blocked on transfers and the bytes moved are added to tally.
  template <class Body>
  void stream(bool read, bool write, AdamWStepStats& tally, Body&& body) {
    const std::size_t n = chunks;
    const std::size_t nbuf = buffers.size();
    if (n == 0) return;
    const std::size_t prefetch = nbuf > 2 ? nbuf - 2 : 1;
    std::vector<std::optional<IoEngine::Ticket>> reads(nbuf);
    std::vector<std::optional<IoEngine::Ticket>> writes(nbuf);
    const auto issue_read = [&](std::size_t k) {
      const std::size_t b = k % nbuf;
      settle_timed(writes[b], tally);
      const IoRequest r = request(IoOp::Read, k, buffers[b]);
      reads[b] = engine->submit({&r, 1});
      tally.bytes_read += r.length;
    };
    try {
      if (read) {
        for (std::size_t k = 0; k < std::min(prefetch, n); ++k) issue_read(k);
      }
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t b = k % nbuf;
        if (read) {
          if (k + prefetch < n) issue_read(k + prefetch);
          settle_timed(reads[b], tally);
        } else {
          settle_timed(writes[b], tally);
        }
        std::byte* base = buffers[b].data();
        const std::size_t len = chunk_count(k);
        const std::span<float> m(reinterpret_cast<float*>(base), len);
        const std::span<float> v(reinterpret_cast<float*>(base + half_bytes(k)), len);
        const auto compute_start = Clock::now();
        body(k, m, v);
        tally.compute_s += std::chrono::duration<double>(Clock::now() - compute_start).count();
        if (write) {
          const IoRequest w = request(IoOp::Write, k, buffers[b]);
          writes[b] = engine->submit({&w, 1});
          tally.bytes_written += w.length;
        }
      }
      for (auto& w : writes) settle_timed(w, tally);
    } catch (...) {
      // No transfer may still touch a buffer when this returns: the next call reuses them.
      for (auto* list : {&reads, &writes}) {
        for (auto& t : *list) {
          try {
            settle(t);
          } catch (const Error& e) {
            // Later chunks often fail the same way; only a transfer still in flight matters.
            if (e.code() == ErrorCode::Timeout) {
              spdlog::error("adamw offload: a transfer is still in flight after an error: {}",
                            e.what());
            } else {
              spdlog::debug("adamw offload: while draining after an error: {}", e.what());
            }
          }
        }
      }
      throw;
    }
  }
};

AdamWStateFile::AdamWStateFile(std::size_t count, const AdamWStateFileOptions& options)
    : impl_(std::make_unique<Impl>(count, options)) {}
AdamWStateFile::AdamWStateFile(AdamWStateFile&&) noexcept = default;
AdamWStateFile& AdamWStateFile::operator=(AdamWStateFile&&) noexcept = default;
AdamWStateFile::~AdamWStateFile() = default;

void AdamWStateFile::step(std::span<float> params, std::span<const float> grads,
                          std::span<const DecayGroup> groups, const kernels::AdamWHyper& hyper,
                          std::int64_t t) {
  Impl& im = *impl_;
  im.check_usable();
  const std::vector<DecayGroup> sorted =
      detail::check_step(params, grads, groups, hyper, t, im.count);
  std::size_t cursor = 0;  // chunks come in order, so the groups' scan only moves forward
  const auto start = Clock::now();
  im.stats = {};
  try {
    im.stream(true, true, im.stats, [&](std::size_t k, std::span<float> m, std::span<float> v) {
      detail::adamw_range(im.opt, sorted, cursor, k * im.chunk, params, grads, m, v, hyper, t);
    });
  } catch (const std::exception& e) {
    im.failure = e.what();
    im.stats.total_s = std::chrono::duration<double>(Clock::now() - start).count();
    throw;
  }
  im.stats.total_s = std::chrono::duration<double>(Clock::now() - start).count();
}

void AdamWStateFile::read_moments(std::span<float> m, std::span<float> v) {
  Impl& im = *impl_;
  detail::check_length("m", m.size(), im.count);
  detail::check_length("v", v.size(), im.count);
  AdamWStepStats unused;
  im.stream(true, false, unused, [&](std::size_t k, std::span<float> cm, std::span<float> cv) {
    std::copy(cm.begin(), cm.end(), m.begin() + static_cast<std::ptrdiff_t>(k * im.chunk));
    std::copy(cv.begin(), cv.end(), v.begin() + static_cast<std::ptrdiff_t>(k * im.chunk));
  });
}

void AdamWStateFile::write_moments(std::span<const float> m, std::span<const float> v) {
  Impl& im = *impl_;
  detail::check_length("m", m.size(), im.count);
  detail::check_length("v", v.size(), im.count);
  AdamWStepStats unused;
  im.stream(false, true, unused, [&](std::size_t k, std::span<float> cm, std::span<float> cv) {
    const auto lo = static_cast<std::ptrdiff_t>(k * im.chunk);
    const auto n = static_cast<std::ptrdiff_t>(cm.size());
    std::copy(m.begin() + lo, m.begin() + lo + n, cm.begin());
    std::copy(v.begin() + lo, v.begin() + lo + n, cv.begin());
  });
  im.failure.clear();
}

std::size_t AdamWStateFile::count() const noexcept {
  return impl_->count;
}
unsigned AdamWStateFile::threads() const noexcept {
  return impl_->opt.threads();
}
AdamWStepStats AdamWStateFile::last_step_stats() const noexcept {
  return impl_->stats;
}
std::string AdamWStateFile::describe() const {
  const Impl& im = *impl_;
  const std::string how = im.engine->kind() == IoEngineKind::Uring
                              ? std::string("io_uring with O_DIRECT")
                              : fmt::format("pread/pwrite ({})", im.reason);
  return fmt::format("{:.1f} MiB in a file in {} through {}, chunks of {} parameters",
                     static_cast<double>(im.bytes) / (1 << 20),
                     im.file.path().parent_path().string(), how, im.chunk);
}
std::size_t AdamWStateFile::chunk_params() const noexcept {
  return impl_->chunk;
}
std::uint64_t AdamWStateFile::file_bytes() const noexcept {
  return impl_->bytes;
}
const std::filesystem::path& AdamWStateFile::path() const noexcept {
  return impl_->file.path();
}
IoEngineKind AdamWStateFile::engine_kind() const noexcept {
  return impl_->engine->kind();
}
std::string_view AdamWStateFile::engine_reason() const noexcept {
  return impl_->reason;
}

}  // namespace strait::offload
