// The checkpoint format (model/checkpoint.h): byte-buffer and directory round trips, a
// corrupted byte reported by its checksum, shards written by several writers, re-saving a step,
// and saves killed with SIGKILL at random moments leaving the previous checkpoint readable.
#include "model/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/common/expect_error.h"
#include "tests/common/temp_dir.h"

namespace strait::sched {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::expect_error;
using strait::test::TempDir;

std::vector<CheckpointTensor> sample_tensors(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<CheckpointTensor> out = {{"wte", {256, 8}, {}},
                                       {"h.0.ln_1.bias", {8}, {}},
                                       {"optimizer.exp_avg.wte", {256, 8}, {}},
                                       {"empty", {0, 8}, {}}};
  for (auto& t : out) {
    std::int64_t n = 1;
    for (const auto d : t.shape) n *= d;
    t.data.resize(static_cast<std::size_t>(n));
    for (float& x : t.data) x = normal(rng);
  }
  return out;
}

void expect_same(const std::vector<CheckpointTensor>& want, const CheckpointTensor& got) {
  for (const auto& w : want) {
    if (w.name != got.name) continue;
    EXPECT_EQ(got.shape, w.shape) << w.name;
    EXPECT_EQ(got.data, w.data) << w.name;  // bit for bit (no NaNs here)
    return;
  }
  ADD_FAILURE() << "unexpected tensor " << got.name;
}

// Position of a tensor's data in a buffer or shard file, from the header the format documents.
std::size_t data_offset(std::span<const std::byte> bytes, const std::string& name) {
  std::uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h |= std::to_integer<std::uint64_t>(bytes[16 + i]) << (8 * i);
  const json header =
      json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data() + 24), h));
  for (const json& e : header["tensors"]) {
    if (e["name"] == name) return e["offset"].get<std::size_t>();
  }
  ADD_FAILURE() << "no " << name;
  return 0;
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Checkpoint, BufferRoundTripIsBitExactAndCarriesTheMeta) {
  const auto tensors = sample_tensors(1);
  const json meta = {{"step", 42}, {"model", {{"dim", 8}}}};
  const std::vector<std::byte> bytes = pack_checkpoint(meta, tensors);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 8), "STRAITCK");
  const CheckpointContents back = unpack_checkpoint(bytes);
  EXPECT_EQ(back.meta, meta);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& t : back.tensors) expect_same(tensors, t);
  EXPECT_EQ(back.at("wte").shape, (std::vector<std::int64_t>{256, 8}));
  expect_error(ErrorCode::InvalidArgument, [&] { (void)back.at("wpe"); });
  std::vector<float> bias(8);
  back.read("h.0.ln_1.bias", bias);
  EXPECT_EQ(bias, tensors[1].data);
  std::vector<float> wrong(9);
  expect_error(ErrorCode::InvalidArgument, [&] { back.read("h.0.ln_1.bias", wrong); });
  // Tensor data is 64-byte aligned, as documented.
  EXPECT_EQ(data_offset(bytes, "h.0.ln_1.bias") % 64, 0U);
}

TEST(Checkpoint, CorruptedBufferByteIsReportedByItsTensorsChecksum) {
  const auto tensors = sample_tensors(2);
  std::vector<std::byte> bytes = pack_checkpoint(json::object(), tensors);
  bytes[data_offset(bytes, "h.0.ln_1.bias") + 5] ^= std::byte{0x10};
  const std::string what = error_of([&] { (void)unpack_checkpoint(bytes, "buffer from rank 3"); });
  EXPECT_NE(what.find("h.0.ln_1.bias"), std::string::npos) << what;
  EXPECT_NE(what.find("fails its checksum"), std::string::npos) << what;
  EXPECT_NE(what.find("buffer from rank 3"), std::string::npos) << what;
  // Truncation and a wrong magic are errors too, never a crash.
  expect_error(ErrorCode::Mismatch,
               [&] { (void)unpack_checkpoint(std::span(bytes).first(bytes.size() - 1)); });
  bytes[0] = std::byte{'X'};
  expect_error(ErrorCode::Mismatch, [&] { (void)unpack_checkpoint(bytes); });
}

TEST(Checkpoint, BadTensorsAreRefused) {
  expect_error(ErrorCode::InvalidArgument, [] {
    (void)pack_checkpoint({}, std::vector<CheckpointTensor>{{"a", {2, 2}, {1}}});
  });
  expect_error(ErrorCode::InvalidArgument, [] {
    (void)pack_checkpoint({}, std::vector<CheckpointTensor>{{"a", {1}, {1}}, {"a", {1}, {2}}});
  });
}

