// The planner's measured costs (train/planner.h): what one microbatch's forward, input backward
// and weight backward cost per transformer block (and the embedding's and head's extra) at each
// microbatch size, on this machine with the threads a rank gets; what a slot of stashed
// activations takes; AdamW's time per parameter; each codec's throughput and wire bytes; the
// bandwidth of RAM copies and of the offload disk; the links between ranks (strait tune's
// measurement or file); and what validation runs taught (learn_from_run). Every figure carries
// its source, and the whole is cached as one JSON file so a second plan does not profile again.
// An internal header of strait_train. Thread-safety: plain values; the measure_* functions use
// the calling thread and the GEMM thread count they set (kernels/gemm.h).
// Errors: InvalidArgument for a malformed profile file; Io when the offload directory cannot be
// written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace strait::train {

// F, B (input gradient) and W (weight gradient) seconds of one microbatch, and the fused
// backward's (B and W in one pass, as 1F1B, GPipe and interleaved run it; 0: not measured).
struct FbwSeconds {
  double f = 0, b = 0, w = 0, fused = 0;
};

// One microbatch size on one model shape.
struct MicrobatchCosts {
  FbwSeconds block;  // one transformer block (a middle stage's)
  FbwSeconds first;  // what the first stage adds (embedding)
  FbwSeconds last;   // what the last stage adds (final layernorm, head, loss)
  // Bytes of one stashed-activation slot: per block, and the first / last stage's extra.
  double block_stash = 0, first_stash = 0, last_stash = 0;
  int reps = 0;  // timed repetitions (median taken)
};

// A model shape at a thread count: the key "dim=128,heads=4,ctx=128,threads=1".
struct ShapeCosts {
  std::map<int, MicrobatchCosts> sizes;  // by sequences per microbatch
  double adamw_s_per_param = 0;          // ParallelAdamW at the rank's threads
};

struct CodecCosts {
  double encode_s_per_elem = 0, decode_s_per_elem = 0, bytes_per_elem = 4;
};

// Links between ranks: one-way latency (s) and bandwidth (bytes/s) per pair, 0 on the diagonal.
struct PlanLinks {
  std::vector<std::vector<double>> latency_s, bandwidth;
  std::vector<int> site;  // per rank
  std::string source;
  [[nodiscard]] int world() const { return static_cast<int>(latency_s.size()); }
};

inline constexpr double kMiB = 1024.0 * 1024.0;

// What validation runs measured against what was predicted, for one world size and thread count:
// the cores the ranks really had and the step factor (fitted to the measured steps), and the
// measured point-to-point overheads (seconds, -1: not measured), reported but not priced: on shared
// cores they are mostly waiting for a core, which the compute stretch already prices.
struct Learned {
  double effective_cores = 0;  // the cores the ranks really got (others' load); 0: all
  // The share of a rank's waiting (bubble) time that still loads the cores: a waiting receiver
  // polls before it sleeps (STRAIT_SPIN_US), which shared cores feel. 0: waiting is free.
  double wait_load = 0;
  double step_scale = 1;  // measured step / simulated step (others' load on the cores)
  double send_s = -1, recv_s = -1, latency_s = -1;
  // Measured peak - predicted, fitted over the runs as memory_extra_bytes + a pipeline's
  // memory_extra_pipeline_bytes + (model stages - 1) x memory_extra_per_stage_bytes (point-to-point
  // channels and their buffers) + NVMe activation offload's memory_extra_nvme_bytes (its staging)
  // + CPU activation offload's memory_extra_cpu_bytes (its pinned leases, rounded up to the pool's
  // size classes). Before any run: what validation fitted on machine A (4 ranks on 2 cores, fresh
  // profiles: +6.6 MiB, +7.1 - 7.3 for a pipeline, +2.6 - 3.0 a model stage, +8.2 - 10.8 with NVMe,
  // +7.0 with CPU activation offload; docs/commands/plan.md), the runtime's own memory (UCX, the
  // pools), not the model's.
  double memory_extra_bytes = 6.6 * kMiB;
  double memory_extra_pipeline_bytes = 7.2 * kMiB;
  double memory_extra_per_stage_bytes = 2.8 * kMiB;
  double memory_extra_nvme_bytes = 9.5 * kMiB;
  double memory_extra_cpu_bytes = 7.0 * kMiB;
  int runs = 0;
  std::string source;
};

struct PlanProfile {
  int cores = 0;
  double memcpy_bytes_per_s = 0;
  double disk_write_bytes_per_s = 0, disk_read_bytes_per_s = 0;
  std::string disk_dir;
  std::map<std::string, ShapeCosts> shapes;
  std::map<std::string, CodecCosts> codecs;
  std::map<int, PlanLinks> links;            // by world size (loopback measurements)
  std::map<std::string, Learned> learned;    // by learned_key
  std::map<std::string, std::string> notes;  // figure -> how it was measured

  [[nodiscard]] nlohmann::json to_json() const;
  static PlanProfile from_json(const nlohmann::json& j);
  // Reads `path` (an empty profile when it does not exist); writes it atomically.
  static PlanProfile load(const std::filesystem::path& path);
  void save(const std::filesystem::path& path) const;
};

[[nodiscard]] std::string shape_key(const sched::GptConfig& model, int threads);
// What was learned depends on the world, the threads and the number of sites (WAN or loopback).
[[nodiscard]] std::string learned_key(int world, int threads, int sites);

// Measures what `profile` lacks for `model` at `threads` and the microbatch sizes `sizes`
// (compute, stash bytes, AdamW; and, once per profile, RAM and disk bandwidth under `disk_dir`
// and every codec of `codecs`). Returns whether anything was measured.
// This process's resident memory in bytes from /proc/self/status: now (VmRSS) or its peak so far
// (VmHWM); 0 where the file is unreadable.
double process_memory_bytes(bool peak);

bool measure_missing(PlanProfile& profile, const sched::GptConfig& model, int threads,
                     const std::vector<int>& sizes, const std::vector<std::string>& codecs,
                     const std::filesystem::path& disk_dir);

}  // namespace strait::train
