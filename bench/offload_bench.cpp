#include "bench/offload_bench.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_options.h"
#include "core/error.h"
#include "kernels/adamw.h"
#include "offload/errno_text.h"
#include "offload/io_engine.h"
#include "offload/io_engine_factory.h"
#include "offload/pinned_buffer.h"
#include "offload/remove_on_exit.h"
#include "offload/uring_engine.h"

namespace strait::bench {
namespace {

using offload::IoEngine;
using offload::IoEngineKind;
using offload::IoEngineOptions;
using offload::IoFile;
using offload::IoOp;
using offload::IoRequest;
using offload::OpenMode;
using offload::PinnedBuffer;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir = "/var/tmp";
  std::string file;  // empty: a new file in dir, removed at exit
  std::size_t file_bytes = std::size_t{4} << 30;
  std::size_t min_block = 64 << 10;
  std::size_t max_block = 8 << 20;
  std::vector<std::size_t> blocks;  // when given, instead of min_block .. max_block
  std::vector<unsigned> depths = {1, 2, 4, 8, 16, 32, 64, 128};
  std::vector<std::string> engines = {"uring", "uring-fixed", "posix"};
  std::vector<std::string> ops = {"read", "write"};
  std::size_t point_bytes = std::size_t{1} << 30;
  int repeat = 1;
  std::size_t adamw_params = 16 << 20;
  int adamw_steps = 5;
  std::string json_path;
};

// The benchmark file's path while strait-bench owns it, for the signal handler: Ctrl-C must not
// leave gigabytes behind. A fixed array, since the handler may only call async-signal-safe code.
std::array<char, 4096> g_owned_path{};

extern "C" void remove_and_reraise(int sig) {
  if (g_owned_path[0] != '\0') ::unlink(g_owned_path.data());
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void own_path(const std::string& path) {
  if (path.size() >= g_owned_path.size()) {
    throw Error(ErrorCode::InvalidArgument, fmt::format("--file {} is too long", path));
  }
  std::copy(path.begin(), path.end(), g_owned_path.begin());
  g_owned_path[path.size()] = '\0';
  struct sigaction sa {};
  sa.sa_handler = remove_and_reraise;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

std::string fs_name(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case EXT4_SUPER_MAGIC: return "ext4";  // also ext2/ext3
    case XFS_SUPER_MAGIC: return "xfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case TMPFS_MAGIC: return "tmpfs";
    case RAMFS_MAGIC: return "ramfs";
    case NFS_SUPER_MAGIC: return "nfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    default: return fmt::format("f_type {:#x}", static_cast<unsigned long>(s.f_type));
  }
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown";
  return fmt::format("{} {} {}", one, five, fifteen);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Creates the benchmark file (preallocated, so a full disk fails now) and writes it once through
// O_DIRECT so reads find written blocks and writes overwrite allocated ones, as fio's laid-out
// files do.
void create_file(const std::string& path, std::size_t bytes) {
  auto choice = offload::make_io_engine(std::filesystem::absolute(path).parent_path());
  IoEngine& engine = *choice.engine;
  const IoFile file = engine.open(path, OpenMode::CreateExclusive);
  offload::preallocate(file, bytes);
  const std::size_t block = 8 << 20;
  const PinnedBuffer buffer(4 * block);
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    buffer.data()[i] = static_cast<std::byte>((i * 2654435761U) >> 13);  // not compressible
  }
  std::vector<IoRequest> writes;
  for (std::size_t off = 0; off < bytes; off += block) {
    const std::size_t len = std::min(block, bytes - off);
    writes.push_back(
        IoRequest::write(file, off, buffer.bytes().subspan(writes.size() % 4 * block, len)));
    if (writes.size() == 64 || off + len >= bytes) {
      engine.run(writes);
      writes.clear();
    }
  }
  if (::fdatasync(file.fd()) != 0) {
    throw Error(ErrorCode::Io, fmt::format("fdatasync {}: {}", path, offload::errno_text(errno)));
  }
}

// Drops the file's pages from the page cache, so a buffered read measures the disk.
void drop_cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Point {
  std::string engine;
  std::string op;
  std::size_t block = 0;
  unsigned depth = 0;
  std::size_t bytes = 0;
  double seconds = 0;
  double gbs = 0;
  bool fixed_buffers = false;
  bool fixed_files = false;
};

Point run_point(const Options& o, const std::string& path, const std::string& engine_name, IoOp op,
                std::size_t block, unsigned depth) {
  IoEngineOptions io;
  io.queue_depth = depth;
  io.threads = depth;
  const bool fixed = engine_name == "uring-fixed";
  io.register_buffers = fixed;
  io.register_files = fixed;
  io.force = engine_name == "posix" ? IoEngineKind::Posix : IoEngineKind::Uring;
  auto choice = offload::make_io_engine(std::filesystem::absolute(path).parent_path(), io);
  IoEngine& engine = *choice.engine;
  const IoFile file = engine.open(path, OpenMode::Existing);
  const std::uint64_t file_size = file.size() / block * block;
  if (file_size == 0) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("{} ({} bytes) is smaller than one block of {}", path, file.size(), block));
  }
  // One buffer per request in flight, each registered on its own (io_uring caps a registered
  // buffer at 1 GiB). Requests k and k + depth share one: the content is not checked here.
  const PinnedBuffer memory(std::size_t{depth} * block);
  std::vector<std::span<std::byte>> slices;
  for (unsigned i = 0; i < depth; ++i) slices.push_back(memory.bytes().subspan(i * block, block));
  engine.register_buffers(slices);
  const IoFile* const files[] = {&file};
  engine.register_files(files);

  const std::size_t count = std::max<std::size_t>(1, o.point_bytes / block);
  std::vector<IoRequest> requests;
  requests.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint64_t offset = (std::uint64_t{k} * block) % file_size;
    const std::span<std::byte> buffer = slices[k % depth];
    requests.push_back(op == IoOp::Read ? IoRequest::read(file, offset, buffer)
                                        : IoRequest::write(file, offset, buffer));
  }
  // Warm-up: one request per slot (first touches, ring setup), untimed.
  engine.run(std::span(requests).first(std::min<std::size_t>(depth, count)));
  const bool posix = engine.kind() == IoEngineKind::Posix;
  if (posix && op == IoOp::Read) drop_cached_pages(path);
  const auto start = Clock::now();
  engine.run(requests);
  if (posix && op == IoOp::Write && ::fdatasync(file.fd()) != 0) {
    throw Error(ErrorCode::Io, fmt::format("fdatasync {}: {}", path, offload::errno_text(errno)));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (posix && op == IoOp::Write) drop_cached_pages(path);  // the next point starts cold
  Point p{.engine = engine_name,
          .op = op == IoOp::Read ? "read" : "write",
          .block = block,
          .depth = depth,
          .bytes = count * block,
          .seconds = seconds,
          .gbs = static_cast<double>(count * block) / seconds / 1e9};
  if (const auto* uring = dynamic_cast<const offload::UringEngine*>(&engine)) {
    p.fixed_buffers = uring->buffers_registered();
    p.fixed_files = uring->files_registered();
  }
  return p;
}

struct AdamWResult {
  std::size_t params = 0;
  int steps = 0;
  double seconds = 0;  // per step
  double params_per_s = 0;
  double gbs = 0;  // memory traffic: p, g, m, v read and p, m, v written, fp32
};

AdamWResult time_adamw(std::size_t n, int steps) {
  std::vector<float> p(n), g(n), m(n, 0.0F), v(n, 0.0F);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(i % 1000) * 1e-3F - 0.5F;
    g[i] = static_cast<float>((i * 7) % 1000) * 1e-4F - 0.05F;
  }
  const kernels::AdamWHyper hyper;
  kernels::adamw_step(p, g, m, v, hyper, 1);  // warm-up: first touches
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) kernels::adamw_step(p, g, m, v, hyper, s + 2);
  const double per_step = std::chrono::duration<double>(Clock::now() - start).count() / steps;
  // Keep the result observable so the calls cannot be dropped.
  if (!std::isfinite(std::accumulate(p.begin(), p.begin() + std::min<std::size_t>(n, 64), 0.0F))) {
    throw Error(ErrorCode::Internal, "adamw produced a non-finite parameter");
  }
  return {.params = n,
          .steps = steps,
          .seconds = per_step,
          .params_per_s = static_cast<double>(n) / per_step,
          .gbs = static_cast<double>(n) * 7 * sizeof(float) / per_step / 1e9};
}

