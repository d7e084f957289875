#include "offload/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "offload/pinned_buffer.h"
#include "offload/posix_engine.h"
#include "offload/uring_engine.h"
#include "tests/common/expect_error.h"
#include "tests/common/scratch_mount.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using strait::test::contains;
using strait::test::error_of;
using strait::test::ScratchMount;
using strait::test::TempDir;

std::byte pattern(std::uint64_t file_offset, unsigned seed) {
  return static_cast<std::byte>((file_offset * 131 + seed * 7 + (file_offset >> 9)) & 0xff);
}

// The file's bytes read with plain iostreams, independently of any engine.
std::vector<std::byte> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::transform(raw.begin(), raw.end(), out.begin(),
                 [](char c) { return static_cast<std::byte>(c); });
  return out;
}

std::unique_ptr<IoEngine> make(IoEngineKind kind, const IoEngineOptions& options) {
  if (kind == IoEngineKind::Posix) return std::make_unique<PosixEngine>(options);
  return std::make_unique<UringEngine>(options);
}

class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    if (GetParam() == IoEngineKind::Uring) {
      if (auto why = testing::uring_unavailable(dir_.path())) GTEST_SKIP() << *why;
    }
  }

  // Request granularity: the engine's alignment (O_DIRECT) or 1.
  static std::size_t unit(const IoFile& f) { return f.direct() ? f.alignment().offset : 1; }

  TempDir dir_;
};

TEST_P(IoEngineTest, RoundTripsSizesAndOffsetsThatAreNotPageMultiples) {
  IoEngineOptions options;
  options.queue_depth = 4;  // fewer slots than requests: exercises the pending queue
  options.threads = 3;
  auto engine = make(GetParam(), options);
  const IoFile file = engine->open(dir_.path() / "data", OpenMode::CreateExclusive);
  const std::size_t u = unit(file);
  // (offset, length) in units: lengths 1, 3, 4097, ... are not multiples of 4096 bytes when u is
  // 1 or 512; posix also gets byte-odd sizes.
  struct Extent {
    std::uint64_t offset;
    std::size_t length;
  };
  std::vector<Extent> extents;
  std::uint64_t at = 777 * u;
  for (const std::size_t len : {std::size_t{1}, std::size_t{3}, std::size_t{4095},
                                std::size_t{4097}, std::size_t{12345}, std::size_t{1} << 12}) {
    extents.push_back({at, len * u});
    at += len * u + 5 * u;  // gaps stay holes
  }
  std::vector<PinnedBuffer> out, in;
  std::vector<IoRequest> writes, reads;
  for (const Extent& e : extents) {
    out.emplace_back(e.length);
    in.emplace_back(e.length);
    for (std::size_t i = 0; i < e.length; ++i) out.back().data()[i] = pattern(e.offset + i, 1);
    writes.push_back(IoRequest::write(file, e.offset, out.back().bytes().first(e.length)));
    reads.push_back(IoRequest::read(file, e.offset, in.back().bytes().first(e.length)));
  }
  engine->run(writes);
  // Independent check of what reached the file, holes included.
  const std::vector<std::byte> disk = file_bytes(file.path());
  ASSERT_EQ(disk.size(), extents.back().offset + extents.back().length);
  std::vector<std::byte> expect(disk.size(), std::byte{0});
  for (const Extent& e : extents) {
    for (std::size_t i = 0; i < e.length; ++i) expect[e.offset + i] = pattern(e.offset + i, 1);
  }
  ASSERT_TRUE(disk == expect);
  engine->run(reads);
  for (std::size_t k = 0; k < extents.size(); ++k) {
    EXPECT_TRUE(std::equal(in[k].data(), in[k].data() + extents[k].length, out[k].data()))
        << "extent " << k;
  }
}

