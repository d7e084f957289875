#include "model/data.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/corpus.h"
#include "tests/common/temp_dir.h"

namespace strait::sched {
namespace {

namespace fs = std::filesystem;

using strait::test::TempDir;

// Writes `bytes` to the file `name` in `dir`.
void write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir.path() / name, std::ios::binary);
  out << bytes;
  out.close();
  ASSERT_TRUE(out) << "writing " << (dir.path() / name);
}

std::vector<std::uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

std::vector<std::uint8_t> vec(std::span<const std::uint8_t> s) {
  return {s.begin(), s.end()};
}

std::string string_of(const std::vector<std::uint8_t>& v) {
  return {v.begin(), v.end()};
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
  write_file(dir, "b.txt", "bravo\n");
  write_file(dir, "a.txt", "alpha\n");
  write_file(dir, "c", "charlie");
  write_file(dir, "a.dat", "text, but a strfile index by name");
  write_file(dir, "e.bin", std::string("x\0y", 3));
  write_file(dir, "f.empty", "");
  fs::create_symlink("a.txt", dir.path() / "a.u8");
  fs::create_directory(dir.path() / "sub");
  write_file(dir, "sub/inner.txt", "inner");

  // Every file is shorter than 1 / 0.05 = 20 bytes, so none holds anything out.
  const ByteCorpus c = ByteCorpus::load(dir.path(), {.eval_fraction = 0.05, .separator = "\n"});
  EXPECT_EQ(vec(c.train()), bytes_of("alpha\n\nbravo\n\ncharlie"));
  EXPECT_TRUE(c.eval().empty());
  EXPECT_EQ(vec(c.bytes()), bytes_of("alpha\n\nbravo\n\ncharlie"));
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
  write_file(dir, "1", "one");
  write_file(dir, "2", "two");
  // floor(3 * 0.5) = 1: each file keeps 2 bytes for training and holds out its last byte.
  const ByteCorpus c = ByteCorpus::load(dir.path(), {.eval_fraction = 0.5, .separator = "<|>"});
  EXPECT_EQ(string_of(vec(c.train())), "on<|>tw");
  EXPECT_EQ(string_of(vec(c.eval())), "e<|>o");
  EXPECT_EQ(string_of(vec(c.bytes())), "on<|>twe<|>o");
  const ByteCorpus f = ByteCorpus::load(dir.path() / "2", {.eval_fraction = 0.5});
  EXPECT_EQ(string_of(vec(f.bytes())), "two");
  EXPECT_EQ(string_of(vec(f.train())), "tw");
  EXPECT_EQ(string_of(vec(f.eval())), "o");
  ASSERT_EQ(f.files().size(), 1U);
}

