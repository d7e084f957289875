#include "model/corpus.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/fd.h"

namespace strait::sched {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kDataHint =
    "pass --data FILE|DIR, or install the fortunes package (scripts/setup.sh does)";

std::string errno_text(int err) {
  return std::system_category().message(err);
}

// The whole file in one sized read: the buffer is the size fstat reports plus one byte, so a file
// that has not changed is read by one read(2) that fills it short by that byte and one that
// returns 0 (end of file). Short reads and EINTR are retried; a file that grows while it is read,
// or that reports size 0 but has content (/proc), is read on to its end, the buffer doubling.
std::vector<std::uint8_t> read_file(const fs::path& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    throw Error(
        ErrorCode::Io,
        fmt::format("cannot open data file {} for reading: {}{}", path.string(), errno_text(err),
                    err == EACCES || err == EPERM ? ": check its permissions" : ""));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot stat data file {}: {}", path.string(), errno_text(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorCode::Io,
                fmt::format("data file {} is no longer a regular file", path.string()));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got == bytes.size()) bytes.resize(2 * bytes.size());
    const ::ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::Io, fmt::format("reading data file {} failed after {} bytes: {}",
                                             path.string(), got, errno_text(errno)));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

bool is_binary(const std::vector<std::uint8_t>& bytes) {
  return std::find(bytes.begin(), bytes.end(), std::uint8_t{0}) != bytes.end();
}

void check_fraction(double f) {
  if (!(f > 0.0 && f < 1.0)) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("eval fraction {} must be in (0, 1), e.g. 0.05 to hold out the last 5%", f));
  }
}

// Joins the heads of `texts` with `separator`, then their non-empty tails: see corpus.h.
std::vector<std::uint8_t> split_and_join(const std::vector<std::vector<std::uint8_t>>& texts,
                                         double eval_fraction, std::string_view separator,
                                         std::size_t& train_size) {
  std::vector<std::size_t> tails(texts.size());
  std::size_t total = 0;
  std::size_t nonempty_tails = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    tails[i] = held_out_size(texts[i].size(), eval_fraction);
    total += texts[i].size();
    nonempty_tails += tails[i] > 0 ? 1 : 0;
  }
  const std::size_t separators = (texts.size() - 1) + (nonempty_tails > 0 ? nonempty_tails - 1 : 0);
  std::vector<std::uint8_t> out;
  out.reserve(total + separators * separator.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out.insert(out.end(), separator.begin(), separator.end());
    const auto head = static_cast<std::ptrdiff_t>(texts[i].size() - tails[i]);
    out.insert(out.end(), texts[i].begin(), texts[i].begin() + head);
  }
  train_size = out.size();
  bool first = true;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (tails[i] == 0) continue;
    if (!first) out.insert(out.end(), separator.begin(), separator.end());
    first = false;
    const auto head = static_cast<std::ptrdiff_t>(texts[i].size() - tails[i]);
    out.insert(out.end(), texts[i].begin() + head, texts[i].end());
  }
  return out;
}

}  // namespace

std::size_t held_out_size(std::size_t size, double eval_fraction) {
  return static_cast<std::size_t>(std::floor(static_cast<double>(size) * eval_fraction));
}

ByteCorpus ByteCorpus::from_bytes(std::vector<std::uint8_t> bytes, double eval_fraction,
                                  std::string source) {
  check_fraction(eval_fraction);
  if (bytes.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} is empty: a corpus needs text to train on", source));
  }
  ByteCorpus c;
  c.train_size_ = bytes.size() - held_out_size(bytes.size(), eval_fraction);
  c.bytes_ = std::move(bytes);
  c.eval_fraction_ = eval_fraction;
  c.source_ = std::move(source);
  return c;
}

ByteCorpus ByteCorpus::load(const fs::path& path, const CorpusOptions& options) {
  check_fraction(options.eval_fraction);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("data path {} does not exist: {}", path.string(), kDataHint));
  }
  if (fs::is_regular_file(status)) {
    std::vector<std::uint8_t> bytes = read_file(path);
    if (bytes.empty()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("data file {} is empty: pass --data with a text file or a "
                              "directory of them",
                              path.string()));
    }
    if (is_binary(bytes)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("data file {} is binary (it contains NUL bytes): pass --data with a "
                              "text file or a directory of them",
                              path.string()));
    }
    ByteCorpus c = from_bytes(std::move(bytes), options.eval_fraction, path.string());
    c.files_.push_back(path);
    return c;
  }
  if (!fs::is_directory(status)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("data path {} is neither a regular file nor a directory: {}",
                            path.string(), kDataHint));
  }

  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(*it);
  }
  if (ec) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot list data directory {}: {}", path.string(), ec.message()));
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });

  std::vector<std::vector<std::uint8_t>> texts;
  std::vector<fs::path> files;
  std::vector<SkippedFile> skipped;
  for (const fs::directory_entry& e : entries) {
    const fs::path& p = e.path();
    std::error_code stat_ec;
    if (e.is_symlink(stat_ec)) {
      skipped.push_back({p, "symbolic link"});
    } else if (!e.is_regular_file(stat_ec)) {
      skipped.push_back({p, "not a regular file"});
    } else if (p.extension() == ".dat") {
      skipped.push_back({p, "strfile index (.dat)"});
    } else {
      std::vector<std::uint8_t> bytes = read_file(p);
      if (bytes.empty()) {
        skipped.push_back({p, "empty"});
      } else if (is_binary(bytes)) {
        skipped.push_back({p, "binary (contains NUL bytes)"});
      } else {
        texts.push_back(std::move(bytes));
        files.push_back(p);
      }
    }
  }
  if (files.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("data directory {} has no usable text files ({} entries skipped: "
                            "symbolic links, *.dat, empty and binary files): {}",
                            path.string(), skipped.size(), kDataHint));
  }
  ByteCorpus c;
  if (texts.size() == 1) {
    c = from_bytes(std::move(texts.front()), options.eval_fraction, path.string());
  } else {
    c.bytes_ = split_and_join(texts, options.eval_fraction, options.separator, c.train_size_);
    c.eval_fraction_ = options.eval_fraction;
    c.source_ = path.string();
  }
  c.files_ = std::move(files);
  c.skipped_ = std::move(skipped);
  return c;
}

std::span<const std::uint8_t> ByteCorpus::train() const {
  return std::span<const std::uint8_t>(bytes_).first(train_size_);
}

std::span<const std::uint8_t> ByteCorpus::eval() const {
  return std::span<const std::uint8_t>(bytes_).subspan(train_size_);
}

}  // namespace strait::sched
