#include "tools/tune/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/prefix_store.h"
#include "comm/compress/codec_factory.h"
#include "comm/compress/powersgd.h"

namespace strait::tools::tune {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::DType;
using kernels::ReduceOp;

double elapsed_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double slowest(comm::Communicator& comm, double mine) {
  comm.allreduce(&mine, &mine, 1, DType::F64, ReduceOp::Max);
  return mine;
}

// One point: see measure.h. `best` is the best time so far at this size (infinity: none yet).
template <class Call>
double time_point(comm::Communicator& comm, const MeasureOptions& o, double best, Call call) {
  comm.barrier();
  auto t0 = Clock::now();
  call();
  const double warm = slowest(comm, elapsed_us(t0));
  if (std::isfinite(best) && warm > o.prune_factor * best) return warm;
  const int n = static_cast<int>(std::clamp(o.seconds_per_point * 1e6 / std::max(warm, 1e-3), 1.0,
                                            static_cast<double>(o.iters)));
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(n));
  comm.barrier();
  for (int i = 0; i < n; ++i) {
    t0 = Clock::now();
    call();
    times.push_back(elapsed_us(t0));
  }
  std::sort(times.begin(), times.end());
  return slowest(comm, times[times.size() / 2]);
}

}  // namespace

Measurements measure_allreduce(comm::Communicator& comm, comm::Store& store,
                               std::span<const Candidate> candidates, const MeasureOptions& options,
                               const std::function<void(const std::string&)>& progress) {
  Measurements m{.world_size = comm.size(),
                 .sizes = options.sizes,
                 .candidates = {candidates.begin(), candidates.end()}};
  const std::size_t max_count = options.sizes.empty() ? 0 : options.sizes.back() / sizeof(float);
  std::vector<float> send(max_count);
  std::vector<float> recv(max_count);
  std::uint64_t state = 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(comm.rank());
  for (float& x : send) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53)) *
            2.0F -
        1.0F;
  }
  std::vector<double> best(options.sizes.size(), std::numeric_limits<double>::infinity());

  for (const Candidate& c : candidates) {
    const auto t0 = Clock::now();
    std::vector<double> row;
    // An algorithm gets a communicator whose only rule is itself.
    std::unique_ptr<comm::Communicator> own;
    if (!c.is_codec()) {
      auto table = std::make_shared<comm::AlgorithmTable>();
      comm::SelectionRule rule;
      rule.collective = "allreduce";
      rule.selection = c.algorithm;
      table->add(std::move(rule));
      comm::CommOptions co;
      co.timeout = comm.timeout();
      co.algorithms = std::move(table);
      own =
          comm::Communicator::create(std::make_shared<comm::PrefixStore>("tune/" + c.label, store),
                                     comm.rank(), comm.size(), co);
    }
    // PowerSGD keeps its warm start and error under the key, like the biased codecs.
    const bool feedback =
        c.is_codec() && (comm::PowerSgdOptions::names_powersgd(c.codec) ||
                         comm::make_codec_from_spec(c.codec)->needs_error_feedback());
    for (std::size_t s = 0; s < options.sizes.size(); ++s) {
      const std::size_t count = options.sizes[s] / sizeof(float);
      double t = 0;
      if (own) {
        t = time_point(*own, options, best[s], [&] {
          own->allreduce(send.data(), recv.data(), count, DType::F32, ReduceOp::Sum);
        });
      } else {
        const comm::Compression compression{
            .codec = c.codec,
            .key = feedback ? fmt::format("strait-tune/{}/{}", c.codec, count) : std::string()};
        t = time_point(comm, options, best[s], [&] {
          comm.allreduce_compressed(send.data(), recv.data(), count, ReduceOp::Sum, compression);
        });
      }
      row.push_back(t);
      best[s] = std::min(best[s], t);
    }
    m.time_us.push_back(std::move(row));
    progress(fmt::format("  {:<22} measured in {:.1f} s", c.label,
                         std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  return m;
}

}  // namespace strait::tools::tune