TEST(Checkpoint, ShardsFromSeveralWritersFormOneManifestReadableAsOneBuffer) {
  const TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  auto tensors = sample_tensors(3);
  const json meta = {{"step", 7}};
  begin_checkpoint(root, 7);
  write_checkpoint_shard(root, 7, 0, std::span(tensors).first(2));
  write_checkpoint_shard(root, 7, 1, std::span(tensors).subspan(2));
  // Not published before the commit: no `latest`, no step directory.
  EXPECT_FALSE(fs::exists(root / "latest"));
  EXPECT_THROW(CheckpointReader{root}, Error);
  commit_checkpoint(root, 7, 2, meta);
  EXPECT_FALSE(fs::exists(checkpoint_staging_dir(root, 7)));

  const CheckpointReader reader(root);  // through `latest`
  EXPECT_EQ(reader.dir(), checkpoint_step_dir(root, 7));
  EXPECT_EQ(reader.step(), 7);
  EXPECT_EQ(reader.meta(), meta);
  EXPECT_EQ(reader.names().size(), tensors.size());
  for (const auto& t : tensors) expect_same(tensors, reader.read(t.name));
  EXPECT_EQ(reader.manifest()["tensors"][3]["file"], "shard-1.ckpt");
  const CheckpointContents all = unpack_checkpoint(reader.pack());
  for (const auto& t : all.tensors) expect_same(tensors, t);

  // A missing tensor and a wrong size are named.
  std::vector<float> small(3);
  const std::string wrong = error_of([&] { reader.read("wte", small); });
  EXPECT_NE(wrong.find("wte has shape [256, 8]"), std::string::npos) << wrong;
  expect_error(ErrorCode::InvalidArgument, [&] { (void)reader.read("h.9.ln_1.bias"); });
  // A shard that nobody wrote fails the commit.
  begin_checkpoint(root, 8);
  write_checkpoint_shard(root, 8, 0, tensors);
  expect_error(ErrorCode::InvalidArgument, [&] { commit_checkpoint(root, 8, 2, meta); });
  EXPECT_EQ(CheckpointReader(root).step(), 7);
}

// A shard is streamed to its file from views of the caller's memory; the file is byte for byte the
// container pack_checkpoint builds in memory.
TEST(Checkpoint, StreamedShardFileIsTheSameContainerAsTheBuffer) {
  const TempDir dir;
  const auto tensors = sample_tensors(8);
  write_checkpoint(dir.path(), 2, json::object(), tensors);
  const fs::path shard = checkpoint_step_dir(dir.path(), 2) / "shard-0.ckpt";
  std::vector<std::byte> file(fs::file_size(shard));
  std::ifstream(shard, std::ios::binary)
      .read(reinterpret_cast<char*>(file.data()), static_cast<std::streamsize>(file.size()));
  EXPECT_EQ(file, pack_checkpoint({{"shard", 0}}, tensors));
}

TEST(Checkpoint, CorruptedShardFileIsReportedByItsChecksumAndFileName) {
  const TempDir dir;
  const auto tensors = sample_tensors(4);
  write_checkpoint(dir.path(), 3, json::object(), tensors);
  const fs::path shard = checkpoint_step_dir(dir.path(), 3) / "shard-0.ckpt";
  std::vector<std::byte> bytes(fs::file_size(shard));
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  const std::size_t at = data_offset(bytes, "optimizer.exp_avg.wte") + 100;
  f.seekp(static_cast<std::streamoff>(at));
  const char flipped = static_cast<char>(std::to_integer<int>(bytes[at]) ^ 1);
  f.write(&flipped, 1);
  f.close();

  const CheckpointReader reader(dir.path());
  expect_same(tensors, reader.read("wte"));  // the others still read
  const std::string what = error_of([&] { (void)reader.read("optimizer.exp_avg.wte"); });
  EXPECT_NE(what.find("optimizer.exp_avg.wte"), std::string::npos) << what;
  EXPECT_NE(what.find("fails its checksum"), std::string::npos) << what;
  EXPECT_NE(what.find("shard-0.ckpt"), std::string::npos) << what;
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesItWhole) {
  const TempDir dir;
  write_checkpoint(dir.path(), 5, {{"run", 1}}, sample_tensors(5));
  const auto second = sample_tensors(6);
  write_checkpoint(dir.path(), 5, {{"run", 2}}, second);
  const CheckpointReader reader(dir.path());
  EXPECT_EQ(reader.meta()["run"], 2);
  for (const auto& t : second) expect_same(second, reader.read(t.name));
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2U);  // latest and step-00000005: no staging left behind
}

