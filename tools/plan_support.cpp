#include "tools/plan_support.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/params.h"
#include "scheduler/schedule_sim.h"
#include "scheduler/schedule_trace.h"
#include "tools/wan/subprocess.h"
#include "train/placement.h"

namespace strait::tools {
namespace {

using train::PlanLinks;

Error bad(const std::string& what) {
  return {ErrorCode::InvalidArgument, what};
}

std::string self_exe() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorCode::Io, "plan: cannot find this executable (/proc/self/exe)");
  return exe.string();
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

PlanLinks links_from_tune_file(const std::filesystem::path& path, const std::string& source) {
  const auto j = nlohmann::json::parse(slurp(path));
  if (!j.contains("links")) {
    throw bad(fmt::format("{} has no \"links\": write it with strait tune", path.string()));
  }
  PlanLinks l;
  const auto lat = j.at("links").at("latency_us").get<std::vector<std::vector<double>>>();
  const auto bw = j.at("links").at("bandwidth_MBps").get<std::vector<std::vector<double>>>();
  l.latency_s = lat;
  l.bandwidth = bw;
  for (auto& row : l.latency_s) {
    for (auto& x : row) x *= 1e-6;
  }
  for (auto& row : l.bandwidth) {
    for (auto& x : row) x *= 1e6;
  }
  l.site.assign(lat.size(), 0);
  if (j.contains("sites")) {
    const auto sites = j.at("sites").get<std::vector<std::vector<int>>>();
    for (std::size_t s = 0; s < sites.size(); ++s) {
      for (const int r : sites[s]) {
        if (r >= 0 && r < static_cast<int>(l.site.size())) {
          l.site[static_cast<std::size_t>(r)] = static_cast<int>(s);
        }
      }
    }
  }
  l.source = source;
  return l;
}

// Runs `command` (strait's own subcommand and flags) as the job's ranks: under `strait wan run`
// on the WAN testbed when wan_ranks_per_site > 0, else as it is (it starts its own ranks).
std::vector<std::string> job_argv(const PlanSetup& setup, std::vector<std::string> command) {
  command.insert(command.begin(), self_exe());
  if (setup.wan_ranks_per_site <= 0) return command;
  std::vector<std::string> argv = {
      self_exe(), "wan", "run", "--ranks-per-site", std::to_string(setup.wan_ranks_per_site), "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

PlanLinks measure_links(int n, const PlanSetup& setup) {
  const auto out =
      std::filesystem::temp_directory_path() / fmt::format("strait-plan-tune-{}.json", ::getpid());
  std::vector<std::string> tune = {"tune",    "--quick",  "--sizes",
                                   "4K..64K", "--output", out.string()};
  if (setup.wan_ranks_per_site <= 0) tune.insert(tune.begin() + 1, {"-n", std::to_string(n)});
  run_checked(job_argv(setup, tune));
  PlanLinks l = links_from_tune_file(
      out, setup.wan_ranks_per_site > 0
               ? fmt::format("strait wan run --ranks-per-site {} -- strait tune --quick",
                             setup.wan_ranks_per_site)
               : fmt::format("strait tune -n {} --quick", n));
  std::filesystem::remove(out);
  return l;
}

std::vector<int> parse_sites(const std::string& text, int n) {
  std::vector<int> sites;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      sites.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw bad(fmt::format("--sites {}: '{}' is not a site number (e.g. 0,0,1,1)", text, item));
    }
  }
  if (static_cast<int>(sites.size()) != n) {
    throw bad(fmt::format("--sites {} names {} ranks, -n is {}: give one site per rank", text,
                          sites.size(), n));
  }
  return sites;
}

void apply_site_link(PlanLinks& l, const std::string& text) {
  // LATENCY_MS,MBIT with nothing around them (strtod reports where each number ended).
  const char* first = text.c_str();
  char* end = nullptr;
  const double ms = std::strtod(first, &end);
  const bool comma = end != first && *end == ',';
  const char* second = comma ? end + 1 : end;
  const double mbit = comma ? std::strtod(second, &end) : 0;
  if (!comma || end == second || *end != '\0' || ms < 0 || mbit <= 0) {
    throw bad(fmt::format("--site-link {}: give LATENCY_MS,MBIT, e.g. 10,100", text));
  }
  const int n = l.world();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const auto a = static_cast<std::size_t>(i), b = static_cast<std::size_t>(j);
      if (l.site[a] == l.site[b]) continue;
      l.latency_s[a][b] = ms * 1e-3;
      l.bandwidth[a][b] = mbit * 1e6 / 8;
    }
  }
  l.source += fmt::format("; between sites {} ms, {} Mbit/s (--site-link)", ms, mbit);
}