void validate(const Options& o) {
  for (const auto& e : o.engines) {
    if (e != "uring" && e != "uring-fixed" && e != "posix") {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--engines: unknown engine '{}': use uring, uring-fixed, posix", e));
    }
  }
  for (const auto& op : o.ops) {
    if (op != "read" && op != "write") {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("--ops: unknown operation '{}': use read, write", op));
    }
  }
  const auto check_block = [](std::size_t b, const char* flag) {
    if (b < 4096 || b % 4096 != 0 || b > offload::kMaxTransferBytes) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} {}: a block must be a multiple of 4 KiB (O_DIRECT) up to 1 GiB",
                              flag, b));
    }
  };
  check_block(o.min_block, "-b");
  check_block(o.max_block, "-e");
  for (const std::size_t b : o.blocks) check_block(b, "--blocks");
  for (const unsigned d : o.depths) {
    if (d == 0 || d > 4096) {
      throw Error(ErrorCode::InvalidArgument, fmt::format("--qd {}: give 1 .. 4096", d));
    }
  }
  if (o.file_bytes < std::max(o.max_block, o.blocks.empty() ? 0 : std::ranges::max(o.blocks))) {
    throw Error(ErrorCode::InvalidArgument, "--file-size must hold at least one largest block");
  }
  if (o.repeat < 1 || o.adamw_steps < 1) {
    throw Error(ErrorCode::InvalidArgument, "--repeat and --adamw-steps must be at least 1");
  }
}

