#include "tools/tune_command.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "comm/algorithms/selection.h"
#include "comm/bootstrap/launch_env.h"
#include "comm/bootstrap/prefix_store.h"
#include "comm/communicator.h"
#include "comm/links.h"
#include "comm/sites.h"
#include "core/error.h"
#include "tools/launcher.h"
#include "tools/tune/budget.h"
#include "tools/tune/candidates.h"
#include "tools/tune/config.h"
#include "tools/tune/decide.h"
#include "tools/tune/measure.h"
#include "tools/tune/report.h"

namespace strait::tools {
namespace {

constexpr const char* kFooter = R"(
Without RANK in the environment, `strait tune` checks its options and starts -n ranks of itself on
this machine; under `strait run`, `strait wan run`, torchrun or a Slurm/mpirun wrapper it runs as
the rank the environment names, e.g.
  strait wan run --ranks-per-site 1 -- build/strait tune --max-codec int8 --sizes 4K..4M
Step 1 times every pair of ranks (latency: 8-byte ping-pong; bandwidth: a few MiB one way) and
groups ranks into sites; step 2 times every registered allreduce algorithm and every codec at
each size; rank 0 then prints the tables and writes --output, which the Communicator reads as
STRAIT_TUNE_FILE: plain allreduce takes the rules' algorithms, and allreduce_compressed with
codec "auto" takes their codecs (never above --max-codec). Lossless plain allreduce stays lossless.)";

struct TuneOptions {
  int nproc = 2;
  std::string sizes = "4K..64M";
  int step = 4;
  std::string max_codec = "none";
  int iters = 10;
  std::string output = "strait-tune.json";
  bool quick = false;
  double site_factor = 4;
  double tolerance = 0.05;
};

std::vector<std::uint64_t> parse_sizes(const std::string& text, int step) {
  const auto dots = text.find("..");
  if (dots == std::string::npos) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--sizes '{}' is not a range: give LO..HI, e.g. 4K..64M", text));
  }
  const auto lo = comm::parse_rule_size(text.substr(0, dots), "--sizes");
  const auto hi = comm::parse_rule_size(text.substr(dots + 2), "--sizes");
  constexpr std::uint64_t kMax = std::uint64_t{1} << 30;
  if (lo < 4 || lo > hi || hi > kMax || lo % 4 != 0 || hi % 4 != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--sizes {}: need 4 <= LO <= HI <= 1G, both multiples of 4 bytes (f32 "
                            "elements), e.g. 4K..64M",
                            text));
  }
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = lo; s <= hi; s *= static_cast<std::uint64_t>(step)) sizes.push_back(s);
  if (sizes.back() != hi) sizes.push_back(hi);
  return sizes;
}

// Fails before any measuring when the output cannot be written.
void check_output(const std::string& path) {
  const std::string probe = path + ".tmp";
  std::ofstream out(probe);
  if (!out) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--output {}: cannot create {} ({}): check that its folder exists and "
                            "is writable",
                            path, probe, std::strerror(errno)));
  }
  out.close();
  std::filesystem::remove(probe);
}

void print(const std::string& text) {
  fmt::print("{}", text);
  std::fflush(stdout);
}