// Every file holds out its own last tenth (rounded down) and keeps its head for training. The
// expected parts are built here by integer arithmetic (n / 10 == floor(n * 0.1) exactly for these
// sizes) from the texts written, not through the corpus code.
TEST(Corpus, EveryFileHoldsOutItsOwnTail) {
  TempDir dir;
  // Names sorted: a, b, c, d, e, f; sizes deliberately not in name order. "c" (9 bytes) is shorter
  // than 1 / 0.1 and holds nothing out; "d" (10 bytes) holds out exactly one byte.
  const std::vector<std::pair<std::string, std::size_t>> sizes = {
      {"a", 1000}, {"b", 57}, {"c", 9}, {"d", 10}, {"e", 333}, {"f", 4096}};
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    texts.push_back(string_of(random_text(sizes[i].second, 100 + static_cast<unsigned>(i))));
    write_file(dir, sizes[i].first, texts.back());
  }
  write_file(dir, "b.dat", "skipped: a strfile index");
  const std::string sep = "<|>";

  std::string train, eval;
  std::size_t tails = 0;
  for (const std::string& t : texts) {
    const std::size_t tail = t.size() / 10;
    if (!train.empty()) train += sep;
    train += t.substr(0, t.size() - tail);
    if (tail > 0) {
      if (!eval.empty()) eval += sep;
      eval += t.substr(t.size() - tail);
      ++tails;
    }
  }
  ASSERT_EQ(tails, 5U);
  // 100 + 5 + 0 + 1 + 33 + 409 held out, 4 separators between the 5 non-empty tails.
  ASSERT_EQ(eval.size(), 548U + 4 * sep.size());
  ASSERT_EQ(train.size(), (1000 + 57 + 9 + 10 + 333 + 4096) - 548U + 5 * sep.size());

  const ByteCorpus c = ByteCorpus::load(dir.path(), {.eval_fraction = 0.1, .separator = sep});
  ASSERT_EQ(c.files().size(), 6U);
  EXPECT_EQ(c.train().size(), train.size());
  EXPECT_EQ(c.eval().size(), eval.size());
  EXPECT_EQ(string_of(vec(c.train())), train);
  EXPECT_EQ(string_of(vec(c.eval())), eval);
  // bytes() is train() then eval(), and the parts are views into it.
  EXPECT_EQ(string_of(vec(c.bytes())), train + eval);
  EXPECT_EQ(c.train().data(), c.bytes().data());
  EXPECT_EQ(c.eval().data(), c.bytes().data() + train.size());
  EXPECT_EQ(c.eval_fraction(), 0.1);
  EXPECT_EQ(c.source(), dir.path().string());

  // The same directory with a single usable file is split exactly as that file alone is.
  TempDir one;
  write_file(one, "e", texts[4]);
  write_file(one, "e.dat", "index");
  const ByteCorpus d = ByteCorpus::load(one.path(), {.eval_fraction = 0.1, .separator = sep});
  const ByteCorpus f = ByteCorpus::load(one.path() / "e", {.eval_fraction = 0.1});
  EXPECT_EQ(string_of(vec(d.train())), texts[4].substr(0, 300));
  EXPECT_EQ(string_of(vec(d.eval())), texts[4].substr(300));
  EXPECT_EQ(vec(f.train()), vec(d.train()));
  EXPECT_EQ(vec(f.eval()), vec(d.eval()));
}

