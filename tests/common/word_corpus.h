// A small training corpus for tests of `strait train`: about 19 KB of text from a 20-word
// vocabulary (a fixed LCG picks the words), enough for training and the 5% held-out tail with
// context 32, and learnable within a few steps. The same bytes on every run and machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace strait::test {

// Writes DIR/corpus.txt and returns its path.
inline std::filesystem::path write_word_corpus(const std::filesystem::path& dir) {
  static const std::vector<std::string> kWords = {
      "the", "quick", "brown", "fox", "jumps", "over",  "lazy", "dog", "and",  "a",
      "cat", "sat",   "on",    "mat", "while", "birds", "sing", "in",  "tall", "trees"};
  std::filesystem::path path = dir / "corpus.txt";  // not const: returned by move
  std::ofstream out(path);
  std::uint32_t state = 12345;
  for (int i = 1; i <= 4000; ++i) {
    state = state * 1664525U + 1013904223U;
    out << kWords[(state >> 16) % kWords.size()] << (i % 12 == 0 ? ".\n" : " ");
  }
  return path;
}

}  // namespace strait::test