TEST_P(IoEngineTest, BatchesCompleteIndependentlyInAnyOrder) {
  IoEngineOptions options;
  options.queue_depth = 3;
  options.threads = 2;
  auto engine = make(GetParam(), options);
  const IoFile file = engine->open(dir_.path() / "batches", OpenMode::CreateExclusive);
  const std::size_t block = std::max<std::size_t>(unit(file), 4096);
  const std::size_t per_batch = 9;
  const std::size_t batches = 4;
  PinnedBuffer buffer(block * per_batch * batches);
  std::vector<IoEngine::Ticket> tickets;
  for (std::size_t b = 0; b < batches; ++b) {
    std::vector<IoRequest> batch;
    for (std::size_t r = 0; r < per_batch; ++r) {
      const std::size_t k = b * per_batch + r;
      std::byte* p = buffer.data() + k * block;
      for (std::size_t i = 0; i < block; ++i) p[i] = pattern(k * block + i, 2);
      batch.push_back(IoRequest::write(file, k * block, {p, block}));
    }
    tickets.push_back(engine->submit(batch));
  }
  for (auto it = tickets.rbegin(); it != tickets.rend(); ++it) engine->wait(*it);
  EXPECT_THROW(engine->wait(tickets.front()), Error);  // already waited for

  std::fill(buffer.data(), buffer.data() + buffer.size(), std::byte{0});
  const IoRequest all = IoRequest::read(file, 0, buffer.bytes().first(block * per_batch * batches));
  const IoRequest empty = IoRequest::read(file, 0, {});
  engine->run(std::vector<IoRequest>{all, empty});
  for (std::size_t i = 0; i < block * per_batch * batches; ++i) {
    ASSERT_EQ(buffer.data()[i], pattern(i, 2)) << "byte " << i;
  }
  engine->run({});  // an empty batch completes at once
}

TEST_P(IoEngineTest, ReadingPastEndOfFileIsAnErrorNotZeros) {
  auto engine = make(GetParam(), {});
  const IoFile file = engine->open(dir_.path() / "short", OpenMode::CreateExclusive);
  const std::size_t block = std::max<std::size_t>(unit(file), 4096);
  PinnedBuffer buffer(4 * block);
  const IoRequest write = IoRequest::write(file, 0, buffer.bytes().first(3 * block));
  engine->run({&write, 1});
  const IoRequest read = IoRequest::read(file, 0, buffer.bytes().first(4 * block));
  // A read past the end of the file throws.
  const std::string what = error_of([&] { engine->run({&read, 1}); }, ErrorCode::Io);
  EXPECT_TRUE(contains(what, "end of the file")) << what;
  EXPECT_TRUE(contains(what, file.path().string())) << what;
  // The first 3 blocks arrived (a short read), the remainder found the end.
  EXPECT_TRUE(contains(what, "after " + std::to_string(3 * block) + " bytes")) << what;
  // The engine stays usable after a failed batch.
  const IoRequest ok = IoRequest::read(file, block, buffer.bytes().first(2 * block));
  engine->run({&ok, 1});
}

TEST_P(IoEngineTest, WriteBeyondFreeSpaceNamesFileOffsetAndErrno) {
  ScratchMount small("tmpfs", 0, "size=256k");
  if (!small.ok()) GTEST_SKIP() << small.error();
  auto engine = make(GetParam(), {});
  std::optional<IoFile> file;
  try {
    file.emplace(engine->open(small.path() / "big", OpenMode::CreateExclusive));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unavailable) throw;
    GTEST_SKIP() << "tmpfs refuses O_DIRECT on this kernel: " << e.what();
  }
  const std::size_t bytes = std::size_t{1} << 20;  // 1 MiB into 256 KiB
  PinnedBuffer buffer(bytes);
  const IoRequest write = IoRequest::write(*file, 4096, buffer.bytes().first(bytes));
  try {
    engine->run({&write, 1});
    FAIL() << "writing 1 MiB into a 256 KiB tmpfs must throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_TRUE(contains(what, "ENOSPC")) << what;
    EXPECT_TRUE(contains(what, "offset 4096")) << what;
    EXPECT_TRUE(contains(what, file->path().string())) << what;
    // The kernel first writes what fits (a short write); the engine resubmits the remainder,
    // which is what fails: the message counts the bytes that made it.
    const std::size_t at = what.find("failed after ");
    ASSERT_NE(at, std::string::npos) << what;
    EXPECT_GT(std::stoull(what.substr(at + 13)), 0U) << what;
  }
}