int run(const Options& o) {
  validate(o);
  const auto blocks = o.blocks.empty() ? size_list(o.min_block, o.max_block, 2) : o.blocks;
  std::ofstream json;
  if (!o.json_path.empty()) {
    json.open(o.json_path);
    if (!json) {
      throw Error(ErrorCode::Io, fmt::format("cannot write --json {}: check that its folder "
                                             "exists and is writable",
                                             o.json_path));
    }
  }
  const bool io = !o.engines.empty() && !o.ops.empty();
  std::string path = o.file;
  offload::RemoveOnExit remover;
  if (io) {
    offload::check_offload_dir(o.dir);
    if (path.empty()) {
      path = (std::filesystem::path(o.dir) / fmt::format("strait-bench-offload-{}.dat", ::getpid()))
                 .string();
    }
    if (!std::filesystem::exists(path)) {
      own_path(path);  // before the file exists: a Ctrl-C while it is written removes it too
      remover.reset(path);
      fmt::print("# creating {} ({} bytes) ...\n", path, o.file_bytes);
      std::fflush(stdout);
      create_file(path, o.file_bytes);
    }
  }
  struct stat st {};
  std::string where = fmt::format("{} ({})", o.dir, fs_name(o.dir));
  std::string alignment = "n/a";
  if (io && ::stat(path.c_str(), &st) == 0) {
    where += fmt::format(", device {}:{}", major(st.st_dev), minor(st.st_dev));
    try {
      const IoFile probe(path, OpenMode::Existing, /*direct=*/true);
      alignment = fmt::format("{} (offsets) / {} (memory) from {}", probe.alignment().offset,
                              probe.alignment().memory, to_string(probe.alignment().source));
    } catch (const Error& e) {
      alignment = fmt::format("no O_DIRECT: {}", e.what());
    }
  }
  fmt::print("# strait-bench offload: {}, file {} ({} bytes), {} per point, repeat {}\n", where,
             path.empty() ? "-" : path, io ? std::filesystem::file_size(path) : 0, o.point_bytes,
             o.repeat);
  fmt::print("# O_DIRECT alignment: {}\n", alignment);
  fmt::print("# host: {} CPUs, load average {}\n", std::thread::hardware_concurrency(),
             load_average());
  fmt::print(
      "# posix: buffered; reads start with the file's pages dropped, writes are timed to "
      "fdatasync\n#\n");
  fmt::print("{:>12} {:>6} {:>9} {:>5} {:>10} {:>9} {:>8}\n", "engine", "op", "block", "qd",
             "bytes", "time_s", "GB/s");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  for (int r = 0; r < o.repeat && io; ++r) {
    for (const auto& op : o.ops) {
      for (const std::size_t block : blocks) {
        for (const unsigned depth : o.depths) {
          for (const auto& engine : o.engines) {
            const Point p =
                run_point(o, path, engine, op == "read" ? IoOp::Read : IoOp::Write, block, depth);
            fmt::print("{:>12} {:>6} {:>8}K {:>5} {:>10} {:>9.3f} {:>8.3f}\n", p.engine, p.op,
                       p.block >> 10, p.depth, p.bytes, p.seconds, p.gbs);
            std::fflush(stdout);
            rows.push_back({{"engine", p.engine},
                            {"op", p.op},
                            {"block", p.block},
                            {"qd", p.depth},
                            {"bytes", p.bytes},
                            {"seconds", p.seconds},
                            {"gbs", p.gbs},
                            {"repeat", r},
                            {"fixed_buffers", p.fixed_buffers},
                            {"fixed_files", p.fixed_files}});
          }
        }
      }
    }
  }
  nlohmann::json adamw = nullptr;
  if (o.adamw_params > 0) {
    const AdamWResult a = time_adamw(o.adamw_params, o.adamw_steps);
    fmt::print(
        "#\n# CPU AdamW (kernels::adamw_step, one thread): {} params, {:.2f} ms per step, "
        "{:.1f} Mparams/s, {:.2f} GB/s of fp32 traffic (28 bytes per parameter)\n",
        a.params, a.seconds * 1e3, a.params_per_s / 1e6, a.gbs);
    adamw = {{"params", a.params},
             {"steps", a.steps},
             {"seconds_per_step", a.seconds},
             {"params_per_s", a.params_per_s},
             {"gbs", a.gbs}};
  }
  fmt::print("# load average after: {}\n", load_average());
  if (json.is_open()) {
    json << nlohmann::json{{"dir", o.dir},
                           {"fs", fs_name(o.dir)},
                           {"file", path},
                           {"alignment", alignment},
                           {"point_bytes", o.point_bytes},
                           {"load_after", load_average()},
                           {"rows", rows},
                           {"adamw", adamw}}
                .dump(2)
         << '\n';
    json.close();
    if (!json) throw Error(ErrorCode::Io, fmt::format("cannot write --json {}", o.json_path));
  }
  return 0;
}