TEST(Checkpoint, MalformedManifestOrHeaderIsAMismatchNotACrash) {
  const TempDir dir;
  write_checkpoint(dir.path(), 1, json::object(), sample_tensors(7));
  const fs::path manifest = checkpoint_step_dir(dir.path(), 1) / "manifest.json";
  json m = json::parse(std::ifstream(manifest));
  m["tensors"][0].erase("offset");
  std::ofstream(manifest) << m.dump();
  const std::string what = error_of([&] { CheckpointReader{dir.path()}; });
  EXPECT_NE(what.find("manifest.json is malformed"), std::string::npos) << what;

  // A container whose header is valid JSON without the documented fields.
  std::vector<std::byte> bytes = pack_checkpoint(json::object(), std::vector<CheckpointTensor>{});
  const std::string header = R"({"meta": {}})";
  bytes.resize(24 + header.size());
  for (int i = 0; i < 8; ++i) bytes[16 + i] = std::byte{0};
  bytes[16] = static_cast<std::byte>(header.size());
  std::memcpy(bytes.data() + 24, header.data(), header.size());
  expect_error(ErrorCode::Mismatch, [&] { (void)unpack_checkpoint(bytes); });
}

TEST(Checkpoint, MissingDirectoryIsNamed) {
  const std::string what = error_of([] { CheckpointReader("/nonexistent/ckpt"); });
  EXPECT_NE(what.find("/nonexistent/ckpt is not a directory"), std::string::npos) << what;
  const TempDir dir;
  const std::string empty = error_of([&] { CheckpointReader{dir.path()}; });
  EXPECT_NE(empty.find("neither manifest.json nor a `latest` file"), std::string::npos) << empty;
}

bool has_staging_dir(const fs::path& root) {
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(".tmp-")) return true;
  }
  return false;
}

// A writer saving step after step (each tensor filled with the step number) is killed with SIGKILL
// inside a save (a staging directory exists), a random 0-3 ms after it was seen: `latest` must
// always name a complete checkpoint whose every checksum holds, and the stale staging directory
// must confuse neither the reader nor the next writer's saves.
TEST(Checkpoint, SaveKilledWithSigkillLeavesThePreviousCheckpointReadable) {
  const TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  constexpr std::size_t kValues = std::size_t{4} << 20;  // 16 MiB per tensor, 3 tensors
  constexpr int kRounds = 6;
  std::mt19937 rng(12345);
  int killed_mid_save = 0;
  for (int round = 0; round < kRounds; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: save forever (until killed); a failure exits with 3.
      try {
        std::vector<CheckpointTensor> t;
        t.reserve(3);
        for (int k = 0; k < 3; ++k) {
          t.push_back({"t" + std::to_string(k), {static_cast<std::int64_t>(kValues)}, {}});
          t.back().data.resize(kValues);
        }
        for (std::int64_t step = 1;; ++step) {
          for (auto& x : t) std::fill(x.data.begin(), x.data.end(), static_cast<float>(step));
          write_checkpoint(root, step, {{"step", step}}, t);
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    // Parent: wait (bounded) for a complete save, then for a save in progress, then kill.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(root / "latest") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    bool staging = false;
    while (!(staging = has_staging_dir(root)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution(0, 3000)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed before it was killed: status " << status;
    killed_mid_save += staging ? 1 : 0;

    const CheckpointReader reader(root);
    const std::int64_t step = reader.step();
    EXPECT_GE(step, 1);
    for (int k = 0; k < 3; ++k) {
      const CheckpointTensor t = reader.read("t" + std::to_string(k));  // verifies the checksum
      ASSERT_EQ(t.data.size(), kValues);
      EXPECT_EQ(t.data.front(), static_cast<float>(step));
      EXPECT_EQ(t.data.back(), static_cast<float>(step));
    }
  }
  // Every round found a save in progress to kill (within the deadline).
  EXPECT_EQ(killed_mid_save, kRounds);
}

}  // namespace
}  // namespace strait::sched
