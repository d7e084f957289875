#include "train/plan_profile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <thread>

#include "comm/compress/codec.h"
#include "comm/compress/codec_factory.h"
#include "core/error.h"
#include "core/fd.h"
#include "kernels/adamw.h"
#include "kernels/gemm.h"

namespace strait::train {
namespace {

using Clock = std::chrono::steady_clock;
using sched::GptConfig;
using sched::LayerRange;
using sched::StageModel;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <class Fn>
double median_seconds(int reps, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

nlohmann::json fbw_json(const FbwSeconds& c) {
  return {c.f, c.b, c.w, c.fused};
}
FbwSeconds fbw_from(const nlohmann::json& j) {
  // Profiles written before the fused backward was measured hold three.
  return {j.at(0).get<double>(), j.at(1).get<double>(), j.at(2).get<double>(),
          j.size() > 3 ? j.at(3).get<double>() : 0.0};
}

// One stage's F, B, W and fused-backward seconds (fastest of reps after one warm-up) and its slot's
// stash bytes.
struct StageTiming {
  FbwSeconds t;
  double stash = 0;
};

StageTiming time_stage(const GptConfig& cfg, LayerRange range, int b, int reps) {
  StageModel<float> m(cfg, range, b, 2, 1);
  const int T = cfg.ctx;
  const auto n = static_cast<std::size_t>(b) * static_cast<std::size_t>(T);
  std::mt19937 rng(7);
  std::vector<std::int32_t> tokens(n), targets(n);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng() % 256U);
    targets[i] = static_cast<std::int32_t>(rng() % 256U);
  }
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<float> in(n * static_cast<std::size_t>(cfg.dim)), out(in.size()), din(in.size()),
      dout(in.size());
  for (auto& x : in) x = normal(rng);
  for (auto& x : dout) x = 0.01F * normal(rng);
  const bool first = m.is_first();
  const bool last = m.is_last();
  const auto fwd = [&](int slot) {
    if (first) {
      m.forward(slot, tokens.data(), b, T, out.data());
    } else if (last) {
      (void)m.forward(slot, in.data(), targets.data(), b, T);
    } else {
      m.forward(slot, in.data(), b, T, out.data());
    }
  };
  const float* dptr = last ? nullptr : dout.data();
  float* dinptr = first ? nullptr : din.data();
  StageTiming r;
  std::vector<double> f, bi, w, fused;
  for (int i = 0; i <= reps; ++i) {  // the first round warms up and is dropped
    auto t0 = Clock::now();
    fwd(0);
    const double tf = seconds_since(t0);
    t0 = Clock::now();
    m.backward_input(0, dptr, 1.0F, dinptr);
    const double tb = seconds_since(t0);
    fwd(1);
    t0 = Clock::now();
    m.backward(1, dptr, 1.0F, dinptr);
    const double tbw = seconds_since(t0);
    // W after another microbatch's work, as zero-bubble schedules run it: the gradients B saved
    // for it are read back cold (docs/results/training.md: the split costs ~4% there).
    t0 = Clock::now();
    m.backward_weight(0);
    const double tw = seconds_since(t0);
    if (i == 0) continue;
    f.push_back(tf);
    bi.push_back(tb);
    w.push_back(tw);
    fused.push_back(tbw);
  }
  // The fastest repetition: what a step would cost undisturbed by other processes on the cores
  // (their load is learned from validation runs, train/planner.h).
  const auto low = [](const std::vector<double>& v) {
    return *std::min_element(v.begin(), v.end());
  };
  r.t = {low(f), low(bi), low(w), low(fused)};
  r.stash = static_cast<double>(m.stash_bytes());
  return r;
}

FbwSeconds minus(const FbwSeconds& a, const FbwSeconds& b) {
  return {std::max(0.0, a.f - b.f), std::max(0.0, a.b - b.b), std::max(0.0, a.w - b.w),
          std::max(0.0, a.fused - b.fused)};
}

MicrobatchCosts measure_microbatch(const GptConfig& shape, int b) {
  GptConfig cfg = shape;
  cfg.layers = 3;  // first, middle and last stage of one block each
  const int reps = 5;
  const StageTiming first = time_stage(cfg, {0, 1}, b, reps);
  const StageTiming mid = time_stage(cfg, {1, 2}, b, reps);
  const StageTiming last = time_stage(cfg, {2, 3}, b, reps);
  MicrobatchCosts c;
  c.block = mid.t;
  c.first = minus(first.t, mid.t);
  c.last = minus(last.t, mid.t);
  c.block_stash = mid.stash;
  c.first_stash = std::max(0.0, first.stash - mid.stash);
  c.last_stash = std::max(0.0, last.stash - mid.stash);
  c.reps = reps;
  return c;
}

double measure_adamw(unsigned threads) {
  const std::size_t n = std::size_t{1} << 20;
  std::vector<float> p(n, 0.5F), g(n, 0.01F), m(n, 0.0F), v(n, 0.0F);
  kernels::ParallelAdamW opt(threads);
  kernels::AdamWHyper h;
  std::int64_t step = 1;
  const double s = median_seconds(5, [&] { opt.step(p, g, m, v, h, step++); });
  return s / static_cast<double>(n);
}

double measure_memcpy() {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<std::byte> a(n, std::byte{1}), b(n);
  const double s = median_seconds(5, [&] { std::memcpy(b.data(), a.data(), n); });
  return static_cast<double>(n) / s;
}

// Write then read 64 MiB under dir with O_DIRECT (buffered when the file system refuses it),
// fdatasync'd: the offload disk's bandwidth.
std::pair<double, double> measure_disk(const std::filesystem::path& dir) {
  const std::size_t n = std::size_t{64} << 20;
  const std::size_t piece = std::size_t{4} << 20;
  const auto path = dir / fmt::format("strait-plan-probe-{}", ::getpid());
  auto buf = std::unique_ptr<std::byte, decltype(&std::free)>(
      static_cast<std::byte*>(std::aligned_alloc(4096, piece)), &std::free);
  if (!buf) throw Error(ErrorCode::Internal, "plan: out of memory for the disk probe");
  std::memset(buf.get(), 0x5a, piece);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    throw Error(ErrorCode::Io, fmt::format("plan: cannot write the disk probe {}: {} (pass "
                                           "--offload-dir a writable directory)",
                                           path.string(), std::strerror(errno)));
  }
  const Fd file(fd);
  std::filesystem::remove(path);
  const auto io = [&](bool write) {
    for (std::size_t off = 0; off < n; off += piece) {
      const auto r = write ? ::pwrite(file.get(), buf.get(), piece, static_cast<off_t>(off))
                           : ::pread(file.get(), buf.get(), piece, static_cast<off_t>(off));
      if (r != static_cast<ssize_t>(piece)) {
        throw Error(ErrorCode::Io,
                    fmt::format("plan: disk probe {} failed at {}: {}", write ? "write" : "read",
                                off, std::strerror(errno)));
      }
    }
    if (write) ::fdatasync(file.get());
  };
  auto t0 = Clock::now();
  io(true);
  const double w = static_cast<double>(n) / seconds_since(t0);
  t0 = Clock::now();
  io(false);
  const double r = static_cast<double>(n) / seconds_since(t0);
  return {w, r};
}