TEST_P(IoEngineTest, RejectsMalformedRequests) {
  auto engine = make(GetParam(), {});
  const IoFile file = engine->open(dir_.path() / "bad", OpenMode::CreateExclusive);
  PinnedBuffer buffer(3 * 4096);
  const IoRequest no_file{IoOp::Read, nullptr, 0, buffer.data(), 16};
  EXPECT_THROW(engine->submit({&no_file, 1}), Error);
  EXPECT_THROW(engine->wait(12345), Error);
  if (file.direct()) {
    const std::size_t u = unit(file);
    for (const IoRequest& bad : {IoRequest::read(file, 1, buffer.bytes().first(u)),
                                 IoRequest::read(file, 0, buffer.bytes().first(u + 1)),
                                 IoRequest::read(file, 0, buffer.bytes().subspan(1, u))}) {
      try {
        engine->submit({&bad, 1});
        FAIL() << "misaligned O_DIRECT request accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_TRUE(contains(e.what(), "O_DIRECT")) << e.what();
      }
    }
  }
  EXPECT_THROW(IoFile(dir_.path() / "bad", OpenMode::CreateExclusive, false), Error);  // exists
}

TEST(UringEngine, RegisteredBuffersRoundTrip) {
  TempDir dir;
  if (auto why = testing::uring_unavailable(dir.path())) GTEST_SKIP() << *why;
  UringEngine engine;
  PinnedBuffer registered(64 * 1024);
  const std::span<std::byte> spans[] = {registered.bytes()};
  engine.register_buffers(spans);
  if (!engine.buffers_registered()) {
    std::cout << "note: the kernel refused fixed buffers; plain reads and writes used\n";
  }
  const IoFile file = engine.open(dir.path() / "fixed", OpenMode::CreateExclusive);
  for (std::size_t i = 0; i < registered.size(); ++i) registered.data()[i] = pattern(i, 3);
  // A request inside the registered buffer (fixed) and one from an unregistered buffer.
  PinnedBuffer other(8192);
  for (std::size_t i = 0; i < other.size(); ++i) other.data()[i] = pattern(65536 + i, 3);
  const std::vector<IoRequest> writes = {IoRequest::write(file, 0, registered.bytes()),
                                         IoRequest::write(file, 65536, other.bytes())};
  engine.run(writes);
  const std::vector<std::byte> disk = file_bytes(file.path());
  ASSERT_EQ(disk.size(), 65536U + 8192U);
  for (std::size_t i = 0; i < disk.size(); ++i) ASSERT_EQ(disk[i], pattern(i, 3)) << i;
  std::fill(registered.data(), registered.data() + registered.size(), std::byte{0});
  const IoRequest read = IoRequest::read(file, 4096, registered.bytes().subspan(4096, 8192));
  engine.run({&read, 1});
  for (std::size_t i = 4096; i < 4096 + 8192; ++i) ASSERT_EQ(registered.data()[i], pattern(i, 3));
}