int run_cli(std::span<char*> args) {
  CLI::App app{
      "strait-bench offload: sequential read/write GB/s of the offload I/O engines over block "
      "sizes and queue depths, and CPU AdamW throughput (see bench/offload_bench.h)"};
  app.footer(
      "Compare with fio on the same file: bench/compare_offload_io.sh. The file is created (and "
      "removed at exit, also on Ctrl-C) unless --file names one that exists.");
  Options o;
  std::string min_text = "64K";
  std::string max_text = "8M";
  std::string size_text = "4G";
  std::string point_text = "1G";
  std::string depths_text = "1,2,4,8,16,32,64,128";
  std::string engines_text = "uring,uring-fixed,posix";
  std::string ops_text = "read,write";
  std::string adamw_text = "16M";
  std::string blocks_text;
  app.add_option("--dir", o.dir, "Directory for the benchmark file")->capture_default_str();
  app.add_option("--file", o.file,
                 "Use this file (kept when it exists; else created and removed at exit)");
  app.add_option("--file-size", size_text, "Size of a created file (K, M, G)")
      ->capture_default_str();
  app.add_option("-b,--minblock", min_text, "Smallest block (request) size")->capture_default_str();
  app.add_option("-e,--maxblock", max_text, "Largest block size (doubling from -b)")
      ->capture_default_str();
  app.add_option("--blocks", blocks_text,
                 "Block sizes, comma-separated (instead of doubling from -b to -e)");
  app.add_option("--qd", depths_text, "Queue depths, comma-separated")->capture_default_str();
  app.add_option("--engines", engines_text, "uring, uring-fixed, posix (comma-separated)")
      ->capture_default_str();
  app.add_option("--ops", ops_text, "read, write (comma-separated)")->capture_default_str();
  app.add_option("--bytes", point_text, "Bytes moved per point")->capture_default_str();
  app.add_option("--repeat", o.repeat, "Run the whole sweep this many times")
      ->capture_default_str();
  app.add_option("--adamw-params", adamw_text, "Parameters for the AdamW timing (0: skip)")
      ->capture_default_str();
  app.add_option("--adamw-steps", o.adamw_steps, "Timed AdamW steps")->capture_default_str();
  app.add_option("--json", o.json_path, "Also write the points to this file");
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    o.min_block = parse_size(min_text);
    o.max_block = parse_size(max_text);
    o.file_bytes = parse_size(size_text);
    o.point_bytes = parse_size(point_text);
    o.adamw_params = parse_size(adamw_text);
    for (const auto& b : split_list(blocks_text)) o.blocks.push_back(parse_size(b));
    o.engines = split_list(engines_text);
    o.ops = split_list(ops_text);
    o.depths.clear();
    for (const auto& d : split_list(depths_text)) {
      try {
        o.depths.push_back(static_cast<unsigned>(std::stoul(d)));
      } catch (const std::exception&) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("--qd: '{}' is not a number; give e.g. 1,8,32,128", d));
      }
    }
    return run(o);
  } catch (const Error& e) {
    fmt::print(stderr, "strait-bench offload: {}\n", e.what());
    return e.code() == ErrorCode::InvalidArgument ? 2 : 1;
  }
}

}  // namespace

int offload_main(int argc, char** argv) noexcept {
  try {
    return run_cli(std::span(argv, static_cast<std::size_t>(argc)));
  } catch (const std::exception& e) {  // anything but strait::Error (run_cli reports those)
    std::fprintf(stderr, "strait-bench offload: %s\n", e.what());
    return 1;
  }
}

}  // namespace strait::bench
