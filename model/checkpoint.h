// Checkpoints of the reference transformer: one documented format (docs/checkpoints.md),
// written atomically with a checksum per tensor, independent of the pipeline's stage split, and
// held either in a directory or in one byte buffer (to send to a replica that joins a job).
//
// Tensors: fp32, row-major, named the GPT-2 way with global layer indices ("wte",
// "h.3.attn.c_attn.weight", transformer.h) so that any stage split finds its own; the trainer adds
// AdamW's moments as "optimizer.exp_avg.<name>" and "optimizer.exp_avg_sq.<name>" (PyTorch's
// state names). What else a run needs to continue (step, sampler position, seeds, configuration)
// is JSON the caller passes as `meta`.
//
// Container (a shard file, or the byte buffer), little-endian:
//   [0, 8)   magic "STRAITCK"
//   [8, 12)  u32 format version (kCheckpointVersion)
//   [12, 16) u32 zero
//   [16, 24) u64 H, the header's length in bytes
//   [24, 24 + H) header: UTF-8 JSON {"meta": {...}, "tensors": [{"name", "dtype": "f32",
//            "shape": [...], "offset", "bytes", "xxh3_64": "<16 hex digits>"}, ...]}
//   tensor data at each entry's offset (from the container's start; 64-byte aligned).
// Checksums are XXH3-64 (xxHash, seed 0) of each tensor's bytes, written as 16 lower-case hex
// digits.
//
// Directory: ROOT/step-<N as 8 digits>/ holds shard-<k>.ckpt (one per saving stage) and
// manifest.json, written last, which lists every tensor with the file it is in, its offset,
// shape and checksum, the shard files, and `meta`. ROOT/latest holds the name of the newest
// complete step directory. A save goes to ROOT/.tmp-step-<N>/ first: every shard is written to a
// temporary name, fsynced and renamed; the manifest likewise; then the directory is renamed to its
// final name (atomically swapped with an older copy of the same step) and ROOT/latest replaced by
// rename. A crash at any point leaves the previous checkpoint and `latest` readable; a stale
// .tmp-step-* directory is removed by the next save.
//
// Thread-safety: functions are independent; a CheckpointReader is used by one thread at a time.
// Errors: InvalidArgument for a missing checkpoint, tensor or shape that does not fit (naming it
// and what to pass); Io for a file operation that failed (naming the file and errno's text);
// Mismatch for a checksum, magic, version or size that does not hold (naming the file, tensor and
// both checksums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strait::sched {

inline constexpr std::uint32_t kCheckpointVersion = 1;

struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // row-major; the product is data.size()
  std::vector<float> data;
};

// A tensor to write, viewing memory the caller keeps alive and unchanged during the call: saves
// write from the model's own buffers without copying them.
struct CheckpointTensorView {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> data;
};

// Views of owned tensors.
std::vector<CheckpointTensorView> views_of(std::span<const CheckpointTensor> tensors);

// The XXH3-64 checksum of `bytes` as 16 lower-case hex digits.
std::string checkpoint_checksum(std::span<const std::byte> bytes);

// --- Byte buffer ---------------------------------------------------------------------------------

// One container holding `tensors` and `meta`. Throws InvalidArgument for an empty or repeated name
// or a shape whose product is not the data's size.
std::vector<std::byte> pack_checkpoint(const nlohmann::json& meta,
                                       std::span<const CheckpointTensorView> tensors);
std::vector<std::byte> pack_checkpoint(const nlohmann::json& meta,
                                       std::span<const CheckpointTensor> tensors);

struct CheckpointContents {
  nlohmann::json meta;
  std::vector<CheckpointTensor> tensors;  // in the container's order
  // The tensor called `name`; InvalidArgument naming it when absent.
  [[nodiscard]] const CheckpointTensor& at(std::string_view name) const;
  // Copies tensor `name` into `out` (CheckpointReader::read's contract, for the buffer form).
  void read(std::string_view name, std::span<float> out) const;
};

// Parses a container and verifies every tensor's checksum. `what` names the bytes in errors (a
// file name, "buffer from rank 3").
CheckpointContents unpack_checkpoint(std::span<const std::byte> bytes,
                                     std::string_view what = "checkpoint buffer");

// --- Directory -----------------------------------------------------------------------------------

// ROOT/step-<N> and ROOT/.tmp-step-<N>.
std::filesystem::path checkpoint_step_dir(const std::filesystem::path& root, std::int64_t step);
std::filesystem::path checkpoint_staging_dir(const std::filesystem::path& root, std::int64_t step);

// A save by several processes: one (the job's rank 0) calls begin_checkpoint, then every writer
// calls write_checkpoint_shard with its own shard index (after a barrier), then the first calls
// commit_checkpoint (after another barrier). begin creates ROOT if needed, removes stale staging
// directories and creates a fresh one for `step`.
void begin_checkpoint(const std::filesystem::path& root, std::int64_t step);
// Streams the shard to its file (no copy of the data in memory).
void write_checkpoint_shard(const std::filesystem::path& root, std::int64_t step, int shard,
                            std::span<const CheckpointTensorView> tensors);
void write_checkpoint_shard(const std::filesystem::path& root, std::int64_t step, int shard,
                            std::span<const CheckpointTensor> tensors);
// Reads the `shards` shard headers, writes manifest.json (with `meta`), and publishes step N as
// described above. Throws InvalidArgument naming a shard that is missing, Mismatch for a tensor in
// two shards.
void commit_checkpoint(const std::filesystem::path& root, std::int64_t step, int shards,
                       const nlohmann::json& meta);
// The three in one process, with one shard.
void write_checkpoint(const std::filesystem::path& root, std::int64_t step,
                      const nlohmann::json& meta, std::span<const CheckpointTensor> tensors);

// A checkpoint directory opened for reading: `path` is ROOT (follows ROOT/latest) or a step
// directory.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& path);

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }  // the step directory
  [[nodiscard]] const nlohmann::json& manifest() const { return manifest_; }
  [[nodiscard]] const nlohmann::json& meta() const { return manifest_.at("meta"); }
  [[nodiscard]] std::int64_t step() const;
  [[nodiscard]] bool contains(std::string_view name) const;
  [[nodiscard]] std::vector<std::int64_t> shape(std::string_view name) const;
  // Names in the manifest's order.
  [[nodiscard]] std::vector<std::string> names() const;
  // Reads tensor `name` into `out` (its element count) and verifies its checksum.
  void read(std::string_view name, std::span<float> out) const;
  [[nodiscard]] CheckpointTensor read(std::string_view name) const;
  // The whole checkpoint as one container (pack_checkpoint of the meta and every tensor).
  [[nodiscard]] std::vector<std::byte> pack() const;

 private:
  [[nodiscard]] const nlohmann::json& entry(std::string_view name) const;

  std::filesystem::path dir_;
  nlohmann::json manifest_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in "tensors"
};

}  // namespace strait::sched
