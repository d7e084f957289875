#include "scheduler/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "scheduler/corpus.h"

namespace strait::sched {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("strait_data_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / name, std::ios::binary) << bytes;
  }

 private:
  fs::path path_;
};

std::vector<std::uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// Random lowercase text: every window differs, so equal windows mean equal offsets.
std::vector<std::uint8_t> random_text(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(letter(rng));
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

TEST(Corpus, DirectorySkipsIndexesLinksBinaryAndEmptyFiles) {
  TempDir dir;
  dir.write("b.txt", "bravo\n");
  dir.write("a.txt", "alpha\n");
  dir.write("c", "charlie");
  dir.write("a.dat", "text, but a strfile index by name");
  dir.write("e.bin", std::string("x\0y", 3));
  dir.write("f.empty", "");
  fs::create_symlink("a.txt", dir.path() / "a.u8");
  fs::create_directory(dir.path() / "sub");
  dir.write("sub/inner.txt", "inner");

  const ByteCorpus c = ByteCorpus::load(dir.path(), {.eval_fraction = 0.05, .separator = "\n"});
  EXPECT_EQ(c.bytes().size(), std::string("alpha\n\nbravo\n\ncharlie").size());
  EXPECT_EQ(std::vector<std::uint8_t>(c.bytes().begin(), c.bytes().end()),
            bytes_of("alpha\n\nbravo\n\ncharlie"));
  ASSERT_EQ(c.files().size(), 3U);
  EXPECT_EQ(c.files()[0].filename(), "a.txt");
  EXPECT_EQ(c.files()[1].filename(), "b.txt");
  EXPECT_EQ(c.files()[2].filename(), "c");
  std::map<std::string, std::string> skipped;
  for (const SkippedFile& s : c.skipped()) skipped[s.path.filename().string()] = s.reason;
  EXPECT_EQ(skipped.size(), 5U);
  EXPECT_EQ(skipped["a.dat"], "strfile index (.dat)");
  EXPECT_EQ(skipped["a.u8"], "symbolic link");
  EXPECT_EQ(skipped["e.bin"], "binary (contains NUL bytes)");
  EXPECT_EQ(skipped["f.empty"], "empty");
  EXPECT_EQ(skipped["sub"], "not a regular file");
}

TEST(Corpus, CustomSeparatorAndSingleFile) {
  TempDir dir;
  dir.write("1", "one");
  dir.write("2", "two");
  const ByteCorpus c = ByteCorpus::load(dir.path(), {.eval_fraction = 0.5, .separator = "<|>"});
  EXPECT_EQ(std::vector<std::uint8_t>(c.bytes().begin(), c.bytes().end()), bytes_of("one<|>two"));
  const ByteCorpus f = ByteCorpus::load(dir.path() / "2", {.eval_fraction = 0.5});
  EXPECT_EQ(std::vector<std::uint8_t>(f.bytes().begin(), f.bytes().end()), bytes_of("two"));
  ASSERT_EQ(f.files().size(), 1U);
}

TEST(Corpus, SplitHoldsOutTheTail) {
  const std::vector<std::uint8_t> text = random_text(1000, 1);
  const ByteCorpus c = ByteCorpus::from_bytes(text, 0.05);
  EXPECT_EQ(c.train().size(), 950U);
  EXPECT_EQ(c.eval().size(), 50U);
  EXPECT_EQ(c.train().data(), c.bytes().data());
  EXPECT_EQ(c.eval().data(), c.bytes().data() + 950);
  EXPECT_TRUE(std::equal(c.eval().begin(), c.eval().end(), text.begin() + 950));
  // floor(1001 * 0.1) = 100.
  EXPECT_EQ(ByteCorpus::from_bytes(random_text(1001, 2), 0.1).eval().size(), 100U);
  EXPECT_THROW((void)ByteCorpus::from_bytes(text, 0.0), Error);
  EXPECT_THROW((void)ByteCorpus::from_bytes(text, 1.0), Error);
}

TEST(Corpus, ErrorsSayWhatToDo) {
  TempDir dir;
  const std::string missing = error_of([&] { (void)ByteCorpus::load(dir.path() / "nope"); });
  EXPECT_NE(missing.find("data path " + (dir.path() / "nope").string() + " does not exist"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("pass --data FILE|DIR, or install the fortunes package"),
            std::string::npos)
      << missing;

  const std::string empty_dir = error_of([&] { (void)ByteCorpus::load(dir.path()); });
  EXPECT_NE(empty_dir.find("has no usable text files"), std::string::npos) << empty_dir;

  dir.write("x.dat", "index");
  fs::create_symlink("x.dat", dir.path() / "x.u8");
  const std::string only_skipped = error_of([&] { (void)ByteCorpus::load(dir.path()); });
  EXPECT_NE(only_skipped.find("no usable text files (2 entries skipped"), std::string::npos)
      << only_skipped;

  dir.write("empty", "");
  const std::string empty_file = error_of([&] { (void)ByteCorpus::load(dir.path() / "empty"); });
  EXPECT_NE(empty_file.find("is empty"), std::string::npos) << empty_file;

  dir.write("bin", std::string("a\0b", 3));
  const std::string binary = error_of([&] { (void)ByteCorpus::load(dir.path() / "bin"); });
  EXPECT_NE(binary.find("binary"), std::string::npos) << binary;
}

TEST(Dataset, TooShortCorpusNamesTheSizeNeeded) {
  // Context 64 needs 65 bytes in the 5% tail, so at least 1300 bytes in all.
  const std::string msg = error_of([] {
    ByteDataset d(ByteCorpus::from_bytes(random_text(100, 3), 0.05, "tiny.txt"), {.context = 64});
  });
  EXPECT_NE(msg.find("data corpus tiny.txt is too short for context length 64"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("it has 100 bytes, 95 for training and 5 held out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least 1300 bytes"), std::string::npos) << msg;
  // The size named is exactly the smallest that works.
  EXPECT_THROW(ByteDataset(ByteCorpus::from_bytes(random_text(1299, 3), 0.05), {.context = 64}),
               Error);
  EXPECT_NO_THROW(ByteDataset(ByteCorpus::from_bytes(random_text(1300, 3), 0.05), {.context = 64}));
  // With a large eval fraction the train part is the constraint: 2 * 65 bytes at 0.5.
  EXPECT_NE(error_of([] {
              ByteDataset d(ByteCorpus::from_bytes(random_text(100, 3), 0.5), {.context = 64});
            }).find("at least 130 bytes"),
            std::string::npos);
}

class DatasetTest : public ::testing::Test {
 protected:
  static constexpr int T = 16;
  std::vector<std::uint8_t> text_ = random_text(20000, 4);
  ByteDataset data_{ByteCorpus::from_bytes(text_, 0.05), {.context = T, .seed = 42}};

  struct Batch {
    std::vector<std::int32_t> inputs, targets;
  };
  Batch train(std::int64_t step, std::int64_t first, int count) const {
    Batch b{std::vector<std::int32_t>(static_cast<std::size_t>(count) * T),
            std::vector<std::int32_t>(static_cast<std::size_t>(count) * T)};
    data_.fill_train(step, first, count, b.inputs, b.targets);
    return b;
  }
};

TEST_F(DatasetTest, SequencesAreTheTrainBytesAtTheirOffsetShiftedByOne) {
  const int G = 8;
  const Batch b = train(3, 0, G);
  const auto trainpart = data_.corpus().train();
  for (int g = 0; g < G; ++g) {
    const std::int64_t off = data_.train_offset(3, g);
    for (int t = 0; t < T; ++t) {
      const std::size_t i = static_cast<std::size_t>(g * T + t);
      EXPECT_EQ(b.inputs[i], trainpart[static_cast<std::size_t>(off + t)]);
      EXPECT_EQ(b.targets[i], trainpart[static_cast<std::size_t>(off + t + 1)]);
      if (t + 1 < T) {
        EXPECT_EQ(b.targets[i], b.inputs[i + 1]);
      }
    }
  }
}

TEST_F(DatasetTest, SameSequencesHoweverTheBatchIsSplit) {
  const int G = 12;
  for (std::int64_t step : {0, 1, 1000000}) {
    const Batch whole = train(step, 0, G);
    // Replicas and microbatches asking for slices [0,5), [5,7), [7,12).
    std::vector<std::int32_t> inputs, targets;
    for (auto [first, count] : {std::pair{0, 5}, std::pair{5, 2}, std::pair{7, 5}}) {
      const Batch part = train(step, first, count);
      inputs.insert(inputs.end(), part.inputs.begin(), part.inputs.end());
      targets.insert(targets.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_EQ(inputs, whole.inputs) << "step " << step;
    EXPECT_EQ(targets, whole.targets) << "step " << step;
  }
  // A second dataset over the same corpus and seed is the same function.
  const ByteDataset again(ByteCorpus::from_bytes(text_, 0.05), {.context = T, .seed = 42});
  for (int g = 0; g < G; ++g) EXPECT_EQ(again.train_offset(5, g), data_.train_offset(5, g));
}

TEST_F(DatasetTest, StepsSeedsAndSequencesDiffer) {
  EXPECT_NE(train(0, 0, 4).inputs, train(1, 0, 4).inputs);
  EXPECT_NE(train(0, 0, 4).inputs, train(0, 4, 4).inputs);
  const ByteDataset other(ByteCorpus::from_bytes(text_, 0.05), {.context = T, .seed = 43});
  int same = 0;
  for (int g = 0; g < 64; ++g) same += other.train_offset(0, g) == data_.train_offset(0, g);
  EXPECT_LE(same, 2);
}

TEST_F(DatasetTest, OffsetsStayInRangeAndCoverItEvenly) {
  const auto last = static_cast<std::int64_t>(data_.corpus().train().size()) - T - 1;
  for (std::int64_t step = 0; step < 200; ++step) {
    for (std::int64_t g = 0; g < 16; ++g) {
      const std::int64_t off = data_.train_offset(step, g);
      ASSERT_GE(off, 0);
      ASSERT_LE(off, last);
    }
  }
  // A train part with exactly 10 valid offsets: each should get about a tenth of 20000 draws.
  const ByteDataset small(ByteCorpus::from_bytes(random_text(40, 5), 0.5), {.context = 10});
  std::vector<int> hits(10, 0);
  for (std::int64_t step = 0; step < 2000; ++step) {
    for (std::int64_t g = 0; g < 10; ++g) {
      const std::int64_t off = small.train_offset(step, g);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, 10);
      ++hits[static_cast<std::size_t>(off)];
    }
  }
  for (int h : hits) EXPECT_NEAR(h, 2000, 200);
}

TEST_F(DatasetTest, EvalWindowsTileTheHeldOutTail) {
  const auto eval = data_.corpus().eval();  // 1000 bytes
  ASSERT_EQ(eval.size(), 1000U);
  EXPECT_EQ(data_.eval_sequences(), (1000 - 1) / T);
  const auto n = static_cast<int>(data_.eval_sequences());
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(n) * T), targets(inputs.size());
  data_.fill_eval(0, n, inputs, targets);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(inputs[i], eval[i]);  // windows at 0, T, 2T, ... laid end to end
    EXPECT_EQ(targets[i], eval[i + 1]);
  }
  // Capped: three windows spread from the first to the last possible offset.
  const ByteDataset capped(ByteCorpus::from_bytes(text_, 0.05),
                           {.context = T, .seed = 42, .max_eval_sequences = 3});
  ASSERT_EQ(capped.eval_sequences(), 3);
  EXPECT_EQ(capped.eval_offset(0), 0);
  EXPECT_EQ(capped.eval_offset(1), (1000 - T - 1) / 2);
  EXPECT_EQ(capped.eval_offset(2), 1000 - T - 1);
  std::vector<std::int32_t> one(T), one_t(T);
  capped.fill_eval(2, 1, one, one_t);
  EXPECT_EQ(one_t.back(), eval.back());
}

TEST_F(DatasetTest, RejectsBadRequests) {
  std::vector<std::int32_t> small(T), ok(2 * T);
  EXPECT_THROW(data_.fill_train(0, 0, 2, small, ok), Error);
  EXPECT_THROW(data_.fill_train(-1, 0, 2, ok, ok), Error);
  EXPECT_THROW(data_.fill_eval(data_.eval_sequences() - 1, 2, ok, ok), Error);
  EXPECT_THROW(ByteDataset(ByteCorpus::from_bytes(text_, 0.05), {.context = 0}), Error);
}

TEST(Dataset, FortunesCorpusLoads) {
  if (!fs::is_directory(kDefaultCorpusPath)) {
    GTEST_SKIP() << kDefaultCorpusPath << " is missing: install the fortunes package "
                 << "(scripts/setup.sh does)";
  }
  const ByteCorpus c = ByteCorpus::load(kDefaultCorpusPath);
  EXPECT_GT(c.bytes().size(), 1'000'000U);
  EXPECT_FALSE(c.skipped().empty());
  for (const fs::path& p : c.files()) {
    EXPECT_NE(p.extension(), ".dat") << p;
    EXPECT_FALSE(fs::is_symlink(p)) << p;
  }
  EXPECT_EQ(std::find(c.bytes().begin(), c.bytes().end(), std::uint8_t{0}), c.bytes().end());
  const ByteDataset d(c, {.context = 256, .seed = 1});
  EXPECT_GT(d.eval_sequences(), 100);
}

}  // namespace
}  // namespace strait::sched
