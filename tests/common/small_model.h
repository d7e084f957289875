// The model flags of `strait train` that the multi-process tests share: a transformer small enough
// to train a few steps in a second or two on 2 cores, so that a test is about its subject (a hung
// rank, a plan file, a quorum, a checkpoint), not the model.
#pragma once

#include <string>
#include <vector>

namespace strait::test {

// --layers LAYERS --dim 32 --heads 2 --ctx 32.
inline std::vector<std::string> small_model_flags(int layers = 2) {
  return {"--layers", std::to_string(layers), "--dim", "32", "--heads", "2", "--ctx", "32"};
}

// `head`, then `middle`, then `tail`: an argument list around a shared part.
inline std::vector<std::string> joined(std::vector<std::string> head,
                                       const std::vector<std::string>& middle,
                                       const std::vector<std::string>& tail = {}) {
  head.insert(head.end(), middle.begin(), middle.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

}  // namespace strait::test