void run_rank(const TuneOptions& o) {
  const auto sizes = parse_sizes(o.sizes, o.step);
  const int level = tune::parse_max_codec(o.max_codec);
  const auto env = comm::launch_env_from_environment();
  const auto timeout = comm::CommOptions::default_timeout();
  const std::shared_ptr<comm::Store> store = comm::make_launch_store(env, timeout, timeout);
  comm::CommOptions co;
  co.timeout = timeout;
  const auto world = comm::Communicator::create(
      std::make_shared<comm::PrefixStore>("tune/main", *store), env.rank, env.world_size, co);
  const bool leader = world->rank() == 0;
  if (world->size() < 2) {
    throw Error(ErrorCode::InvalidArgument,
                "strait tune needs at least 2 ranks (WORLD_SIZE is 1): start it with -n 2 or "
                "more, or under a launcher with more ranks");
  }
  if (leader) check_output(o.output);
  const auto start = std::chrono::steady_clock::now();
  if (leader) {
    print(fmt::format("strait tune: {} ranks, sizes {} (x{}), budget --max-codec {}, {}\n",
                      world->size(), o.sizes, o.step, o.max_codec,
                      o.quick ? "quick" : fmt::format("up to {} timed calls per point", o.iters)));
  }

  comm::LinkOptions lo;
  if (o.quick) lo = comm::LinkOptions{.pings = 20, .bulk_bytes = 1 << 20, .bulk_reps = 2};
  tune::TuneResult result;
  result.max_codec = o.max_codec;
  result.site_factor = o.site_factor;
  result.links = comm::measure_links(*world, lo);
  result.sites = comm::cluster_by_bandwidth(result.links.bandwidth_MBps, o.site_factor).members();
  if (leader) print(tune::format_links(result.links, result.sites, o.site_factor));

  const std::vector<std::uint64_t> segments =
      o.quick ? std::vector<std::uint64_t>{8 << 10, 1 << 20}
              : std::vector<std::uint64_t>{8 << 10, 64 << 10, 1 << 20, 0};
  const auto candidates = tune::allreduce_candidates(segments);
  const tune::MeasureOptions mo{
      .sizes = sizes, .iters = o.iters, .seconds_per_point = o.quick ? 0.1 : 0.5};
  if (leader)
    print(fmt::format("timing {} candidates at {} sizes\n", candidates.size(), sizes.size()));
  result.measurements =
      tune::measure_allreduce(*world, *store, candidates, mo, [&](const std::string& line) {
        if (leader) print(line + "\n");
      });
  result.decision = tune::decide(result.measurements, level, o.tolerance);
  result.tolerance = o.tolerance;
  if (leader) {
    print(tune::format_decision(result.measurements, result.decision, o.max_codec));
    const auto config = tune::config_json(result);
    // What the Communicator will read must parse: checked before it replaces anything.
    (void)comm::AlgorithmTable::parse_json(config.dump(), "the tuner's own output");
    tune::write_config(o.output, config);
    print(fmt::format(
        "wrote {} in {:.1f} s; use it with STRAIT_TUNE_FILE={}\n", o.output,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), o.output));
  }
  world->barrier();  // nobody leaves (and takes its endpoints away) while rank 0 still writes
}

std::string self_executable(const std::string& argv0) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? argv0 : exe.string();
}

}  // namespace

void add_tune_command(CLI::App& app, const std::vector<std::string>& argv, int& exit_code) {
  CLI::App* tune = app.add_subcommand(
      "tune",
      "Measure links and allreduce algorithms/codecs, write a STRAIT_TUNE_FILE and print the "
      "choice per message size");
  tune->footer(kFooter);
  auto o = std::make_shared<TuneOptions>();
  tune->add_option("-n,--nproc", o->nproc, "Local ranks to start when RANK is not set")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  auto* sizes =
      tune->add_option("--sizes", o->sizes,
                       "Message sizes LO..HI in bytes (K, M, G suffixes); --quick: 4K..1M")
          ->capture_default_str();
  tune->add_option("--step", o->step, "Factor between measured sizes (2 or 4)")
      ->check(CLI::IsMember({2, 4}))
      ->capture_default_str();
  tune->add_option("--max-codec", o->max_codec,
                   "Accuracy budget: the lossiest codec allowed (none < fp16 = bf16 < int8 < int4 "
                   "< onebit = topk)")
      ->capture_default_str();
  auto* iters = tune->add_option("--iters", o->iters, "Timed calls per point at most; --quick: 3")
                    ->check(CLI::Range(1, 100000))
                    ->capture_default_str();
  tune->add_option("--output", o->output, "The config file to write")->capture_default_str();
  tune->add_flag("--quick", o->quick,
                 "Fewer sizes, segment sizes, calls and link transfers (seconds, not minutes)");
  tune->add_option("--site-factor", o->site_factor,
                   "Ranks whose link is within this factor of the fastest link share a site")
      ->check(CLI::Range(1.0, 1e9))
      ->capture_default_str();

  tune->add_option("--tolerance", o->tolerance,
                   "Times within this fraction of the fastest are ties, which go to the less lossy "
                   "codec, then the earlier candidate")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();

  tune->callback([o, sizes, iters, argv, &exit_code] {
    if (o->quick && sizes->count() == 0) o->sizes = "4K..1M";
    if (o->quick && iters->count() == 0) o->iters = 3;
    const char* rank_env = std::getenv("RANK");
    if (rank_env == nullptr) {
      // Parent: fail fast on bad options, then start the ranks.
      (void)parse_sizes(o->sizes, o->step);
      (void)tune::parse_max_codec(o->max_codec);
      check_output(o->output);
      LaunchOptions launch_options;
      launch_options.nproc = o->nproc;
      launch_options.command = argv;
      launch_options.command[0] = self_executable(argv[0]);
      exit_code = launch(launch_options);
      return;
    }
    try {
      run_rank(*o);
      exit_code = 0;
    } catch (const Error& e) {
      fmt::print(stderr, "strait tune: rank {}: {}\n", rank_env, e.what());
      exit_code = e.code() == ErrorCode::InvalidArgument ? 2 : 1;
    } catch (const std::exception& e) {
      fmt::print(stderr, "strait tune: rank {}: unexpected error: {}\n", rank_env, e.what());
      exit_code = 1;
    }
  });
}

}  // namespace strait::tools