CodecCosts measure_codec(const std::string& name) {
  auto codec = comm::make_codec(name);
  const std::size_t n = std::size_t{1} << 20;
  std::vector<float> in(n), out(n, 0.0F);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (auto& x : in) x = normal(rng);
  std::vector<std::byte> wire(codec->encoded_bytes(n));
  CodecCosts c;
  c.encode_s_per_elem = median_seconds(3, [&] { codec->encode(in, wire); }) / n;
  c.decode_s_per_elem = median_seconds(3, [&] { codec->decode_add(wire, out); }) / n;
  c.bytes_per_elem = static_cast<double>(wire.size()) / static_cast<double>(n);
  return c;
}

}  // namespace

std::string shape_key(const GptConfig& m, int threads) {
  return fmt::format("dim={},heads={},ctx={},vocab={},threads={}", m.dim, m.heads, m.ctx, m.vocab,
                     threads);
}

std::string learned_key(int world, int threads, int sites) {
  return fmt::format("world={},threads={},sites={}", world, threads, sites);
}

nlohmann::json PlanProfile::to_json() const {
  nlohmann::json j;
  j["version"] = 1;
  j["machine"] = {{"cores", cores},
                  {"memcpy_bytes_per_s", memcpy_bytes_per_s},
                  {"disk_write_bytes_per_s", disk_write_bytes_per_s},
                  {"disk_read_bytes_per_s", disk_read_bytes_per_s},
                  {"disk_dir", disk_dir}};
  for (const auto& [key, s] : shapes) {
    nlohmann::json js;
    js["adamw_s_per_param"] = s.adamw_s_per_param;
    for (const auto& [b, c] : s.sizes) {
      js["sizes"][std::to_string(b)] = {{"block", fbw_json(c.block)},
                                        {"first", fbw_json(c.first)},
                                        {"last", fbw_json(c.last)},
                                        {"block_stash", c.block_stash},
                                        {"first_stash", c.first_stash},
                                        {"last_stash", c.last_stash},
                                        {"reps", c.reps}};
    }
    j["shapes"][key] = js;
  }
  for (const auto& [name, c] : codecs) {
    j["codecs"][name] = {{"encode_s_per_elem", c.encode_s_per_elem},
                         {"decode_s_per_elem", c.decode_s_per_elem},
                         {"bytes_per_elem", c.bytes_per_elem}};
  }
  for (const auto& [world, l] : links) {
    j["links"][std::to_string(world)] = {{"latency_s", l.latency_s},
                                         {"bandwidth", l.bandwidth},
                                         {"site", l.site},
                                         {"source", l.source}};
  }
  for (const auto& [key, l] : learned) {
    j["learned"][key] = {{"effective_cores", l.effective_cores},
                         {"wait_load", l.wait_load},
                         {"step_scale", l.step_scale},
                         {"send_s", l.send_s},
                         {"recv_s", l.recv_s},
                         {"latency_s", l.latency_s},
                         {"memory_extra_bytes", l.memory_extra_bytes},
                         {"memory_extra_pipeline_bytes", l.memory_extra_pipeline_bytes},
                         {"memory_extra_per_stage_bytes", l.memory_extra_per_stage_bytes},
                         {"memory_extra_nvme_bytes", l.memory_extra_nvme_bytes},
                         {"memory_extra_cpu_bytes", l.memory_extra_cpu_bytes},
                         {"runs", l.runs},
                         {"source", l.source}};
  }
  j["notes"] = notes;
  return j;
}

