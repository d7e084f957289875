#include "model/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/fd.h"

namespace strait::sched {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::array<char, 8> kMagic = {'S', 'T', 'R', 'A', 'I', 'T', 'C', 'K'};
constexpr std::size_t kPrefix = 24;  // magic, version, zero, header length
constexpr std::size_t kAlign = 64;

Error io_error(const std::string& what, const fs::path& path) {
  return Error(ErrorCode::Io,
               fmt::format("checkpoint: {} {}: {}", what, path.string(), std::strerror(errno)));
}

std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

void put_u32(std::byte* at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}
void put_u64(std::byte* at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}
std::uint64_t get_le(const std::byte* at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::to_integer<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

std::span<const std::byte> as_bytes(std::span<const float> data) {
  return std::as_bytes(data);
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

void check_tensors(std::span<const CheckpointTensorView> tensors) {
  std::set<std::string_view> seen;
  for (const CheckpointTensorView& t : tensors) {
    if (t.name.empty()) throw Error(ErrorCode::InvalidArgument, "checkpoint: a tensor has no name");
    if (!seen.insert(t.name).second) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("checkpoint: tensor {} is given twice", t.name));
    }
    const bool negative = std::any_of(t.shape.begin(), t.shape.end(), [](auto d) { return d < 0; });
    if (negative || elements(t.shape) != static_cast<std::int64_t>(t.data.size())) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("checkpoint: tensor {} has shape [{}] but {} values", t.name,
                              fmt::join(t.shape, ", "), t.data.size()));
    }
  }
}

// The container's header as JSON, its bytes and where the data starts.
struct Layout {
  std::string header;
  std::vector<std::size_t> offsets;  // of each tensor, from the container's start
  std::size_t total = 0;
};

Layout layout(const json& meta, std::span<const CheckpointTensorView> tensors) {
  check_tensors(tensors);
  json entries = json::array();
  std::vector<std::size_t> rels;
  std::size_t rel = 0;  // from the data start
  for (const CheckpointTensorView& t : tensors) {
    rels.push_back(rel);
    const std::size_t bytes = t.data.size() * sizeof(float);
    entries.push_back({{"name", t.name},
                       {"dtype", "f32"},
                       {"shape", t.shape},
                       {"offset", rel},
                       {"bytes", bytes},
                       {"xxh3_64", checkpoint_checksum(as_bytes(t.data))}});
    rel = align_up(rel + bytes);
  }
  // Offsets count from the container's start, after the header, whose length depends on their
  // digits: grow the data start until the header fits before it.
  std::size_t start = align_up(kPrefix);
  std::string header;
  for (;;) {
    json shifted = entries;
    for (json& e : shifted) e["offset"] = e["offset"].get<std::size_t>() + start;
    header = json{{"meta", meta}, {"tensors", shifted}}.dump();
    if (kPrefix + header.size() <= start) break;
    start = align_up(kPrefix + header.size());
  }
  header.resize(start - kPrefix, ' ');  // JSON allows trailing whitespace
  for (std::size_t& r : rels) r += start;
  return {std::move(header), std::move(rels), start + rel};
}

void write_all(int fd, const std::byte* data, std::size_t n, const fs::path& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw io_error("cannot write", path);
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

void read_all(int fd, std::byte* data, std::size_t n, std::uint64_t offset, const fs::path& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw io_error("cannot read", path);
    }
    if (r == 0) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("checkpoint: {} ends before byte {}: the file is truncated",
                              path.string(), offset + n));
    }
    data += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

Fd open_or_throw(const fs::path& path, int flags, const char* what) {
  Fd fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
  if (!fd) throw io_error(what, path);
  return fd;
}

void fsync_path(const fs::path& path, int flags) {
  const Fd fd = open_or_throw(path, flags, "cannot open for fsync");
  if (::fsync(fd.get()) != 0) throw io_error("cannot fsync", path);
}

// Writes `path` atomically: `fill` writes a file of a temporary name in the same directory,
// which is fsynced and renamed, then the directory is fsynced.
template <class Fill>
void write_file_with(const fs::path& path, const Fill& fill) {
  const fs::path tmp = path.string() + ".part";
  {
    const Fd fd = open_or_throw(tmp, O_WRONLY | O_CREAT | O_TRUNC, "cannot create");
    fill(fd.get(), tmp);
    if (::fsync(fd.get()) != 0) throw io_error("cannot fsync", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw io_error("cannot rename into", path);
  fsync_path(path.parent_path(), O_RDONLY | O_DIRECTORY);
}

void write_file_atomically(const fs::path& path, std::string_view text) {
  write_file_with(path, [&](int fd, const fs::path& tmp) {
    write_all(fd, reinterpret_cast<const std::byte*>(text.data()), text.size(), tmp);
  });
}

void pwrite_all(int fd, const std::byte* data, std::size_t n, std::size_t offset,
                const fs::path& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw io_error("cannot write", path);
    }
    data += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::size_t>(w);
  }
}