TEST_P(IoEngineTest, BlockSizeCutsRequestsIntoPiecesThatRunConcurrently) {
  IoEngineOptions options;
  options.queue_depth = 4;
  options.threads = 3;
  options.block_size = 3 * 4096 + 100;  // not aligned: rounded down to the file's alignment
  auto engine = make(GetParam(), options);
  const IoFile file = engine->open(dir_.path() / "pieces", OpenMode::CreateExclusive);
  const std::size_t piece = piece_bytes(file, options.block_size);
  EXPECT_EQ(piece, file.direct() ? 3 * 4096 : 3 * 4096 + 100);
  // One request of 10 pieces and a bit (a short last piece), at an offset.
  const std::size_t u = unit(file);
  const std::size_t length = 10 * piece + 2 * u;
  const std::uint64_t offset = 16 * u;
  PinnedBuffer out(length);
  PinnedBuffer in(length);
  for (std::size_t i = 0; i < length; ++i) out.data()[i] = pattern(offset + i, 4);
  const IoRequest write = IoRequest::write(file, offset, out.bytes().first(length));
  engine->run({&write, 1});
  const std::vector<std::byte> disk = file_bytes(file.path());
  ASSERT_EQ(disk.size(), offset + length);
  for (std::size_t i = 0; i < length; ++i) ASSERT_EQ(disk[offset + i], pattern(offset + i, 4)) << i;
  const IoRequest read = IoRequest::read(file, offset, in.bytes().first(length));
  engine->run({&read, 1});
  EXPECT_TRUE(std::equal(in.data(), in.data() + length, out.data()));
  if (auto* uring = dynamic_cast<UringEngine*>(engine.get())) {
    EXPECT_EQ(uring->stats().sqes, 2 * 11U);  // 11 pieces each way, nothing short or retried
  }
}

TEST(PieceBytes, CapsAtOneGibSoTransfersAbove2GibAreSplit) {
  TempDir dir;
  const IoFile buffered(dir.path() / "b", OpenMode::CreateExclusive, /*direct=*/false);
  EXPECT_EQ(piece_bytes(buffered, 0), kMaxTransferBytes);
  EXPECT_EQ(piece_bytes(buffered, 5000), 5000U);
  EXPECT_EQ(piece_bytes(buffered, std::size_t{5} << 30), kMaxTransferBytes);
  // Linux moves at most 2 GiB - 4 KiB per call and io_uring's result is an int.
  EXPECT_LT(kMaxTransferBytes, (std::size_t{2} << 30) - 4096);
  // A 5 GiB + 1 request is cut into 6 pieces, none above the cap.
  const std::size_t big = (std::size_t{5} << 30) + 1;
  const std::size_t piece = piece_bytes(buffered, 0);
  EXPECT_EQ((big + piece - 1) / piece, 6U);
  std::optional<IoFile> direct;
  try {
    direct.emplace(dir.path() / "d", OpenMode::CreateExclusive, /*direct=*/true);
  } catch (const Error& e) {
    GTEST_SKIP() << "no O_DIRECT here: " << e.what();
  }
  const IoAlignment a = direct->alignment();
  EXPECT_EQ(piece_bytes(*direct, 1), std::lcm(a.offset, a.memory));  // at least one unit
  EXPECT_EQ(piece_bytes(*direct, 0) % a.offset, 0U);
  EXPECT_EQ(piece_bytes(*direct, 0), kMaxTransferBytes);
}

// The device node in /dev whose device number is dev, or empty.
std::filesystem::path device_node(dev_t dev) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == dev) {
      return entry.path();
    }
  }
  return {};
}

TEST(Alignment, LogicalBlockSizeMatchesTheDevicesOwnAnswer) {
  TempDir dir;
  struct stat st {};
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  const std::optional<std::size_t> lbs = logical_block_size(st.st_dev);
  const std::filesystem::path node = device_node(st.st_dev);
  if (!node.empty()) {
    const int fd = ::open(node.c_str(), O_RDONLY | O_CLOEXEC);
    int size = 0;
    if (fd >= 0 && ::ioctl(fd, BLKSSZGET, &size) == 0) {  // independent of sysfs
      ASSERT_TRUE(lbs.has_value()) << node;
      EXPECT_EQ(*lbs, static_cast<std::size_t>(size)) << node;
    }
    if (fd >= 0) ::close(fd);
  }
  if (lbs) {
    EXPECT_TRUE(*lbs >= 512 && std::has_single_bit(*lbs)) << *lbs;
  }
  // Memory file systems have no block device.
  struct stat shm {};
  if (::stat("/dev/shm", &shm) == 0) {
    EXPECT_FALSE(logical_block_size(shm.st_dev).has_value());
  }
  // An O_DIRECT file says where its alignment came from; without statx, the device's block.
  try {
    const IoFile f(dir.path() / "d", OpenMode::CreateExclusive, /*direct=*/true);
    const IoAlignment a = f.alignment();
    EXPECT_NE(a.source, AlignmentSource::None);
    if (a.source == AlignmentSource::LogicalBlockSize) {
      EXPECT_EQ(a.offset, lbs.value_or(0));
    }
    if (a.source == AlignmentSource::Default) {
      EXPECT_FALSE(lbs.has_value());
    }
    std::cout << "alignment " << a.offset << "/" << a.memory << " from " << to_string(a.source)
              << "\n";
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unavailable) throw;
  }
  const IoFile buffered(dir.path() / "b", OpenMode::CreateExclusive, /*direct=*/false);
  EXPECT_EQ(buffered.alignment().source, AlignmentSource::None);
}

class UringFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = testing::uring_unavailable(dir_.path())) GTEST_SKIP() << *why;
  }
  TempDir dir_;
};

TEST_F(UringFaultTest, ShortTransfersAreResubmittedForTheRemainder) {
  UringEngine engine;
  const IoFile file = engine.open(dir_.path() / "short", OpenMode::CreateExclusive);
  const std::size_t step = std::max<std::size_t>(file.alignment().offset, 4096);
  const std::size_t length = 16 * step;
  PinnedBuffer out(length);
  PinnedBuffer in(length);
  for (std::size_t i = 0; i < length; ++i) out.data()[i] = pattern(i, 5);
  engine.inject_faults_for_testing({.short_transfer = step, .eagain = 0});
  const IoRequest write = IoRequest::write(file, 0, out.bytes().first(length));
  engine.run({&write, 1});
  EXPECT_EQ(engine.stats().short_transfers, 15U);  // each SQE moved one step: 15 remainders
  EXPECT_EQ(engine.stats().sqes, 16U);
  ASSERT_TRUE(file_bytes(file.path()) == std::vector<std::byte>(out.data(), out.data() + length));
  const IoRequest read = IoRequest::read(file, 0, in.bytes().first(length));
  engine.run({&read, 1});
  EXPECT_EQ(engine.stats().short_transfers, 30U);
  EXPECT_TRUE(std::equal(in.data(), in.data() + length, out.data()));
}

TEST_F(UringFaultTest, EagainIsRetried) {
  IoEngineOptions options;
  options.queue_depth = 2;
  UringEngine engine(options);
  const IoFile file = engine.open(dir_.path() / "eagain", OpenMode::CreateExclusive);
  const std::size_t block = std::max<std::size_t>(file.alignment().offset, 4096);
  PinnedBuffer out(4 * block);
  PinnedBuffer in(4 * block);
  for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = pattern(i, 6);
  std::vector<IoRequest> writes;
  for (std::size_t k = 0; k < 4; ++k) {
    writes.push_back(IoRequest::write(file, k * block, out.bytes().subspan(k * block, block)));
  }
  engine.inject_faults_for_testing({.short_transfer = 0, .eagain = 3});
  engine.run(writes);
  EXPECT_EQ(engine.stats().retries, 3U);
  EXPECT_EQ(engine.stats().sqes, 4U + 3U);
  const IoRequest read = IoRequest::read(file, 0, in.bytes().first(4 * block));
  engine.run({&read, 1});
  EXPECT_TRUE(std::equal(in.data(), in.data() + 4 * block, out.data()));
}

