// Every STRAIT_* variable, declared once (core/params.h). One central table rather than
// self-registering statics: those sit in static libraries, whose unreferenced objects the linker
// drops, and `strait info` and docs/environment.md must list every parameter. Sorted by name.
// Layers "tests", "scripts" and "python" are declared for the docs only: shell and Python read
// theirs themselves.
#include <algorithm>
#include <array>

#include "core/params.h"

namespace strait::params {
namespace {

using enum Type;

constexpr std::array kParams = {
    Param{"STRAIT_BENCH_DIR", Path, "/var/tmp", "",
          "Folder of the NVMe optimizer-offload micro-benchmark's files (bench/micro_bench)",
          "bench"},
    Param{"STRAIT_BUILD_DIR", Path, "<repo>/build", "",
          "Build folder of scripts/*.sh and bench/*.sh; python/ looks for libstrait.so there first",
          "scripts"},
    Param{"STRAIT_BUSBW_ARGS", String, "8 B .. 256 MiB, f32", "",
          "Flags bench/gpu_check.sh passes to strait_device_busbw", "scripts"},
    Param{"STRAIT_CMAKE_ARGS", String, "", "",
          "Extra arguments scripts/build.sh passes to cmake's configure step", "scripts"},
    Param{"STRAIT_COMPARE_OUT", Path, "a fresh folder under the results folder", "",
          "Output folder of one bench/compare_*.sh run", "scripts"},
    Param{"STRAIT_CONF_FILE", Path, "~/.strait.conf, else /etc/strait.conf", "",
          "Config file of NAME=VALUE lines ('#' comments); the environment wins over it", "core"},
    Param{"STRAIT_CUDA_ARCH", String, "native", "",
          "CMAKE_CUDA_ARCHITECTURES of bench/gpu_check.sh's build", "scripts"},
    Param{"STRAIT_DEBUG", Enum, "WARN", "NONE, VERSION, WARN, INFO, TRACE",
          "strait's log level (as NCCL_DEBUG): WARN failures and dumps, INFO setup, TRACE each op",
          "comm"},
    Param{"STRAIT_DEBUG_FILE", Path, "stderr", "%h: host, %p: pid",
          "File strait's log lines go to (as NCCL_DEBUG_FILE)", "comm"},
    Param{"STRAIT_DEBUG_SUBSYS", String, "ALL", "INIT, COLL, P2P, NET, FR, ALL; ^ excludes",
          "Comma list of the subsystems strait logs (as NCCL_DEBUG_SUBSYS)", "comm"},
    Param{"STRAIT_ENCRYPT", Enum, "sites with a secret, else off", "sites, all, off",
          "Which messages between ranks are sealed (XChaCha20-Poly1305); same on every rank",
          "comm"},
    Param{"STRAIT_FR_DUMP_DIR", Path, "/tmp/strait-fr", "",
          "Folder of the flight recorder's dumps (one file per rank; strait diagnose reads it)",
          "comm"},
    Param{"STRAIT_FR_ENTRIES", Int, "512", "0 (off) to 1048576",
          "Operations each communicator's flight recorder keeps", "comm"},
    Param{"STRAIT_FR_SIGNAL", Bool, "1", "1, 0",
          "1: SIGUSR1 makes a process write its flight-recorder dump", "comm"},
    Param{"STRAIT_GPU_BUILD_DIR", Path, "<repo>/build-gpu", "",
          "Build folder of bench/gpu_check.sh", "scripts"},
    Param{"STRAIT_HEARTBEAT_S", Double, "0 (off; 1 for strait train --elastic)",
          "0, or 0.001 to 3600",
          "Heartbeat interval in seconds: a peer silent for a few of them is lost", "comm"},
    Param{"STRAIT_IO_ENGINE", Enum, "uring where it works, else posix", "posix, uring",
          "The offload I/O engine (io_uring with O_DIRECT, or POSIX pread/pwrite)", "offload"},
    Param{"STRAIT_JOBS", Int, "nproc", "1 or more", "Build parallelism of bench/gpu_check.sh",
          "scripts"},
    Param{"STRAIT_LIBRARY", Path, "", "",
          "Path of libstrait.so for the Python package (else the build or install folder)",
          "python"},
    Param{"STRAIT_PLAN_PROFILE", Path, "~/.cache/strait/plan-profile.json", "",
          "The planner's cached measured costs (strait plan, strait train --plan auto)", "tools"},
    Param{"STRAIT_PLOT_DIR", Path, "<repo>/tools/plot", "",
          "Folder of plot_schedule.py for strait schedule --png", "tools"},
    Param{"STRAIT_REQUIRE_GPU", Bool, "0", "1, 0",
          "1: GPU tests fail instead of skipping when there is no CUDA device", "tests"},
    Param{"STRAIT_RESULTS_DIR", Path, "<repo>/results", "",
          "Results folder of the bench scripts (ignored by git)", "scripts"},
    Param{"STRAIT_SECRET", String, "", "never set",
          "Refused: a secret in the environment leaks through /proc; use STRAIT_SECRET_FILE",
          "comm"},
    Param{"STRAIT_SECRET_FILE", Path, "", "",
          "File holding the job's shared secret (readable only by you): turns on sealing", "comm"},
    Param{"STRAIT_SIMD", Enum, "the best this CPU supports", "scalar, avx2, avx512",
          "Which CPU kernels run (at most what this CPU supports)", "kernels"},
    Param{"STRAIT_SINGLE_COPY_MIN", Size, "256K", "off, or 64 bytes or more (256K, 1M)",
          "Messages to ranks on this host from this size are copied once, peer to peer", "comm"},
    Param{"STRAIT_SITES", String, "one site", "measure, or a site index per rank: 0,0,1,1",
          "Which ranks share a fast network (a site), for hierarchical algorithms", "comm"},
    Param{"STRAIT_SPIN_US", Int, "adaptive, at most 50 (5000 for a waiting caller)", "0 or more",
          "Microseconds of idle polling before a thread sleeps (fixed when set)", "comm"},
    Param{"STRAIT_STREAMS", Int, "1", "1 to 8",
          "Connections that carry the messages to each peer on another host", "comm"},
    Param{"STRAIT_TEST_OFFLOAD_DIR", Path, "/var/tmp", "",
          "Folder of the big swap-store test's files (needs free disk)", "tests"},
    Param{"STRAIT_TEST_TORCH_EXT", Enum, "0", "0, 1",
          "Test hook: 1 when the build made the torch extension, which the DDP test then requires",
          "tests"},
    Param{"STRAIT_TIMEOUT_S", Double, "300", "0.001 to 1e6",
          "Deadline in seconds of every collective", "comm"},
    Param{"STRAIT_TOPOLOGY_FILE", Path, "", "",
          "JSON file of the sites, {\"sites\": [[0, 1], [2, 3]]} (STRAIT_SITES wins)", "comm"},
    Param{"STRAIT_TORCH_CPP_WORK", Enum, "pending", "pending, python, finished",
          "torch backend: C++ callers (DDP) get a pending Work completed in C++ (overlap; the "
          "Python path without the extension), python: completed in Python, or a finished one",
          "python"},
    Param{"STRAIT_TRAIN_AWAIT_JOINER", Int, "", "",
          "Test hook: an elastic job waits for a joiner at this step", "train"},
    Param{"STRAIT_TRAIN_FAULT", String, "", "ID:STEP:PHASE",
          "Test hook: replica ID fails at STEP in PHASE of an elastic job", "train"},
    Param{"STRAIT_TUNE", String, "", "rules collective[:ranks=..][:sites=..][:LO-HI]:algo[@seg=..]",
          "Algorithm rules; they win over STRAIT_TUNE_FILE and the built-in table", "comm"},
    Param{"STRAIT_TUNE_FILE", Path, "", "", "JSON file of algorithm rules (as strait tune writes)",
          "comm"},
    Param{"STRAIT_UCX_ERR_MODE", Enum, "auto", "auto, peer",
          "peer: peer-failure mode (needs TCP) even when every rank is on this host", "comm"},
};

static_assert(std::is_sorted(kParams.begin(), kParams.end(),
                             [](const Param& a, const Param& b) { return a.name < b.name; }),
              "keep kParams sorted by name");

}  // namespace

std::span<const Param> all() noexcept {
  return kParams;
}

}  // namespace strait::params