// The container's first 24 bytes.
std::array<std::byte, kPrefix> prefix_of(std::size_t header_bytes) {
  std::array<std::byte, kPrefix> p{};
  std::memcpy(p.data(), kMagic.data(), kMagic.size());
  put_u32(p.data() + 8, kCheckpointVersion);
  put_u32(p.data() + 12, 0);
  put_u64(p.data() + 16, header_bytes);
  return p;
}

// The prefix and header of a container: checks magic and version.
json parse_header(std::span<const std::byte> prefix, std::string_view header,
                  std::string_view what) {
  if (std::memcmp(prefix.data(), kMagic.data(), kMagic.size()) != 0) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} is not a strait checkpoint (no STRAITCK magic)", what));
  }
  const auto version = static_cast<std::uint32_t>(get_le(prefix.data() + 8, 4));
  if (version != kCheckpointVersion) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} has format version {}, this strait reads {}", what,
                            version, kCheckpointVersion));
  }
  try {
    return json::parse(header);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} has a corrupt header: {}", what, e.what()));
  }
}

std::vector<std::int64_t> shape_of(const json& entry) {
  return entry.at("shape").get<std::vector<std::int64_t>>();
}

void verify(std::span<const std::byte> bytes, const json& entry, std::string_view what) {
  const std::string got = checkpoint_checksum(bytes);
  const auto want = entry.at("xxh3_64").get<std::string>();
  if (got != want) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: tensor {} in {} fails its checksum (xxh3_64 {} stored, {} "
                            "computed): the file is corrupt; resume from an older step directory",
                            entry.at("name").get<std::string>(), what, want, got));
  }
}

std::string step_name(std::int64_t step) {
  return fmt::format("step-{:08d}", step);
}

CheckpointContents contents_of(const json& parsed, std::span<const std::byte> bytes,
                               std::string_view what);

}  // namespace

std::string checkpoint_checksum(std::span<const std::byte> bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

std::vector<CheckpointTensorView> views_of(std::span<const CheckpointTensor> tensors) {
  std::vector<CheckpointTensorView> out;
  out.reserve(tensors.size());
  for (const CheckpointTensor& t : tensors) out.push_back({t.name, t.shape, t.data});
  return out;
}

std::vector<std::byte> pack_checkpoint(const json& meta,
                                       std::span<const CheckpointTensorView> tensors) {
  const Layout l = layout(meta, tensors);
  std::vector<std::byte> out(l.total);
  const auto prefix = prefix_of(l.header.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  std::memcpy(out.data() + kPrefix, l.header.data(), l.header.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy(out.data() + l.offsets[i], tensors[i].data.data(), tensors[i].data.size_bytes());
  }
  return out;
}

std::vector<std::byte> pack_checkpoint(const json& meta,
                                       std::span<const CheckpointTensor> tensors) {
  return pack_checkpoint(meta, views_of(tensors));
}

const CheckpointTensor& CheckpointContents::at(std::string_view name) const {
  for (const CheckpointTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("checkpoint: no tensor {} in the checkpoint", name));
}

void CheckpointContents::read(std::string_view name, std::span<float> out) const {
  const CheckpointTensor& t = at(name);
  if (t.data.size() != out.size()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("checkpoint: tensor {} has shape [{}], the model's has {} elements",
                            name, fmt::join(t.shape, ", "), out.size()));
  }
  std::copy(t.data.begin(), t.data.end(), out.begin());
}

CheckpointContents unpack_checkpoint(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < kPrefix) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} has {} bytes, fewer than the {}-byte prefix", what,
                            bytes.size(), kPrefix));
  }
  const std::uint64_t h = get_le(bytes.data() + 16, 8);
  if (h > bytes.size() - kPrefix) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} is truncated: its header needs {} bytes", what, h));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + kPrefix), h);
  const json parsed = parse_header(bytes.first(kPrefix), header, what);
  try {
    return contents_of(parsed, bytes, what);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} has a malformed header: {}", what, e.what()));
  }
}

