// ByteCorpus: the training text as raw bytes (byte-level vocabulary of 256, token = byte value),
// split into a training part and a held-out evaluation tail.
//
// load(path): a regular file is read as is; a directory contributes every regular file directly in
// it, sorted by name (byte order), concatenated with options.separator between files. In a
// directory, symbolic links, non-regular files, strfile indexes (*.dat), empty files and binary
// files (any NUL byte) are skipped and listed in skipped(): this makes the Debian `fortunes`
// directory (kDefaultCorpusPath: text files, their .dat indexes and .u8 symlinks) usable as is.
// The split: the last floor(size * eval_fraction) bytes are the eval part, the rest the train part.
// Whether the parts are long enough depends on the context length: ByteDataset (data.h) checks.
// Thread-safety: immutable after construction; const members are safe from any thread.
// Errors: InvalidArgument for a path that does not exist, an empty or binary file, a directory
// without usable text files, or eval_fraction outside (0, 1); Io when a file cannot be read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strait::sched {

// Installed by the Debian package `fortunes` (scripts/setup.sh); about 2.5 MB of text.
inline constexpr std::string_view kDefaultCorpusPath = "/usr/share/games/fortunes";

struct CorpusOptions {
  double eval_fraction = 0.05;   // share of bytes held out at the end, in (0, 1)
  std::string separator = "\n";  // inserted between the files of a directory
};

struct SkippedFile {
  std::filesystem::path path;
  std::string reason;  // e.g. "symbolic link", "binary (contains NUL bytes)"
};

class ByteCorpus {
 public:
  static ByteCorpus load(const std::filesystem::path& path, const CorpusOptions& options = {});
  // `source` names the corpus in error messages.
  static ByteCorpus from_bytes(std::vector<std::uint8_t> bytes, double eval_fraction,
                               std::string source = "in-memory corpus");

  [[nodiscard]] std::span<const std::uint8_t> bytes() const { return bytes_; }
  [[nodiscard]] std::span<const std::uint8_t> train() const;
  [[nodiscard]] std::span<const std::uint8_t> eval() const;
  [[nodiscard]] double eval_fraction() const { return eval_fraction_; }
  [[nodiscard]] const std::string& source() const { return source_; }
  // The files concatenated, in order, and those skipped (empty when built from bytes).
  [[nodiscard]] const std::vector<std::filesystem::path>& files() const { return files_; }
  [[nodiscard]] const std::vector<SkippedFile>& skipped() const { return skipped_; }

 private:
  ByteCorpus() = default;

  std::vector<std::uint8_t> bytes_;
  std::size_t train_size_ = 0;
  double eval_fraction_ = 0.0;
  std::string source_;
  std::vector<std::filesystem::path> files_;
  std::vector<SkippedFile> skipped_;
};

}  // namespace strait::sched
