#include "offload/adamw_state_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "offload/io_engine_factory.h"
#include "offload/pinned_buffer.h"
#include "offload/remove_on_exit.h"

namespace strait::offload {
namespace {

constexpr std::size_t round_up(std::size_t x, std::size_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

std::vector<DecayGroup> checked_groups(std::span<const DecayGroup> groups, std::size_t count) {
  std::vector<DecayGroup> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const DecayGroup& a, const DecayGroup& b) { return a.offset < b.offset; });
  std::size_t next = 0;
  for (const DecayGroup& g : sorted) {
    if (g.offset > next) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: parameters [{}, {}) are in no decay group; groups "
                              "must cover [0, {}) exactly",
                              next, g.offset, count));
    }
    if (g.offset < next) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay groups overlap at parameter {}; groups must "
                              "cover [0, {}) exactly",
                              g.offset, count));
    }
    if (g.count > count - g.offset) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay group [{}, +{}) ends past the {} parameters",
                              g.offset, g.count, count));
    }
    if (!(g.weight_decay >= 0.0 && std::isfinite(g.weight_decay))) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay group at {} has weight_decay {}: it must be "
                              "finite and >= 0",
                              g.offset, g.weight_decay));
    }
    next = g.offset + g.count;
  }
  if (next != count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: decay groups cover [0, {}) but there are {} parameters",
                            next, count));
  }
  return sorted;
}

void check_length(std::string_view what, std::size_t got, std::size_t count) {
  if (got != count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: {} has {} elements but the state holds {} parameters",
                            what, got, count));
  }
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
  // Destruction runs bottom-up: the engine drains in-flight transfers, then the file is closed,
  // the buffers unmapped and the file removed.
  RemoveOnExit remover;
  std::vector<PinnedBuffer> buffers;
  IoFile file;
  std::unique_ptr<IoEngine> engine;

  Impl(std::size_t n, const AdamWStateFileOptions& options) : count(n) {
    if (options.tag.find('/') != std::string::npos) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: tag '{}' goes into a file name and must not contain "
                              "'/'",
                              options.tag));
    }
    if (options.chunk_params == 0 || options.buffers < 2) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: chunk_params ({}) must be positive and buffers ({}) "
                              "at least 2",
                              options.chunk_params, options.buffers));
    }
    check_offload_dir(options.dir);
    IoEngineChoice choice = make_io_engine(options.dir, options.io);
    engine = std::move(choice.engine);
    reason = std::move(choice.reason);

    static std::atomic<unsigned> serial{0};
    const std::filesystem::path path = options.dir / fmt::format("strait-adamw-{}-pid{}-{}.moments",
                                                                 options.tag, ::getpid(), serial++);
    file = engine->open(path, OpenMode::CreateExclusive);
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

  // Streams every chunk through the buffers: optionally read it, run body(k, m, v) on the
  // chunk's moments, optionally write it back. Up to `prefetch` reads run ahead of the body and
  // writes finish in the background; a buffer is reused only after its previous write is done.
  template <class Body>
  void stream(bool read, bool write, Body&& body) {
    const std::size_t n = chunks;
    const std::size_t nbuf = buffers.size();
    if (n == 0) return;
    const std::size_t prefetch = nbuf > 2 ? nbuf - 2 : 1;
    std::vector<std::optional<IoEngine::Ticket>> reads(nbuf);
    std::vector<std::optional<IoEngine::Ticket>> writes(nbuf);
    const auto issue_read = [&](std::size_t k) {
      const std::size_t b = k % nbuf;
      settle(writes[b]);
      const IoRequest r = request(IoOp::Read, k, buffers[b]);
      reads[b] = engine->submit({&r, 1});
    };
    try {
      if (read) {
        for (std::size_t k = 0; k < std::min(prefetch, n); ++k) issue_read(k);
      }
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t b = k % nbuf;
        if (read) {
          if (k + prefetch < n) issue_read(k + prefetch);
          settle(reads[b]);
        } else {
          settle(writes[b]);
        }
        std::byte* base = buffers[b].data();
        const std::size_t len = chunk_count(k);
        const std::span<float> m(reinterpret_cast<float*>(base), len);
        const std::span<float> v(reinterpret_cast<float*>(base + half_bytes(k)), len);
        body(k, m, v);
        if (write) {
          const IoRequest w = request(IoOp::Write, k, buffers[b]);
          writes[b] = engine->submit({&w, 1});
        }
      }
      for (auto& w : writes) settle(w);
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
  check_length("params", params.size(), im.count);
  check_length("grads", grads.size(), im.count);
  if (t < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: step is {} but counts from 1", t));
  }
  kernels::validate(hyper);
  const std::vector<DecayGroup> sorted = checked_groups(groups, im.count);
  std::size_t first_group = 0;  // chunks come in order, so the groups' scan only moves forward
  try {
    im.stream(true, true, [&](std::size_t k, std::span<float> m, std::span<float> v) {
      const std::size_t lo = k * im.chunk;
      const std::size_t hi = lo + m.size();
      while (first_group < sorted.size() &&
             sorted[first_group].offset + sorted[first_group].count <= lo) {
        ++first_group;
      }
      for (std::size_t g = first_group; g < sorted.size() && sorted[g].offset < hi; ++g) {
        const std::size_t a = std::max(lo, sorted[g].offset);
        const std::size_t b = std::min(hi, sorted[g].offset + sorted[g].count);
        if (a >= b) continue;
        kernels::AdamWHyper h = hyper;
        h.weight_decay = sorted[g].weight_decay;
        kernels::adamw_step(params.subspan(a, b - a), grads.subspan(a, b - a),
                            m.subspan(a - lo, b - a), v.subspan(a - lo, b - a), h, t);
      }
    });
  } catch (const std::exception& e) {
    im.failure = e.what();
    throw;
  }
}

void AdamWStateFile::step(std::span<float> params, std::span<const float> grads,
                          const kernels::AdamWHyper& hyper, std::int64_t t) {
  const DecayGroup all{0, impl_->count, hyper.weight_decay};
  step(params, grads, {&all, 1}, hyper, t);
}

void AdamWStateFile::read_moments(std::span<float> m, std::span<float> v) {
  Impl& im = *impl_;
  check_length("m", m.size(), im.count);
  check_length("v", v.size(), im.count);
  im.stream(true, false, [&](std::size_t k, std::span<float> cm, std::span<float> cv) {
    std::copy(cm.begin(), cm.end(), m.begin() + static_cast<std::ptrdiff_t>(k * im.chunk));
    std::copy(cv.begin(), cv.end(), v.begin() + static_cast<std::ptrdiff_t>(k * im.chunk));
  });
}

void AdamWStateFile::write_moments(std::span<const float> m, std::span<const float> v) {
  Impl& im = *impl_;
  check_length("m", m.size(), im.count);
  check_length("v", v.size(), im.count);
  im.stream(false, true, [&](std::size_t k, std::span<float> cm, std::span<float> cv) {
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