// The sized read: a large file read whole, and a file whose content exceeds the size stat reports
// (/proc).
TEST(Corpus, ReadsWholeFiles) {
  TempDir dir;
  const std::string big = string_of(random_text(5'000'000, 7));
  write_file(dir, "big", big);
  const ByteCorpus c = ByteCorpus::load(dir.path() / "big", {.eval_fraction = 0.5});
  EXPECT_EQ(string_of(vec(c.bytes())), big);

  const fs::path proc = "/proc/version";  // st_size 0, content ~150 bytes
  if (fs::is_regular_file(proc) && fs::file_size(proc) == 0) {
    std::ifstream in(proc, std::ios::binary);
    const std::string expected((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(string_of(vec(ByteCorpus::load(proc, {.eval_fraction = 0.5}).bytes())), expected);
  }
}

TEST(Corpus, UnreadableFileIsAnIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: file permissions do not stop reads";
  TempDir dir;
  write_file(dir, "secret", "unreadable text");
  fs::permissions(dir.path() / "secret", fs::perms::none);
  try {
    (void)ByteCorpus::load(dir.path() / "secret");
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(
        std::string(e.what()).find("cannot open data file " + (dir.path() / "secret").string() +
                                   " for reading: Permission denied: check its permissions"),
        std::string::npos)
        << e.what();
  }
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

  write_file(dir, "x.dat", "index");
  fs::create_symlink("x.dat", dir.path() / "x.u8");
  const std::string only_skipped = error_of([&] { (void)ByteCorpus::load(dir.path()); });
  EXPECT_NE(only_skipped.find("no usable text files (2 entries skipped"), std::string::npos)
      << only_skipped;

  write_file(dir, "empty", "");
  const std::string empty_file = error_of([&] { (void)ByteCorpus::load(dir.path() / "empty"); });
  EXPECT_NE(empty_file.find("is empty"), std::string::npos) << empty_file;

  write_file(dir, "bin", std::string("a\0b", 3));
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

// The size the message names, for many contexts and fractions, is the smallest single text that
// ByteDataset accepts: one byte less is refused. The boundary is found by the corpus and dataset
// themselves, not by the arithmetic that produced the number.
TEST(Dataset, TooShortSizeIsExactForEveryFraction) {
  for (double f : {0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
    for (int ctx : {1, 2, 7, 64, 100}) {
      const std::string msg = error_of(
          [&] { ByteDataset d(ByteCorpus::from_bytes(random_text(2, 3), f), {.context = ctx}); });
      const std::string key = "the corpus must have at least ";
      const std::size_t at = msg.find(key);
      ASSERT_NE(at, std::string::npos) << msg;
      const std::size_t n = std::stoul(msg.substr(at + key.size()));
      SCOPED_TRACE("fraction " + std::to_string(f) + ", context " + std::to_string(ctx) +
                   ", size named " + std::to_string(n));
      EXPECT_NO_THROW(ByteDataset(ByteCorpus::from_bytes(random_text(n, 3), f), {.context = ctx}));
      EXPECT_THROW(ByteDataset(ByteCorpus::from_bytes(random_text(n - 1, 3), f), {.context = ctx}),
                   Error);
    }
  }
}

// Several files: no one total is exact, so the message names what each part lacks, which the test
// computes from the file sizes, and the exact size as one file.
TEST(Dataset, TooShortDirectoryNamesWhatEachPartLacks) {
  TempDir dir;
  for (const char* name : {"x", "y", "z"}) write_file(dir, name, string_of(random_text(100, 9)));
  // Each file: 95 bytes of head, 5 of tail; joined by "\n".
  const std::size_t train = 3 * 95 + 2, eval = 3 * 5 + 2;
  const std::string msg =
      error_of([&] { ByteDataset d(ByteCorpus::load(dir.path()), {.context = 64}); });
  EXPECT_NE(msg.find(fmt::format("data corpus {} is too short for context length 64: it has {} "
                                 "bytes, {} for training and {} held out for eval (the last 5% of "
                                 "each of its 3 files, joined by the separator)",
                                 dir.path().string(), train + eval, train, eval)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(fmt::format("each part needs at least 65 bytes, so the held-out part is {} "
                                 "bytes short (as a single file it would need at least 1300 bytes)",
                                 65 - eval)),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("training part is"), std::string::npos) << msg;
  // At 0.5 with context 200 both parts are short: 3 * 50 + 2 = 152 bytes each, 201 needed.
  const std::string both = error_of([&] {
    ByteDataset d(ByteCorpus::load(dir.path(), {.eval_fraction = 0.5}), {.context = 200});
  });
  EXPECT_NE(both.find("the training part is 49 bytes short and the held-out part is 49 bytes "
                      "short (as a single file it would need at least 402 bytes)"),
            std::string::npos)
      << both;
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
      const std::size_t i = static_cast<std::size_t>(g) * T + static_cast<std::size_t>(t);
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
  ASSERT_GT(c.files().size(), 1U);
  // Every file holds out its last 5% (n / 20 bytes, exact in integers), joined by "\n": the eval
  // part is their tails in file order, so it starts with the first file's tail.
  std::size_t eval = 0, train = 0, tails = 0;
  for (const fs::path& p : c.files()) {
    EXPECT_NE(p.extension(), ".dat") << p;
    EXPECT_FALSE(fs::is_symlink(p)) << p;
    const std::size_t n = fs::file_size(p);
    eval += n / 20;
    train += n - n / 20;
    tails += n / 20 > 0 ? 1 : 0;
  }
  EXPECT_EQ(c.eval().size(), eval + tails - 1);
  EXPECT_EQ(c.train().size(), train + c.files().size() - 1);
  std::ifstream first(c.files().front(), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(first)), std::istreambuf_iterator<char>());
  const std::string tail = text.substr(text.size() - text.size() / 20);
  ASSERT_FALSE(tail.empty());
  EXPECT_EQ(string_of(vec(c.eval().first(tail.size()))), tail);
  EXPECT_EQ(c.eval()[tail.size()], '\n');
  EXPECT_EQ(std::find(c.bytes().begin(), c.bytes().end(), std::uint8_t{0}), c.bytes().end());
  const ByteDataset d(c, {.context = 256, .seed = 1});
  EXPECT_GT(d.eval_sequences(), 100);
}

}  // namespace
}  // namespace strait::sched