TEST_F(UringFaultTest, RegisteredBuffersAndFilesAreUsedForEveryRequestInThem) {
  UringEngine engine;
  const IoFile a = engine.open(dir_.path() / "a", OpenMode::CreateExclusive);
  const IoFile b = engine.open(dir_.path() / "b", OpenMode::CreateExclusive);
  const IoFile other = engine.open(dir_.path() / "other", OpenMode::CreateExclusive);
  const std::size_t block = std::max<std::size_t>(a.alignment().offset, 4096);
  // Two registered buffers, given in descending address order on purpose.
  PinnedBuffer first(8 * block);
  PinnedBuffer second(8 * block);
  std::vector<std::span<std::byte>> spans = {first.bytes(), second.bytes()};
  if (first.data() < second.data()) std::swap(spans[0], spans[1]);
  engine.register_buffers(spans);
  const IoFile* const files[] = {&a, &b};
  engine.register_files(files);
  if (!engine.buffers_registered() || !engine.files_registered()) {
    GTEST_SKIP() << "the kernel refused fixed buffers or files here";
  }
  for (std::size_t i = 0; i < first.size(); ++i) first.data()[i] = pattern(i, 7);
  for (std::size_t i = 0; i < second.size(); ++i) second.data()[i] = pattern(i, 8);
  PinnedBuffer plain(block);
  std::fill(plain.data(), plain.data() + block, std::byte{0x5a});
  const std::vector<IoRequest> writes = {IoRequest::write(a, 0, first.bytes()),
                                         IoRequest::write(b, 0, second.bytes()),
                                         IoRequest::write(other, 0, plain.bytes())};
  engine.run(writes);
  UringEngine::Stats st = engine.stats();
  EXPECT_EQ(st.sqes, 3U);
  EXPECT_EQ(st.fixed_buffer_sqes, 2U);  // not the plain buffer
  EXPECT_EQ(st.fixed_file_sqes, 2U);    // not the unregistered file
  ASSERT_TRUE(file_bytes(a.path()) ==
              std::vector<std::byte>(first.data(), first.data() + first.size()));
  ASSERT_TRUE(file_bytes(b.path()) ==
              std::vector<std::byte>(second.data(), second.data() + second.size()));
  // A read into the middle of a registered buffer, and one straddling past its end (not fixed).
  std::fill(second.data(), second.data() + second.size(), std::byte{0});
  const IoRequest middle =
      IoRequest::read(b, 2 * block, second.bytes().subspan(2 * block, 3 * block));
  engine.run({&middle, 1});
  for (std::size_t i = 2 * block; i < 5 * block; ++i)
    ASSERT_EQ(second.data()[i], pattern(i, 8)) << i;
  st = engine.stats();
  EXPECT_EQ(st.fixed_buffer_sqes, 3U);
  EXPECT_EQ(st.fixed_file_sqes, 3U);
  // Re-registering with no files drops them: plain descriptors again.
  engine.register_files({});
  EXPECT_FALSE(engine.files_registered());
  engine.run({&middle, 1});
  EXPECT_EQ(engine.stats().fixed_file_sqes, 3U);
}

TEST_F(UringFaultTest, SqpollAndSubmitBatchingRoundTrip) {
  for (const bool poll : {false, true}) {
    IoEngineOptions options;
    options.sqpoll = poll;
    options.sqpoll_idle_ms = 10;
    options.submit_batch = 3;  // 3 SQEs per io_uring_submit
    options.queue_depth = 8;
    UringEngine engine(options);
    if (poll && !engine.sqpoll()) std::cout << "note: the kernel refused SQPOLL here\n";
    const IoFile file =
        engine.open(dir_.path() / (poll ? "poll" : "batch"), OpenMode::CreateExclusive);
    const std::size_t block = std::max<std::size_t>(file.alignment().offset, 4096);
    const std::size_t n = 20;
    PinnedBuffer out(n * block);
    PinnedBuffer in(n * block);
    for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = pattern(i, poll ? 9 : 10);
    std::vector<IoRequest> writes, reads;
    for (std::size_t k = 0; k < n; ++k) {
      writes.push_back(IoRequest::write(file, k * block, out.bytes().subspan(k * block, block)));
      reads.push_back(IoRequest::read(file, k * block, in.bytes().subspan(k * block, block)));
    }
    engine.run(writes);
    engine.run(reads);
    EXPECT_TRUE(std::equal(in.data(), in.data() + n * block, out.data())) << "sqpoll " << poll;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::Posix, IoEngineKind::Uring),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

}  // namespace
}  // namespace strait::offload