PlanProfile PlanProfile::from_json(const nlohmann::json& j) {
  PlanProfile p;
  const auto& m = j.at("machine");
  p.cores = m.at("cores").get<int>();
  p.memcpy_bytes_per_s = m.at("memcpy_bytes_per_s").get<double>();
  p.disk_write_bytes_per_s = m.at("disk_write_bytes_per_s").get<double>();
  p.disk_read_bytes_per_s = m.at("disk_read_bytes_per_s").get<double>();
  p.disk_dir = m.at("disk_dir").get<std::string>();
  if (j.contains("shapes")) {
    for (const auto& [key, js] : j.at("shapes").items()) {
      ShapeCosts s;
      s.adamw_s_per_param = js.at("adamw_s_per_param").get<double>();
      if (js.contains("sizes")) {
        for (const auto& [b, c] : js.at("sizes").items()) {
          MicrobatchCosts mc;
          mc.block = fbw_from(c.at("block"));
          mc.first = fbw_from(c.at("first"));
          mc.last = fbw_from(c.at("last"));
          mc.block_stash = c.at("block_stash").get<double>();
          mc.first_stash = c.at("first_stash").get<double>();
          mc.last_stash = c.at("last_stash").get<double>();
          mc.reps = c.at("reps").get<int>();
          s.sizes[std::stoi(b)] = mc;
        }
      }
      p.shapes[key] = s;
    }
  }
  if (j.contains("codecs")) {
    for (const auto& [name, c] : j.at("codecs").items()) {
      p.codecs[name] = {c.at("encode_s_per_elem").get<double>(),
                        c.at("decode_s_per_elem").get<double>(),
                        c.at("bytes_per_elem").get<double>()};
    }
  }
  if (j.contains("links")) {
    for (const auto& [world, l] : j.at("links").items()) {
      PlanLinks pl;
      pl.latency_s = l.at("latency_s").get<std::vector<std::vector<double>>>();
      pl.bandwidth = l.at("bandwidth").get<std::vector<std::vector<double>>>();
      pl.site = l.at("site").get<std::vector<int>>();
      pl.source = l.at("source").get<std::string>();
      p.links[std::stoi(world)] = pl;
    }
  }
  if (j.contains("learned")) {
    for (const auto& [key, l] : j.at("learned").items()) {
      Learned x;
      x.step_scale = l.at("step_scale").get<double>();
      x.effective_cores = l.value("effective_cores", 0.0);
      x.wait_load = l.value("wait_load", 0.0);
      x.send_s = l.at("send_s").get<double>();
      x.recv_s = l.at("recv_s").get<double>();
      x.latency_s = l.at("latency_s").get<double>();
      x.memory_extra_bytes = l.at("memory_extra_bytes").get<double>();
      x.memory_extra_pipeline_bytes = l.value("memory_extra_pipeline_bytes", 0.0);
      x.memory_extra_per_stage_bytes = l.value("memory_extra_per_stage_bytes", 0.0);
      x.memory_extra_nvme_bytes = l.value("memory_extra_nvme_bytes", 0.0);
      x.memory_extra_cpu_bytes = l.value("memory_extra_cpu_bytes", 0.0);
      x.runs = l.at("runs").get<int>();
      x.source = l.at("source").get<std::string>();
      p.learned[key] = x;
    }
  }
  if (j.contains("notes")) p.notes = j.at("notes").get<std::map<std::string, std::string>>();
  return p;
}

