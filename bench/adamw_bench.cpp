// strait_adamw_bench: CPU AdamW throughput (kernels::ParallelAdamW) and, in the same process with
// the same threads and tiles, a STREAM-like triad a = b + s c that measures the memory bandwidth
// the AdamW bound is computed from. bench/compare_adamw.sh runs it next to torch.optim.AdamW.
//
// AdamW moves 28 bytes per parameter and step (reads p, g, m, v; writes p, m, v; +2 with --bf16).
// The triad counts 12 bytes per element as STREAM does (two reads, one write; the write-allocate
// read is not counted), over arrays as large as AdamW's four; "stream28" runs AdamW's own pattern
// (read p, g, m, v; write p, m, v in place) without the arithmetic. The bound is GB/s / 28 B.
// Prints one JSON object per line: {"kind": "strait_adamw" | "triad" | "stream28", ...}; times are
// the median and the best of --reps runs after one warm-up.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/cpu_features.h"
#include "kernels/tile_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Times {
  double median = 0.0;
  double best = 0.0;
};

template <class F>
Times time_runs(int reps, F&& f) {
  f();  // warm-up: pages touched, threads awake
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return {s[s.size() / 2], s.front()};
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One JSON line for a memory-bandwidth probe: `kind` moved bytes_per_element over `elements`;
// AdamW's bound is that bandwidth over its 28 bytes per parameter.
void print_bound(const char* kind, std::size_t elements, double bytes_per_element, unsigned threads,
                 int reps, const Times& t) {
  const double bytes = bytes_per_element * static_cast<double>(elements);
  const double gbs = bytes / t.median / 1e9;
  fmt::print(
      "{{\"kind\": \"{}\", \"elements\": {}, \"threads\": {}, \"reps\": {}, \"median_s\": "
      "{:.6f}, \"best_s\": {:.6f}, \"gb_per_s\": {:.2f}, \"best_gb_per_s\": {:.2f}, "
      "\"adamw_bound_params_per_s\": {:.4e}}}\n",
      kind, elements, threads, reps, t.median, t.best, gbs, bytes / t.best / 1e9, gbs * 1e9 / 28.0);
  std::fflush(stdout);
}

// Calls f(lo, hi) over [0, n) in AdamW's tiles on the pool.
template <class F>
void opt_free_pool_run(strait::kernels::TilePool& pool, std::size_t n, F&& f) {
  constexpr std::size_t kTile = strait::kernels::ParallelAdamW::kTileParams;
  pool.for_each_tile((n + kTile - 1) / kTile, [&](std::size_t tile) {
    const std::size_t lo = tile * kTile;
    f(lo, std::min(n, lo + kTile));
  });
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"strait_adamw_bench: CPU AdamW params/s and a triad for the bandwidth bound"};
  std::vector<std::size_t> sizes{std::size_t{1} << 24};
  unsigned threads = 0;
  int reps = 10;
  bool bf16 = false;
  app.add_option("-n,--params", sizes, "parameter counts")->delimiter(',');
  app.add_option("-t,--threads", threads, "threads (0: hardware concurrency)");
  app.add_option("-r,--reps", reps, "timed runs per figure")->check(CLI::Range(1, 100000));
  bool no_bandwidth = false;
  app.add_flag("--bf16", bf16, "also write a bf16 copy of the weights");
  app.add_flag("--no-bandwidth", no_bandwidth, "AdamW only: no triad or stream28");
  CLI11_PARSE(app, argc, argv);

  strait::kernels::ParallelAdamW opt(threads);
  strait::kernels::TilePool pool(opt.threads());
  const std::string simd(strait::kernels::simd_level_name(strait::kernels::simd_level()));
  for (const std::size_t n : sizes) {
    std::vector<float> p = random_floats(n, 1, 1.0F);
    const std::vector<float> g = random_floats(n, 2, 1e-2F);
    std::vector<float> m(n, 0.0F), v(n, 0.0F);
    std::vector<std::uint16_t> p16(bf16 ? n : 0);
    strait::kernels::AdamWHyper h;
    std::int64_t t = 0;
    const Times at = time_runs(reps, [&] { opt.step(p, g, m, v, h, ++t, p16); });
    const double bytes = (bf16 ? 30.0 : 28.0) * static_cast<double>(n);
    fmt::print(
        "{{\"kind\": \"strait_adamw\", \"params\": {}, \"threads\": {}, \"simd\": \"{}\", "
        "\"bf16\": {}, \"reps\": {}, \"median_s\": {:.6f}, \"best_s\": {:.6f}, "
        "\"params_per_s\": {:.4e}, \"best_params_per_s\": {:.4e}, \"gb_per_s\": {:.2f}}}\n",
        n, opt.threads(), simd, bf16, reps, at.median, at.best, n / at.median, n / at.best,
        bytes / at.median / 1e9);
    std::fflush(stdout);
    if (no_bandwidth) continue;

    // Triad over 28/12 as many elements as AdamW has parameters: the same bytes in flight.
    const std::size_t tn = n * 28 / 12;
    std::vector<float> a(tn, 0.0F);
    const std::vector<float> b = random_floats(tn, 3, 1.0F), c = random_floats(tn, 4, 1.0F);
    constexpr std::size_t kTile = strait::kernels::ParallelAdamW::kTileParams;
    const float s = 3.0F;
    const Times tt = time_runs(reps, [&] {
      pool.for_each_tile((tn + kTile - 1) / kTile, [&](std::size_t tile) {
        const std::size_t lo = tile * kTile, hi = std::min(tn, lo + kTile);
        float* const ap = a.data();
        const float* const bp = b.data();
        const float* const cp = c.data();
        for (std::size_t i = lo; i < hi; ++i) ap[i] = bp[i] + s * cp[i];
      });
    });
    print_bound("triad", tn, 12.0, pool.threads(), reps, tt);

    // AdamW's own access pattern without its arithmetic: read p, g, m, v, write p, m, v in place
    // (28 B per element, no write-allocate traffic since every written line was just read). The
    // tighter bound of the two: what memory gives this exact mix of streams.
    const Times st = time_runs(reps, [&] {
      opt_free_pool_run(pool, n, [&](std::size_t lo, std::size_t hi) {
        float* const pp = p.data();
        float* const mp = m.data();
        float* const vp = v.data();
        const float* const gp = g.data();
        for (std::size_t i = lo; i < hi; ++i) {
          const float gi = gp[i];
          pp[i] += gi;
          mp[i] += gi;
          vp[i] += gi;
        }
      });
    });
    print_bound("stream28", n, 28.0, pool.threads(), reps, st);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strait_adamw_bench: %s\n", e.what());
  return 1;
}
