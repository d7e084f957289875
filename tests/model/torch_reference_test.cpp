// strait's reference transformer proven equal to PyTorch (as llm.c's test_gpt2): the model built
// from a seed is saved as a strait checkpoint, and what strait computes on one batch (logits,
// loss, every parameter's gradient, the losses of 10 AdamW steps) is saved as a second one;
// gpt2_torch_reference.py (an independent PyTorch GPT-2, run with Debian's /usr/bin/python3)
// loads both through the documented format and compares with the tolerances. Skips with
// the reason when /usr/bin/python3 has no torch.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "model/checkpoint.h"
#include "model/transformer.h"
#include "tests/common/process.h"

namespace strait::sched {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using strait::test::TempDir;

constexpr int kBatch = 4;
constexpr int kSeq = 32;
constexpr int kAdamWSteps = 10;

GptConfig config() {
  GptConfig g;
  g.vocab = 256;
  g.ctx = 32;
  g.layers = 2;
  g.dim = 64;
  g.heads = 4;
  return g;
}

std::vector<CheckpointTensor> parameters(const StageModel<float>& model, const std::string& prefix,
                                         std::span<const float> values) {
  std::vector<CheckpointTensor> out;
  for (const TensorInfo& t : model.tensors()) {
    out.push_back(
        {prefix + t.name, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()),
         std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(t.offset),
                            values.begin() + static_cast<std::ptrdiff_t>(t.offset + t.count))});
  }
  return out;
}

// Runs the PyTorch comparison; returns (exit status, output).
std::pair<int, std::string> run_torch(const fs::path& model, const fs::path& results,
                                      const fs::path& output) {
  strait::test::Process p("/usr/bin/python3", {TORCH_REFERENCE_SCRIPT, model, results}, output);
  const int code = p.exit_code(std::chrono::seconds(240));
  return {code, p.output()};
}

TEST(TorchReference, LogitsLossGradientsAndTenAdamWStepsMatchPyTorch) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch (Debian's python3-torch; scripts/setup.sh "
                    "installs it)";
  }
  const TempDir dir;
  const GptConfig g = config();
  StageModel<float> model(g, {0, g.layers}, kBatch, 1, 20240601);
  const json model_meta = {{"model",
                            {{"vocab", g.vocab},
                             {"ctx", g.ctx},
                             {"layers", g.layers},
                             {"dim", g.dim},
                             {"heads", g.heads}}}};
  write_checkpoint(dir.path() / "model", 0, model_meta, parameters(model, "", model.params()));

  // One batch of byte-like tokens from a fixed LCG; the targets are the next tokens.
  std::vector<std::int32_t> stream(static_cast<std::size_t>(kBatch * (kSeq + 1)));
  std::uint32_t state = 7;
  for (auto& t : stream) {
    state = state * 1664525U + 1013904223U;
    t = static_cast<std::int32_t>((state >> 16) % 96 + 32);
  }
  std::vector<std::int32_t> tokens, targets;
  for (int b = 0; b < kBatch; ++b) {
    const auto row = stream.begin() + b * (kSeq + 1);
    tokens.insert(tokens.end(), row, row + kSeq);
    targets.insert(targets.end(), row + 1, row + kSeq + 1);
  }

  model.zero_grads();
  const double loss = model.forward(0, tokens.data(), targets.data(), kBatch, kSeq);
  const std::span<const float> logits = model.logits(0);
  std::vector<CheckpointTensor> results = {
      {"logits", {kBatch, kSeq, g.vocab}, std::vector<float>(logits.begin(), logits.end())}};
  model.backward(0, nullptr, 1.0F, nullptr);
  for (auto& t : parameters(model, "grad.", model.grads())) results.push_back(std::move(t));

  // 10 AdamW steps on the same batch: weight decay on 2-D tensors only (transformer.h), no clip.
  kernels::AdamWHyper hyper;
  hyper.lr = 1e-3;
  hyper.beta1 = 0.9;
  hyper.beta2 = 0.95;
  hyper.eps = 1e-8;
  std::vector<float> m(model.params().size()), v(model.params().size());
  std::vector<double> losses;
  for (int step = 1; step <= kAdamWSteps; ++step) {
    model.zero_grads();
    losses.push_back(model.forward(0, tokens.data(), targets.data(), kBatch, kSeq));
    model.backward(0, nullptr, 1.0F, nullptr);
    for (const TensorInfo& t : model.tensors()) {
      kernels::AdamWHyper h = hyper;
      h.weight_decay = t.weight_decay ? 0.1 : 0.0;
      kernels::adamw_step(model.params().subspan(t.offset, t.count),
                          model.grads().subspan(t.offset, t.count),
                          std::span(m).subspan(t.offset, t.count),
                          std::span(v).subspan(t.offset, t.count), h, step);
    }
  }
  EXPECT_LT(losses.back(), losses.front());  // it trains
  const json results_meta = {{"batch", kBatch},
                             {"seq", kSeq},
                             {"tokens", tokens},
                             {"targets", targets},
                             {"loss", loss},
                             {"adamw",
                              {{"lr", hyper.lr},
                               {"beta1", hyper.beta1},
                               {"beta2", hyper.beta2},
                               {"eps", hyper.eps},
                               {"weight_decay", 0.1}}},
                             {"adamw_losses", losses}};
  write_checkpoint(dir.path() / "strait", 0, results_meta, results);

  const auto [code, out] =
      run_torch(dir.path() / "model", dir.path() / "strait", dir.path() / "out");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("all match"), std::string::npos) << out;
  std::cout << out;

  // The comparison can fail: one weight moved by 1e-3 is caught.
  std::vector<CheckpointTensor> moved;
  {
    StageModel<float> fresh(g, {0, g.layers}, kBatch, 1, 20240601);
    moved = parameters(fresh, "", fresh.params());
  }
  for (auto& t : moved) {
    if (t.name == "h.1.mlp.c_fc.weight") t.data[17] += 1e-3F;
  }
  write_checkpoint(dir.path() / "moved", 0, model_meta, moved);
  const auto [bad_code, bad_out] =
      run_torch(dir.path() / "moved", dir.path() / "strait", dir.path() / "bad-out");
  EXPECT_EQ(bad_code, 1) << bad_out;
  EXPECT_NE(bad_out.find("MISMATCH"), std::string::npos) << bad_out;
}

}  // namespace
}  // namespace strait::sched