PlanProfile PlanProfile::load(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return {};
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return from_json(nlohmann::json::parse(ss.str()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("plan profile {} is malformed ({}); delete it to profile again",
                            path.string(), e.what()));
  }
}

void PlanProfile::save(const std::filesystem::path& path) const {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << to_json().dump(1) << '\n';
    if (!out) throw Error(ErrorCode::Io, fmt::format("cannot write the plan profile {}", tmp));
  }
  std::filesystem::rename(tmp, path);
}

double process_memory_bytes(bool peak) {
  std::ifstream in("/proc/self/status");
  const std::string key = peak ? "VmHWM:" : "VmRSS:";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return 1024.0 * std::stod(line.substr(key.size()));  // kB
  }
  return 0;
}

bool measure_missing(PlanProfile& p, const GptConfig& model, int threads,
                     const std::vector<int>& sizes, const std::vector<std::string>& codecs,
                     const std::filesystem::path& disk_dir) {
  bool measured = false;
  if (p.cores == 0) {
    p.cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
    p.memcpy_bytes_per_s = measure_memcpy();
    const auto [w, r] = measure_disk(disk_dir);
    p.disk_write_bytes_per_s = w;
    p.disk_read_bytes_per_s = r;
    p.disk_dir = disk_dir.string();
    p.notes["memcpy"] = "median of 5 memcpy of 64 MiB";
    p.notes["disk"] = "64 MiB in 4 MiB pwrite + fdatasync, then pread, O_DIRECT where allowed";
    measured = true;
  }
  for (const auto& c : codecs) {
    if (p.codecs.count(c) > 0) continue;
    p.codecs[c] = measure_codec(c);
    p.notes["codecs"] = "median of 3 encode / decode_add of 2^20 normal floats, one thread";
    measured = true;
  }
  ShapeCosts& s = p.shapes[shape_key(model, threads)];
  kernels::set_gemm_threads(threads);
  if (s.adamw_s_per_param == 0) {
    s.adamw_s_per_param = measure_adamw(static_cast<unsigned>(threads));
    p.notes["adamw"] = "median of 5 ParallelAdamW steps on 2^20 parameters at the rank's threads";
    measured = true;
  }
  for (const int b : sizes) {
    // Sizes profiled before the fused backward was measured are measured again.
    if (s.sizes.count(b) > 0 && s.sizes.at(b).block.fused > 0) continue;
    s.sizes[b] = measure_microbatch(model, b);
    p.notes["compute"] =
        "StageModel F, backward_input, backward_weight and the fused backward of a first, middle "
        "and last one-block stage, fastest of 5 after a warm-up, at the rank's GEMM threads";
    measured = true;
  }
  return measured;
}

}  // namespace strait::train