namespace {

CheckpointContents contents_of(const json& parsed, std::span<const std::byte> bytes,
                               std::string_view what) {
  CheckpointContents out;
  out.meta = parsed.at("meta");
  for (const json& e : parsed.at("tensors")) {
    const auto offset = e.at("offset").get<std::uint64_t>();
    const auto n = e.at("bytes").get<std::uint64_t>();
    if (offset > bytes.size() || n > bytes.size() - offset) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("checkpoint: {} is truncated: tensor {} ends at byte {}", what,
                              e.at("name").get<std::string>(), offset + n));
    }
    if (e.at("dtype") != "f32" || static_cast<std::uint64_t>(elements(shape_of(e))) * 4 != n) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("checkpoint: {}: tensor {} has dtype {}, shape {} and {} bytes, "
                              "which do not agree (only f32 is written)",
                              what, e.at("name").get<std::string>(), e.at("dtype").dump(),
                              e.at("shape").dump(), n));
    }
    const auto data = bytes.subspan(offset, n);
    verify(data, e, what);
    CheckpointTensor t;
    t.name = e.at("name").get<std::string>();
    t.shape = shape_of(e);
    t.data.resize(n / sizeof(float));
    std::memcpy(t.data.data(), data.data(), n);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace

fs::path checkpoint_step_dir(const fs::path& root, std::int64_t step) {
  return root / step_name(step);
}

fs::path checkpoint_staging_dir(const fs::path& root, std::int64_t step) {
  return root / (".tmp-" + step_name(step));
}

void begin_checkpoint(const fs::path& root, std::int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    throw Error(ErrorCode::Io, fmt::format("checkpoint: cannot create {}: {}; pass a writable "
                                           "--save directory",
                                           root.string(), ec.message()));
  }
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().starts_with(".tmp-step-")) fs::remove_all(e.path());
  }
  const fs::path staging = checkpoint_staging_dir(root, step);
  if (!fs::create_directory(staging, ec) || ec) {
    throw Error(ErrorCode::Io, fmt::format("checkpoint: cannot create {}: {}", staging.string(),
                                           ec ? ec.message() : "it exists"));
  }
}

void write_checkpoint_shard(const fs::path& root, std::int64_t step, int shard,
                            std::span<const CheckpointTensorView> tensors) {
  const fs::path staging = checkpoint_staging_dir(root, step);
  const Layout l = layout(json{{"shard", shard}}, tensors);
  write_file_with(staging / fmt::format("shard-{}.ckpt", shard), [&](int fd, const fs::path& tmp) {
    const auto prefix = prefix_of(l.header.size());
    write_all(fd, prefix.data(), prefix.size(), tmp);
    write_all(fd, reinterpret_cast<const std::byte*>(l.header.data()), l.header.size(), tmp);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto bytes = std::as_bytes(tensors[i].data);
      pwrite_all(fd, bytes.data(), bytes.size(), l.offsets[i], tmp);
    }
    // The alignment gaps and the tail read as zeros, as in a packed buffer.
    if (::ftruncate(fd, static_cast<off_t>(l.total)) != 0) throw io_error("cannot size", tmp);
  });
}

void write_checkpoint_shard(const fs::path& root, std::int64_t step, int shard,
                            std::span<const CheckpointTensor> tensors) {
  write_checkpoint_shard(root, step, shard, views_of(tensors));
}

void commit_checkpoint(const fs::path& root, std::int64_t step, int shards, const json& meta) {
  const fs::path staging = checkpoint_staging_dir(root, step);
  json tensors = json::array(), files = json::array();
  std::set<std::string> seen;
  for (int k = 0; k < shards; ++k) {
    const std::string file = fmt::format("shard-{}.ckpt", k);
    const fs::path path = staging / file;
    if (!fs::exists(path)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("checkpoint: shard {} of {} was not written ({} is missing)", k,
                              shards, path.string()));
    }
    const Fd fd = open_or_throw(path, O_RDONLY, "cannot open");
    std::array<std::byte, kPrefix> prefix{};
    read_all(fd.get(), prefix.data(), prefix.size(), 0, path);
    const std::uint64_t h = get_le(prefix.data() + 16, 8);
    if (h > fs::file_size(path)) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("checkpoint: {} is truncated or corrupt: its header claims {} bytes",
                              path.string(), h));
    }
    std::string header(h, '\0');
    read_all(fd.get(), reinterpret_cast<std::byte*>(header.data()), header.size(), kPrefix, path);
    const json parsed = parse_header(prefix, header, path.string());
    for (json e : parsed.at("tensors")) {
      if (!seen.insert(e.at("name").get<std::string>()).second) {
        throw Error(ErrorCode::Mismatch,
                    fmt::format("checkpoint: tensor {} is in two shards", e.at("name").dump()));
      }
      e["file"] = file;
      tensors.push_back(std::move(e));
    }
    files.push_back({{"name", file}, {"bytes", fs::file_size(path)}});
  }
  const json manifest = {{"format", "strait-checkpoint"},
                         {"version", kCheckpointVersion},
                         {"step", step},
                         {"files", files},
                         {"tensors", tensors},
                         {"meta", meta}};
  const std::string text = manifest.dump(1) + "\n";
  write_file_atomically(staging / "manifest.json", text);
  const fs::path final_dir = checkpoint_step_dir(root, step);
  if (fs::exists(final_dir)) {
    // Saving a step again (a resumed run): swap atomically, then drop the old copy.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
      throw io_error("cannot swap in", final_dir);
    }
    fs::remove_all(staging);
  } else if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
    throw io_error("cannot rename into", final_dir);
  }
  fsync_path(root, O_RDONLY | O_DIRECTORY);
  const std::string latest = step_name(step) + "\n";
  write_file_atomically(root / "latest", latest);
}

