// ByteCorpus: the training text as raw bytes (byte-level vocabulary of 256, token = byte value),
// split into a training part and a held-out evaluation part.
//
// load(path): a regular file is read as is; a directory contributes every regular file directly in
// it, sorted by name (byte order). In a directory, symbolic links, non-regular files, strfile
// indexes (*.dat), empty files and binary files (any NUL byte) are skipped and listed in skipped():
// this makes the Debian `fortunes` directory (kDefaultCorpusPath: text files, their .dat indexes
// and .u8 symlinks) usable as is. Each file is read with one sized read(2) (looping on short reads,
// and on past the size fstat reported if the file has grown or, like /proc files, reports 0).
//
// The split, per file: every file holds out its own tail, its last held_out_size(n, eval_fraction)
// = floor(n * eval_fraction) bytes, and keeps the rest (its head, never empty) for training.
// train() is the heads of the files in order, joined by options.separator; eval() is their
// non-empty tails in order, joined by options.separator. So the held-out text is drawn from every
// file in proportion to its size, rather than being the alphabetically last file(s), and its
// distribution is the training data's. Tiny files: a file shorter than 1 / eval_fraction bytes
// (20 bytes at the default 5%) has an empty tail and goes to train() whole; it adds no separator
// to eval(). Rounding down per file holds out at most one byte less per file than the exact
// fraction, and keeps a single file's split exactly what it always was: one file (or from_bytes)
// is split as one text, its last floor(n * eval_fraction) bytes held out.
// bytes() is one buffer: train() followed directly by eval(), both views into it. For a single
// file that is the file itself; for several files it is not their concatenation in file order
// (each file's tail sits in the eval part), and it holds one more separator per non-empty tail
// after the first.
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
  double eval_fraction = 0.05;   // share of each file's bytes held out at its end, in (0, 1)
  std::string separator = "\n";  // joins the files' heads in train() and their tails in eval()
};

// The bytes a text of `size` bytes holds out at its end: floor(size * eval_fraction). The one
// rounding rule for the split, shared with ByteDataset's "corpus too short" arithmetic.
[[nodiscard]] std::size_t held_out_size(std::size_t size, double eval_fraction);

struct SkippedFile {
  std::filesystem::path path;
  std::string reason;  // e.g. "symbolic link", "binary (contains NUL bytes)"
};

class ByteCorpus {
 public:
  static ByteCorpus load(const std::filesystem::path& path, const CorpusOptions& options = {});
  // One text split as one (as a single file is). `source` names the corpus in error messages.
  static ByteCorpus from_bytes(std::vector<std::uint8_t> bytes, double eval_fraction,
                               std::string source = "in-memory corpus");

  // train() then eval(), contiguous (see above: not the files' concatenation when there are
  // several).
  [[nodiscard]] std::span<const std::uint8_t> bytes() const { return bytes_; }
  [[nodiscard]] std::span<const std::uint8_t> train() const;
  [[nodiscard]] std::span<const std::uint8_t> eval() const;
  [[nodiscard]] double eval_fraction() const { return eval_fraction_; }
  [[nodiscard]] const std::string& source() const { return source_; }
  // The files used, in order, and those skipped (both empty when built from bytes).
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