double med(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs argv with stdout and stderr to `log`; kills its process group after `limit_s`. Returns
// the exit status (128 + signal when killed).
int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log,
               double limit_s) {
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorCode::Io, "plan: fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 128 + SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::filesystem::path default_profile_path() {
  if (auto p = params::text("STRAIT_PLAN_PROFILE"); p && !p->empty()) return *p;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/var/tmp") / ".cache" / "strait" /
         "plan-profile.json";
}

double prepare_costs(train::PlanRequest& r, train::PlanProfile& profile, const PlanSetup& setup) {
  const auto t0 = std::chrono::steady_clock::now();
  bool changed = false;
  if (setup.reprofile) {
    profile = {};
    changed = true;
  }
  if (!setup.links_file.empty()) {
    r.links = links_from_tune_file(setup.links_file, "file " + setup.links_file);
  } else if (setup.sites == "measure" || setup.wan_ranks_per_site > 0 ||
             profile.links.count(r.ranks) == 0) {
    r.links = measure_links(r.ranks, setup);
    if (setup.sites != "measure" && setup.wan_ranks_per_site <= 0) {
      profile.links[r.ranks] = r.links;
      changed = true;
    }
  } else {
    r.links = profile.links.at(r.ranks);
    r.links.source += " (cached)";
  }
  if (r.links.world() != r.ranks) {
    throw bad(
        fmt::format("the links measured for {} ranks cannot plan {} (-n): measure them again "
                    "(--sites measure) or give --links for {} ranks",
                    r.links.world(), r.ranks, r.ranks));
  }
  if (!setup.sites.empty() && setup.sites != "measure") {
    r.links.site = parse_sites(setup.sites, r.ranks);
  } else if (setup.wan_ranks_per_site > 0) {
    // The testbed's sites, as strait wan run places the ranks (the tuner's clustering of noisy
    // loopback pairs may split a site).
    for (int i = 0; i < r.ranks; ++i) {
      r.links.site[static_cast<std::size_t>(i)] = i / setup.wan_ranks_per_site;
    }
  }
  if (!setup.site_link.empty()) apply_site_link(r.links, setup.site_link);
  std::vector<std::string> codecs = r.codecs;
  for (const auto& c : r.outer_codecs) {
    if (std::find(codecs.begin(), codecs.end(), c) == codecs.end()) codecs.push_back(c);
  }
  changed |= train::measure_missing(
      profile, r.model, r.threads, train::candidate_microbatch_sizes(r), codecs, setup.offload_dir);
  if (changed) profile.save(setup.profile_path);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_costs(const train::PlanRequest& r, const train::PlanProfile& p) {
  const auto& shape = p.shapes.at(train::shape_key(r.model, r.threads));
  fmt::print("costs ({} threads per rank, {} cores; profile: {}):\n", r.threads, p.cores,
             p.notes.count("compute") > 0 ? p.notes.at("compute") : "");
  fmt::print("  {:>3} {:>27} {:>8} {:>27} {:>27} {:>10}\n", "b", "block F/B/W ms", "fused B",
             "+first (embedding) F/B/W", "+last (head) F/B/W", "stash/blk");
  for (const auto& [b, c] : shape.sizes) {
    fmt::print(
        "  {:>3} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} "
        "{:>8.3f} {:>8.3f} {:>7.2f}MiB\n",
        b, c.block.f * 1e3, c.block.b * 1e3, c.block.w * 1e3, c.block.fused * 1e3, c.first.f * 1e3,
        c.first.b * 1e3, c.first.w * 1e3, c.last.f * 1e3, c.last.b * 1e3, c.last.w * 1e3,
        c.block_stash / (1 << 20));
  }
  fmt::print("  AdamW {:.2f} ns/parameter ({})\n", shape.adamw_s_per_param * 1e9,
             p.notes.count("adamw") > 0 ? p.notes.at("adamw") : "");
  fmt::print("  RAM copy {:.2f} GB/s ({}); disk {} write {:.0f} MB/s, read {:.0f} MB/s ({})\n",
             p.memcpy_bytes_per_s / 1e9, p.notes.count("memcpy") > 0 ? p.notes.at("memcpy") : "",
             p.disk_dir, p.disk_write_bytes_per_s / 1e6, p.disk_read_bytes_per_s / 1e6,
             p.notes.count("disk") > 0 ? p.notes.at("disk") : "");
  std::string codecs;
  for (const auto& [name, c] : p.codecs) {
    codecs += fmt::format(" {} {:.2f}+{:.2f} ns/elem {:.3g} B/elem;", name,
                          c.encode_s_per_elem * 1e9, c.decode_s_per_elem * 1e9, c.bytes_per_elem);
  }
  fmt::print("  codecs (encode+decode_add):{} ({})\n", codecs,
             p.notes.count("codecs") > 0 ? p.notes.at("codecs") : "");
  double lat_lo = 1e30, lat_hi = 0, bw_lo = 1e30, bw_hi = 0;
  for (int i = 0; i < r.ranks; ++i) {
    for (int j = 0; j < r.ranks; ++j) {
      if (i == j) continue;
      const auto a = static_cast<std::size_t>(i), b = static_cast<std::size_t>(j);
      lat_lo = std::min(lat_lo, r.links.latency_s[a][b]);
      lat_hi = std::max(lat_hi, r.links.latency_s[a][b]);
      bw_lo = std::min(bw_lo, r.links.bandwidth[a][b]);
      bw_hi = std::max(bw_hi, r.links.bandwidth[a][b]);
    }
  }
  std::set<int> sites(r.links.site.begin(), r.links.site.end());
  fmt::print("  links: latency {:.1f}-{:.1f} us, bandwidth {:.0f}-{:.0f} MB/s, {} site(s) ({})\n",
             lat_lo * 1e6, lat_hi * 1e6, bw_lo / 1e6, bw_hi / 1e6, sites.size(), r.links.source);
  if (!r.rank_speed.empty()) {
    fmt::print("  rank speed (x the profile's compute): {} (--rank-speed / --site-speed)\n",
               fmt::join(r.rank_speed, ","));
  }
  const auto l = p.learned.find(train::learned_key(r.ranks, r.threads, r.site_count()));
  if (l != p.learned.end() && l->second.runs > 0) {
    const auto& x = l->second;
    fmt::print("  learned from {} runs: {} ({})\n", x.runs, describe_learned(x), x.source);
  } else {
    fmt::print(
        "  learned: nothing yet (strait plan --validate K refines these); memory beyond the "
        "model: {} (fitted on machine A)\n",
        learned_memory(train::default_learned(r.site_count())));
  }
}

std::string learned_memory(const train::Learned& l) {
  return fmt::format(
      "{:+.1f} MiB, pipelines {:+.1f}, {:+.1f} per model stage, {:+.1f} with nvme, {:+.1f} with "
      "cpu activation offload",
      l.memory_extra_bytes / train::kMiB, l.memory_extra_pipeline_bytes / train::kMiB,
      l.memory_extra_per_stage_bytes / train::kMiB, l.memory_extra_nvme_bytes / train::kMiB,
      l.memory_extra_cpu_bytes / train::kMiB);
}

std::string describe_learned(const train::Learned& l) {
  return fmt::format(
      "{:.2f} effective cores, waiting load {:.1f}, step x{:.3f}, send {:.1f} us, recv {:.1f} us, "
      "latency {:.1f} us, memory {}",
      l.effective_cores, l.wait_load, l.step_scale, l.send_s * 1e6, l.recv_s * 1e6,
      l.latency_s * 1e6, learned_memory(l));
}

void print_plans(const std::vector<train::ScoredPlan>& plans, int top) {
  fmt::print("{:>3}  {:<50} {:>9} {:>9} {:>9} {:>9}  {:<10} {}\n", "#", "plan", "step ms",
             "tokens/s", "peak MiB", "xsite MiB", "bottleneck", "compute/bubble/link/disk ms");
  const int n = std::min<int>(top, static_cast<int>(plans.size()));
  for (int i = 0; i < n; ++i) {
    const auto& x = plans[static_cast<std::size_t>(i)].predicted;
    fmt::print(
        "{:>3}  {:<50} {:>9.1f} {:>9.0f} {:>9.1f} {:>9.2f}  {:<10} {:.1f}/{:.1f}/{:.1f}/{:.1f}\n",
        i + 1, plans[static_cast<std::size_t>(i)].plan.describe(), x.step_s * 1e3, x.tokens_per_s,
        x.peak_memory / (1 << 20), x.cross_site_bytes / (1 << 20), x.bottleneck, x.compute_s * 1e3,
        x.bubble_s * 1e3, x.link_s * 1e3, x.disk_s * 1e3);
  }
  if (!plans.empty() && !train::identity_placement(plans[0].plan.placement)) {
    const train::Plan& p = plans[0].plan;
    std::string slots;
    for (int k = 0; k < p.replicas; ++k) {
      for (int s = 0; s < p.stages; ++s) {
        slots +=
            fmt::format(" r{}s{}->{}", k, s, train::placement_rank(p.placement, p.stages, k, s));
      }
    }
    fmt::print("placement of #1 (replica r stage s -> world rank):{}\n", slots);
  }
  if (plans.size() > 1) {
    fmt::print("why #1 beat #2: {}\n", train::why_better(plans[0], plans[1]));
  }
}

train::RunMeasurement measure_plan(const train::Plan& plan, const train::PlanRequest& r,
                                   const PlanSetup& setup, int steps, const std::string& tag) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("strait-plan-{}-{}", ::getpid(), tag);
  std::filesystem::create_directories(dir);
  const int run_steps = std::max(steps, plan.outer_steps + 2);
  std::vector<std::string> argv = {"train"};
  for (const auto& a : train::plan_train_args(plan)) argv.push_back(a);
  const std::vector<std::string> rest = {"--layers",
                                         std::to_string(r.model.layers),
                                         "--dim",
                                         std::to_string(r.model.dim),
                                         "--heads",
                                         std::to_string(r.model.heads),
                                         "--ctx",
                                         std::to_string(r.model.ctx),
                                         "--steps",
                                         std::to_string(run_steps),
                                         "--log-every",
                                         "1000",
                                         "--eval-sequences",
                                         "1",
                                         "--sample-bytes",
                                         "0",
                                         "--codec-warmup",
                                         "0",
                                         "--offload-dir",
                                         setup.offload_dir.string(),
                                         "--metrics",
                                         (dir / "metrics.jsonl").string(),
                                         "--trace",
                                         (dir / "trace.json").string(),
                                         "--timeout",
                                         "120"};
  argv.insert(argv.end(), rest.begin(), rest.end());
  if (!setup.data.empty()) argv.insert(argv.end(), {"--data", setup.data});
  argv = job_argv(setup, argv);
  train::RunMeasurement m;
  const int status = run_logged(argv, dir / "log.txt", 400);
  if (status != 0) {
    const std::string log = slurp(dir / "log.txt");
    m.source =
        fmt::format("exit {}: {}", status, log.substr(log.size() > 300 ? log.size() - 300 : 0));
    return m;
  }
  std::vector<double> step_s;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    const auto type = j.value("type", "");
    if (type == "step" && j.at("step").get<int>() >= 3) step_s.push_back(j.at("seconds"));
    if (type == "memory") m.peak_memory = j.at("peak_rank_growth_bytes").get<double>();
  }
  m.step_s = med(step_s);
  const auto trace = sched::parse_chrome_trace(slurp(dir / "trace.json"));
  std::set<std::int64_t> steps_seen;
  for (const auto& rec : trace.records) steps_seen.insert(rec.step);
  const sched::Schedule s = train::plan_schedule(plan);
  const auto groups = sched::data_parallel_sync_groups(plan.stages, true);
  std::vector<double> compute, send, recv, lat;
  int k = 0;
  for (const auto st : steps_seen) {
    if (k++ < 2) continue;  // warm-up steps
    const auto costs =
        sched::measured_stage_costs(s, sched::measured_timeline(trace, st, plan.stages), groups);
    double c = 0, sd = 0, rv = 0, lt = 0;
    for (const auto& x : costs) {
      c += x.compute.f + x.compute.b + x.compute.w;
      sd += x.send;
      rv += x.recv;
      lt += x.link.latency;
    }
    const double n = static_cast<double>(costs.size());
    compute.push_back(c / n * 1e-6);  // the trace is in microseconds
    if (costs.size() > 1) {
      send.push_back(sd / n * 1e-6);
      recv.push_back(rv / n * 1e-6);
      lat.push_back(lt / (n - 1) * 1e-6);
    }
  }
  m.compute_per_stage_s = med(compute);
  m.send_s = med(send);
  m.recv_s = med(recv);
  m.latency_s = med(lat);
  m.source = fmt::format("strait plan --validate (strait train, {} steps)", run_steps);
  std::filesystem::remove_all(dir);
  return m;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const auto ranks = [](const std::vector<double>& v) {
    std::vector<std::size_t> idx(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (std::size_t i = 0; i < idx.size();) {
      std::size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (std::size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j) + 1;
      i = j + 1;
    }
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += ra[i] / n;
    mb += rb[i] / n;
  }
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

}  // namespace strait::tools