void write_checkpoint(const fs::path& root, std::int64_t step, const json& meta,
                      std::span<const CheckpointTensor> tensors) {
  begin_checkpoint(root, step);
  write_checkpoint_shard(root, step, 0, tensors);
  commit_checkpoint(root, step, 1, meta);
}

// --- Reading -------------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const fs::path& path) {
  if (!fs::is_directory(path)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("checkpoint: {} is not a directory: pass the --save directory of an "
                            "earlier run or one of its step-N directories",
                            path.string()));
  }
  dir_ = path;
  if (!fs::exists(path / "manifest.json")) {
    std::ifstream in(path / "latest");
    std::string name;
    if (!(in >> name)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("checkpoint: {} holds neither manifest.json nor a `latest` file: it "
                              "is not a checkpoint directory (or no save completed there)",
                              path.string()));
    }
    dir_ = path / name;
  }
  std::ifstream in(dir_ / "manifest.json");
  if (!in) throw io_error("cannot open", dir_ / "manifest.json");
  try {
    manifest_ = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::Mismatch, fmt::format("checkpoint: {} is corrupt: {}",
                                                 (dir_ / "manifest.json").string(), e.what()));
  }
  const fs::path manifest_path = dir_ / "manifest.json";
  try {
    if (manifest_.value("format", "") != "strait-checkpoint" ||
        manifest_.value("version", 0U) != kCheckpointVersion) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("checkpoint: {} is not a version-{} strait checkpoint manifest",
                              manifest_path.string(), kCheckpointVersion));
    }
    const json& tensors = manifest_.at("tensors");
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const json& e = tensors[i];
      (void)e.at("file").get<std::string>();
      (void)e.at("offset").get<std::uint64_t>();
      (void)e.at("bytes").get<std::uint64_t>();
      (void)e.at("xxh3_64").get<std::string>();
      (void)shape_of(e);
      index_.emplace(e.at("name").get<std::string>(), i);
    }
    (void)step();
    (void)meta();
  } catch (const json::exception& e) {
    throw Error(ErrorCode::Mismatch,
                fmt::format("checkpoint: {} is malformed: {}", manifest_path.string(), e.what()));
  }
}

std::int64_t CheckpointReader::step() const {
  return manifest_.at("step").get<std::int64_t>();
}

bool CheckpointReader::contains(std::string_view name) const {
  return index_.contains(name);
}

const json& CheckpointReader::entry(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("checkpoint: {} has no tensor {}: it was saved from another model",
                            dir_.string(), name));
  }
  return manifest_.at("tensors")[it->second];
}

std::vector<std::int64_t> CheckpointReader::shape(std::string_view name) const {
  return shape_of(entry(name));
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const json& e : manifest_.at("tensors")) out.push_back(e.at("name").get<std::string>());
  return out;
}

void CheckpointReader::read(std::string_view name, std::span<float> out) const {
  const json& e = entry(name);
  const auto bytes = e.at("bytes").get<std::uint64_t>();
  if (e.at("dtype") != "f32" || bytes != out.size() * sizeof(float)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("checkpoint: tensor {} has shape [{}] ({}), the model's has {} "
                            "elements",
                            name, fmt::join(shape_of(e), ", "), e.at("dtype").get<std::string>(),
                            out.size()));
  }
  const fs::path path = dir_ / e.at("file").get<std::string>();
  const Fd fd = open_or_throw(path, O_RDONLY, "cannot open");
  const std::span<std::byte> raw = std::as_writable_bytes(out);
  read_all(fd.get(), raw.data(), raw.size(), e.at("offset").get<std::uint64_t>(), path);
  verify(raw, e, path.string());
}

CheckpointTensor CheckpointReader::read(std::string_view name) const {
  CheckpointTensor t;
  t.name = std::string(name);
  t.shape = shape(name);
  t.data.resize(static_cast<std::size_t>(elements(t.shape)));
  read(name, t.data);
  return t;
}

std::vector<std::byte> CheckpointReader::pack() const {
  std::vector<CheckpointTensor> tensors;
  for (const std::string& name : names()) tensors.push_back(read(name));
  json meta = manifest_.at("meta");
  return pack_checkpoint(meta, tensors);
}

}  // namespace strait::sched
