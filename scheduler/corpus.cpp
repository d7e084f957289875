#include "scheduler/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace strait::sched {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kDataHint =
    "pass --data FILE|DIR, or install the fortunes package (scripts/setup.sh does)";

std::vector<std::uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(
        ErrorCode::Io,
        fmt::format("cannot open data file {} for reading: check its permissions", path.string()));
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw Error(ErrorCode::Io, fmt::format("reading data file {} failed", path.string()));
  }
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

}  // namespace

ByteCorpus ByteCorpus::from_bytes(std::vector<std::uint8_t> bytes, double eval_fraction,
                                  std::string source) {
  check_fraction(eval_fraction);
  if (bytes.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} is empty: a corpus needs text to train on", source));
  }
  ByteCorpus c;
  const auto eval_size =
      static_cast<std::size_t>(std::floor(static_cast<double>(bytes.size()) * eval_fraction));
  c.train_size_ = bytes.size() - eval_size;
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

  std::vector<std::uint8_t> all;
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
        if (!files.empty())
          all.insert(all.end(), options.separator.begin(), options.separator.end());
        all.insert(all.end(), bytes.begin(), bytes.end());
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
  ByteCorpus c = from_bytes(std::move(all), options.eval_fraction, path.string());
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
