#include "model/transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "model/mix64.h"

namespace strait::sched {
namespace {

namespace k = strait::kernels;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

std::size_t sz(int x) {
  return static_cast<std::size_t>(x);
}

// FNV-1a, 64 bit: a fixed, documented string hash (std::hash is implementation-defined).
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// N(0, stddev) values for one tensor, a function of (seed, name) only. Box-Muller on
// std::mt19937_64, whose output sequence the standard fixes (std::normal_distribution's is not).
template <class F>
void fill_normal(std::span<F> out, double stddev, std::uint64_t seed, std::string_view name) {
  std::mt19937_64 gen(mix64(mix64(seed) ^ fnv1a(name)));
  constexpr double kTwoPow53 = 9007199254740992.0;
  auto uniform = [&gen] { return static_cast<double>(gen() >> 11) / kTwoPow53; };  // [0, 1)
  for (std::size_t i = 0; i < out.size(); i += 2) {
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double phi = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<F>(stddev * r * std::cos(phi));
    if (i + 1 < out.size()) out[i + 1] = static_cast<F>(stddev * r * std::sin(phi));
  }
}

std::string block_name(int layer, std::string_view suffix) {
  return fmt::format("h.{}.{}", layer, suffix);
}

}  // namespace

void GptConfig::validate() const {
  auto need_positive = [](int v, const char* field, const char* what) {
    if (v <= 0) {
      invalid(fmt::format("GptConfig: {} = {} must be positive ({})", field, v, what));
    }
  };
  need_positive(vocab, "vocab", "the number of token ids; 256 for bytes");
  need_positive(ctx, "ctx", "the longest sequence the model accepts");
  need_positive(layers, "layers", "the number of transformer blocks");
  need_positive(dim, "dim", "the channel width C");
  need_positive(heads, "heads", "the number of attention heads");
  if (dim % heads != 0) {
    invalid(
        fmt::format("GptConfig: dim = {} is not divisible by heads = {}: pick heads that "
                    "divide dim (head size = dim / heads)",
                    dim, heads));
  }
  // Kernel sizes are int: keep the largest per-call count (4C channels) far from overflow.
  if (dim > (1 << 24) || vocab > (1 << 28) || ctx > (1 << 20)) {
    invalid(
        fmt::format("GptConfig: dim = {}, vocab = {} or ctx = {} is beyond what this CPU "
                    "reference model supports (dim <= 2^24, vocab <= 2^28, ctx <= 2^20)",
                    dim, vocab, ctx));
  }
}

std::size_t GptConfig::num_params() const {
  const std::size_t c = sz(dim);
  const std::size_t per_block = 12 * c * c + 13 * c;
  return sz(vocab) * c + sz(ctx) * c + sz(layers) * per_block + 2 * c;
}

std::vector<LayerRange> split_layers(int layers, int stages) {
  if (stages < 1 || stages > layers) {
    invalid(
        fmt::format("split_layers: cannot split {} layers into {} pipeline stages: every "
                    "stage needs at least one layer, so use 1 <= stages <= layers",
                    layers, stages));
  }
  std::vector<LayerRange> out;
  const int base = layers / stages;
  const int extra = layers % stages;
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int n = base + (s < extra ? 1 : 0);
    out.push_back({first, first + n});
    first += n;
  }
  return out;
}

template <class F>
std::size_t StageModel<F>::add_tensor(const std::string& name, std::vector<int> shape, bool decay) {
  std::size_t count = 1;
  for (const int d : shape) count *= sz(d);
  const std::size_t offset = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().count;
  tensors_.push_back({name, offset, count, std::move(shape), decay});
  return offset;
}

template <class F>
StageModel<F>::StageModel(const GptConfig& config, LayerRange layers, int max_batch, int slots,
                          std::uint64_t seed)
    : StageModel(config, layers, max_batch, slots, seed, {}, {}) {}

template <class F>
std::size_t StageModel<F>::parameter_count(const GptConfig& config, LayerRange layers) {
  config.validate();
  if (layers.first < 0 || layers.first >= layers.last || layers.last > config.layers) {
    invalid(
        fmt::format("StageModel: layer range [{}, {}) is not a non-empty part of the model's "
                    "{} layers: use split_layers()",
                    layers.first, layers.last, config.layers));
  }
  const std::size_t c = sz(config.dim);
  const bool first = layers.first == 0;
  const bool last = layers.last == config.layers;
  // Per block: ln_1, attn (qkv, proj), ln_2, mlp (fc, proj), weights and biases.
  const std::size_t block =
      2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + (4 * c * c + c);
  return (first || last ? sz(config.vocab) * c : 0) + (first ? sz(config.ctx) * c : 0) +
         sz(layers.last - layers.first) * block + (last ? 2 * c : 0);
}

template <class F>
StageModel<F>::StageModel(const GptConfig& config, LayerRange layers, int max_batch, int slots,
                          std::uint64_t seed, std::span<F> params, std::span<F> grads)
    : config_(config), range_(layers), max_batch_(max_batch) {
  config_.validate();
  if (layers.first < 0 || layers.first >= layers.last || layers.last > config_.layers) {
    invalid(
        fmt::format("StageModel: layer range [{}, {}) is not a non-empty part of the model's "
                    "{} layers: use split_layers()",
                    layers.first, layers.last, config_.layers));
  }
  // Rows B * T reach the kernels as int.
  if (max_batch < 1 || sz(max_batch) * sz(config_.ctx) > sz(std::numeric_limits<int>::max() / 4)) {
    invalid(
        fmt::format("StageModel: max_batch = {} must be at least 1 and max_batch * ctx ({}) "
                    "must stay below 2^29 positions",
                    max_batch, config_.ctx));
  }
  if (slots < 1) {
    invalid(
        fmt::format("StageModel: slots = {} must be at least 1 (the number of microbatches "
                    "whose activations are kept between forward and backward)",
                    slots));
  }
  const int V = config_.vocab, C = config_.dim, ctx = config_.ctx;

  // Parameter layout: [wte] [wpe] blocks... [ln_f].
  if (is_first() || is_last()) wte_ = add_tensor("wte", {V, C}, true);
  if (is_first()) wpe_ = add_tensor("wpe", {ctx, C}, true);
  for (int l = range_.first; l < range_.last; ++l) {
    BlockParams p{};
    p.ln1_w = add_tensor(block_name(l, "ln_1.weight"), {C}, false);
    p.ln1_b = add_tensor(block_name(l, "ln_1.bias"), {C}, false);
    p.qkv_w = add_tensor(block_name(l, "attn.c_attn.weight"), {3 * C, C}, true);
    p.qkv_b = add_tensor(block_name(l, "attn.c_attn.bias"), {3 * C}, false);
    p.attproj_w = add_tensor(block_name(l, "attn.c_proj.weight"), {C, C}, true);
    p.attproj_b = add_tensor(block_name(l, "attn.c_proj.bias"), {C}, false);
    p.ln2_w = add_tensor(block_name(l, "ln_2.weight"), {C}, false);
    p.ln2_b = add_tensor(block_name(l, "ln_2.bias"), {C}, false);
    p.fc_w = add_tensor(block_name(l, "mlp.c_fc.weight"), {4 * C, C}, true);
    p.fc_b = add_tensor(block_name(l, "mlp.c_fc.bias"), {4 * C}, false);
    p.fcproj_w = add_tensor(block_name(l, "mlp.c_proj.weight"), {C, 4 * C}, true);
    p.fcproj_b = add_tensor(block_name(l, "mlp.c_proj.bias"), {C}, false);
    blocks_.push_back(p);
  }
  if (is_last()) {
    lnf_w_ = add_tensor("ln_f.weight", {C}, false);
    lnf_b_ = add_tensor("ln_f.bias", {C}, false);
  }
  const std::size_t n_params = tensors_.back().offset + tensors_.back().count;
  if (params.empty() && grads.empty()) {
    own_params_.assign(n_params, F(0));
    own_grads_.assign(n_params, F(0));
    params = own_params_;
    grads = own_grads_;
  } else if (params.size() != n_params || grads.size() != n_params) {
    invalid(
        fmt::format("StageModel: layers [{}, {}) have {} parameters but the storage given holds "
                    "{} parameters and {} gradients: size it with parameter_count()",
                    layers.first, layers.last, n_params, params.size(), grads.size()));
  }
  params_ = params;
  grads_ = grads;
  std::fill(grads_.begin(), grads_.end(), F(0));
  init_params(seed);

  lay_out_activations(max_batch, slots);
}

// Activation layout of one slot, sized for max_batch x ctx: x0, the blocks, the head; then the
// slots and the backward pass's scratch.
template <class F>
void StageModel<F>::lay_out_activations(int max_batch, int slots) {
  const int V = config_.vocab, C = config_.dim, ctx = config_.ctx;
  const std::size_t bt = sz(max_batch) * sz(ctx);
  const std::size_t c = sz(C);
  std::size_t off = 0;
  auto take = [&off](std::size_t n) {
    const std::size_t at = off;
    off += n;
    return at;
  };
  BlockActs& a = block_acts_;
  a.ln1 = take(bt * c);
  a.ln1_mean = take(bt);
  a.ln1_rstd = take(bt);
  a.qkv = take(bt * 3 * c);
  a.att = take(sz(max_batch) * sz(config_.heads) * sz(ctx) * sz(ctx));
  a.atty = take(bt * c);
  a.res2 = take(bt * c);
  a.ln2 = take(bt * c);
  a.ln2_mean = take(bt);
  a.ln2_rstd = take(bt);
  a.fch = take(bt * 4 * c);
  a.fch_gelu = take(bt * 4 * c);
  a.out = take(bt * c);
  a.size = off;
  off = 0;
  HeadActs& h = head_acts_;
  if (is_last()) {
    h.lnf = take(bt * c);
    h.lnf_mean = take(bt);
    h.lnf_rstd = take(bt);
    h.logits = take(bt * sz(V));
    h.probs = take(bt * sz(V));
    h.losses = take(bt);
  }
  h.size = off;
  blocks_base_ = bt * c;
  head_base_ = blocks_base_ + blocks_.size() * a.size;
  ids_base_ = head_base_ + h.size;
  const std::size_t id_bytes =
      ((is_first() ? bt : 0) + (is_last() ? bt : 0)) * sizeof(std::int32_t);
  // Whole pages, so O_DIRECT moves every byte of a stash without staging.
  constexpr std::size_t page_elems = detail::PageAlignedAllocator<F>::kPage / sizeof(F);
  stash_elems_ = ids_base_ + (id_bytes + sizeof(F) - 1) / sizeof(F);
  stash_elems_ = (stash_elems_ + page_elems - 1) / page_elems * page_elems;
  slots_.resize(sz(slots));
  for (Slot& s : slots_) s.acts.assign(stash_elems_, F(0));
  ids_.assign(bt, 0);
  dres_.assign(bt * c, F(0));
  dln_.assign(bt * c, F(0));
  datty_.assign(bt * c, F(0));
  dqkv_.assign(bt * 3 * c, F(0));
  dfch_.assign(bt * 4 * c, F(0));
  dfch_gelu_.assign(bt * 4 * c, F(0));
  if (is_last()) dlogits_.assign(bt * sz(V), F(0));
  datt_scratch_.assign(sz(ctx) * sz(ctx), F(0));
}

template <class F>
void StageModel<F>::init_params(std::uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.layers);
  for (const TensorInfo& t : tensors_) {
    const std::span<F> p(params_.data() + t.offset, t.count);
    const std::string_view name = t.name;
    if (name.ends_with("c_proj.weight")) {
      fill_normal(p, residual_std, seed, name);
    } else if (t.weight_decay) {  // the other matrices and the embeddings
      fill_normal(p, 0.02, seed, name);
    } else if (name.ends_with("ln_1.weight") || name.ends_with("ln_2.weight") ||
               name == "ln_f.weight") {
      std::fill(p.begin(), p.end(), F(1));
    } else {
      std::fill(p.begin(), p.end(), F(0));  // biases
    }
  }
}

template <class F>
void StageModel<F>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), F(0));
}

template <class F>
const TensorInfo& StageModel<F>::tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return t;
  }
  invalid(
      fmt::format("StageModel: stage with layers [{}, {}) holds no tensor named '{}' (first "
                  "stage: wte, wpe; last: wte, ln_f.*; blocks: h.<layer>.*)",
                  range_.first, range_.last, name));
}

template <class F>
std::span<F> StageModel<F>::param(std::string_view name) {
  const TensorInfo& t = tensor(name);
  return {params_.data() + t.offset, t.count};
}

template <class F>
std::span<F> StageModel<F>::grad(std::string_view name) {
  const TensorInfo& t = tensor(name);
  return {grads_.data() + t.offset, t.count};
}

template <class F>
std::optional<Slice> StageModel<F>::tied_wte() const {
  if (!wte_) return std::nullopt;
  return Slice{*wte_, sz(config_.vocab) * sz(config_.dim)};
}

template <class F>
void StageModel<F>::check_slot(int slot, const char* op) const {
  if (slot < 0 || slot >= slots()) {
    invalid(
        fmt::format("StageModel::{}: slot {} is out of range [0, {}): construct the model "
                    "with more slots for more microbatches in flight",
                    op, slot, slots()));
  }
}

template <class F>
void StageModel<F>::check_batch(int B, int T, const char* op) const {
  if (B < 1 || B > max_batch_ || T < 1 || T > config_.ctx) {
    invalid(
        fmt::format("StageModel::{}: batch B = {}, T = {} is outside 1 <= B <= max_batch = "
                    "{}, 1 <= T <= ctx = {}",
                    op, B, T, max_batch_, config_.ctx));
  }
}

template <class F>
void StageModel<F>::require_role(bool ok, const char* op, const char* what) const {
  if (!ok) {
    invalid(fmt::format("StageModel::{}: the stage with layers [{}, {}) of {} ({}{}) {}", op,
                        range_.first, range_.last, config_.layers,
                        is_first() ? "first" : "not first", is_last() ? ", last" : ", not last",
                        what));
  }
}

template <class F>
void StageModel<F>::forward(int slot, const std::int32_t* tokens, int B, int T, F* out_acts) {
  require_role(is_first() && !is_last(), "forward",
               "takes tokens and writes activations only as the first of several stages");
  run_forward(slot, tokens, nullptr, nullptr, B, T, out_acts);
}

template <class F>
void StageModel<F>::forward(int slot, const F* in_acts, int B, int T, F* out_acts) {
  require_role(!is_first() && !is_last(), "forward",
               "maps activations to activations only as a middle stage");
  run_forward(slot, nullptr, in_acts, nullptr, B, T, out_acts);
}

template <class F>
double StageModel<F>::forward(int slot, const F* in_acts, const std::int32_t* targets, int B,
                              int T) {
  require_role(!is_first() && is_last(), "forward",
               "takes activations and returns the loss only as the last of several stages");
  return run_forward(slot, nullptr, in_acts, targets, B, T, nullptr);
}

template <class F>
double StageModel<F>::forward(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                              int B, int T) {
  require_role(is_first() && is_last(), "forward",
               "takes tokens and returns the loss only as the single stage of the model");
  return run_forward(slot, tokens, nullptr, targets, B, T, nullptr);
}

template <class F>
double StageModel<F>::run_forward(int slot, const std::int32_t* tokens, const F* in_acts,
                                  const std::int32_t* targets, int B, int T, F* out_acts) {
  check_slot(slot, "forward");
  Slot& s = slots_[sz(slot)];
  check_batch(B, T, "forward");
  if ((is_first() && tokens == nullptr) || (!is_first() && in_acts == nullptr) ||
      (!is_last() && out_acts == nullptr)) {
    invalid(
        "StageModel::forward: tokens (first stage), in_acts (other stages) and out_acts "
        "(non-last stages) must not be null");
  }
  if (s.weight_pending) {
    invalid(fmt::format(
        "StageModel::forward: slot {} waits for backward_weight; run it before reusing the slot",
        slot));
  }
  s.forwarded = false;  // stays false if a check below throws
  s.backwardable = false;
  s.has_loss = false;
  const int V = config_.vocab, C = config_.dim, NH = config_.heads;
  const int N = B * T;
  const auto nc = static_cast<std::ptrdiff_t>(N) * C;
  F* acts = s.acts.data();
  const F* P = params_.data();

  F* x = acts;  // the stage input, x0
  if (is_first()) {
    k::encoder_forward(x, tokens, P + *wte_, P + wpe_, B, T, C, V);
    put_ids(s, 0, tokens, N);
  } else {
    std::copy_n(in_acts, nc, x);
  }
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const BlockParams& p = blocks_[l];
    const BlockActs& o = block_acts_;
    F* a = acts + blocks_base_ + l * o.size;
    k::layernorm_forward(a + o.ln1, a + o.ln1_mean, a + o.ln1_rstd, x, P + p.ln1_w, P + p.ln1_b, N,
                         C);
    k::matmul_forward(a + o.qkv, a + o.ln1, P + p.qkv_w, P + p.qkv_b, N, C, 3 * C);
    k::attention_forward<F>(a + o.atty, nullptr, a + o.att, a + o.qkv, B, T, C, NH);
    k::matmul_forward(a + o.res2, a + o.atty, P + p.attproj_w, P + p.attproj_b, N, C, C);
    k::residual_forward(a + o.res2, a + o.res2, x, nc);
    k::layernorm_forward(a + o.ln2, a + o.ln2_mean, a + o.ln2_rstd, a + o.res2, P + p.ln2_w,
                         P + p.ln2_b, N, C);
    k::matmul_forward(a + o.fch, a + o.ln2, P + p.fc_w, P + p.fc_b, N, C, 4 * C);
    k::gelu_forward(a + o.fch_gelu, a + o.fch, 4 * nc);
    k::matmul_forward(a + o.out, a + o.fch_gelu, P + p.fcproj_w, P + p.fcproj_b, N, 4 * C, C);
    k::residual_forward(a + o.out, a + o.out, a + o.res2, nc);
    x = a + o.out;
  }
  s.B = B;
  s.T = T;
  if (!is_last()) {
    std::copy_n(x, nc, out_acts);
    s.forwarded = true;
    s.backwardable = true;
    return std::numeric_limits<double>::quiet_NaN();
  }
  const HeadActs& h = head_acts_;
  F* head = acts + head_base_;
  k::layernorm_forward(head + h.lnf, head + h.lnf_mean, head + h.lnf_rstd, x, P + lnf_w_,
                       P + lnf_b_, N, C);
  k::matmul_forward<F>(head + h.logits, head + h.lnf, P + *wte_, nullptr, N, C, V);
  s.forwarded = true;
  if (targets == nullptr) return std::numeric_limits<double>::quiet_NaN();
  const double loss =
      k::crossentropy_forward(head + h.losses, head + h.probs, head + h.logits, targets, N, V);
  put_ids(s, is_first() ? max_ids() : 0, targets, N);
  s.backwardable = true;
  s.has_loss = true;
  return loss;
}

template <class F>
void StageModel<F>::backward(int slot, const F* dout_acts, F loss_scale, F* din_acts) {
  run_backward(slot, dout_acts, loss_scale, din_acts, false);
}

template <class F>
void StageModel<F>::backward_input(int slot, const F* dout_acts, F loss_scale, F* din_acts) {
  run_backward(slot, dout_acts, loss_scale, din_acts, true);
}

template <class F>
void StageModel<F>::run_backward(int slot, const F* dout_acts, F loss_scale, F* din_acts,
                                 bool split) {
  const char* op = split ? "backward_input" : "backward";
  check_slot(slot, op);
  Slot& s = slots_[sz(slot)];
  if (!s.backwardable) {
    invalid(
        fmt::format("StageModel::{}: slot {} holds no forward to backpropagate (never "
                    "run, already backpropagated, or run without targets): run forward on "
                    "it first",
                    op, slot));
  }
  require_role(is_last() == (dout_acts == nullptr), op,
               "takes dout_acts if and only if it is not the last stage");
  require_role(is_first() == (din_acts == nullptr), op,
               "writes din_acts if and only if it is not the first stage");
  const int V = config_.vocab, C = config_.dim, NH = config_.heads;
  const int B = s.B, T = s.T, N = B * T;
  const auto nc = static_cast<std::ptrdiff_t>(N) * C;
  F* acts = s.acts.data();
  const F* P = params_.data();
  F* G = grads_.data();
  F* dres = dres_.data();
  // Input of ln_f: the output of the stage's last block (every stage has at least one).
  const F* x_last = acts + blocks_base_ + (blocks_.size() - 1) * block_acts_.size + block_acts_.out;
  // Split: weight gradients are skipped (null), and the gradient each weight op received is saved,
  // in this order, for backward_weight.
  const auto gw = [&](std::size_t offset) -> F* { return split ? nullptr : G + offset; };
  const auto ln_w = [&](std::size_t offset) { return split ? nullptr : G + offset; };
  const auto ln_b = [&](std::size_t offset) { return split ? nullptr : G + offset; };
  F* saved = nullptr;
  if (split) {
    const std::ptrdiff_t per_block = 11 * nc;
    const auto total = static_cast<std::size_t>(
        per_block * static_cast<std::ptrdiff_t>(blocks_.size()) +
        (is_last() ? static_cast<std::ptrdiff_t>(N) * V + nc : 0) + (is_first() ? nc : 0));
    s.wgrads.resize(total);
    saved = s.wgrads.data();
  }
  // The residual gradient is updated in place, so what W needs of it is copied; every other
  // gradient W replays is computed straight into the slot's wgrads (the next n values), where the
  // fused backward uses the shared scratch buffer.
  const auto save = [&](const F* from, std::ptrdiff_t n) {
    if (saved != nullptr) saved = std::copy_n(from, n, saved);
  };
  const auto buffer = [&](std::vector<F>& scratch, std::ptrdiff_t n) {
    if (saved == nullptr) return scratch.data();
    F* at = saved;
    saved += n;
    return at;
  };

  if (is_last()) {
    const HeadActs& h = head_acts_;
    F* head = acts + head_base_;
    F* dlogits = buffer(dlogits_, static_cast<std::ptrdiff_t>(N) * V);
    std::fill_n(dlogits, static_cast<std::ptrdiff_t>(N) * V, F(0));
    get_ids(s, is_first() ? max_ids() : 0, N);
    k::crossentropy_backward(dlogits, head + h.probs, ids_.data(), loss_scale / static_cast<F>(N),
                             N, V);
    F* dln = buffer(dln_, nc);
    std::fill_n(dln, nc, F(0));
    k::matmul_backward<F>(dln, gw(*wte_), nullptr, dlogits, head + h.lnf, P + *wte_, N, C, V);
    std::fill_n(dres, nc, F(0));
    k::layernorm_backward(dres, ln_w(lnf_w_), ln_b(lnf_b_), dln, x_last, P + lnf_w_,
                          head + h.lnf_mean, head + h.lnf_rstd, N, C);
  } else {
    std::copy_n(dout_acts, nc, dres);
  }
  // dres carries the gradient of the residual stream; each layernorm backward adds its branch.
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const BlockParams& p = blocks_[l];
    const BlockActs& o = block_acts_;
    F* a = acts + blocks_base_ + l * o.size;
    const F* x_in = l == 0 ? acts : acts + blocks_base_ + (l - 1) * o.size + o.out;
    // MLP branch: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
    save(dres, nc);
    std::fill_n(dfch_gelu_.begin(), 4 * nc, F(0));
    k::matmul_backward(dfch_gelu_.data(), gw(p.fcproj_w), gw(p.fcproj_b), dres, a + o.fch_gelu,
                       P + p.fcproj_w, N, 4 * C, C);
    F* dfch = buffer(dfch_, 4 * nc);
    std::fill_n(dfch, 4 * nc, F(0));
    k::gelu_backward(dfch, a + o.fch, dfch_gelu_.data(), 4 * nc);
    F* dln2 = buffer(dln_, nc);
    std::fill_n(dln2, nc, F(0));
    k::matmul_backward(dln2, gw(p.fc_w), gw(p.fc_b), dfch, a + o.ln2, P + p.fc_w, N, C, 4 * C);
    k::layernorm_backward(dres, ln_w(p.ln2_w), ln_b(p.ln2_b), dln2, a + o.res2, P + p.ln2_w,
                          a + o.ln2_mean, a + o.ln2_rstd, N, C);
    // Attention branch: res2 = x + c_proj(attn(c_attn(ln_1(x)))).
    save(dres, nc);
    std::fill_n(datty_.begin(), nc, F(0));
    k::matmul_backward(datty_.data(), gw(p.attproj_w), gw(p.attproj_b), dres, a + o.atty,
                       P + p.attproj_w, N, C, C);
    F* dqkv = buffer(dqkv_, 3 * nc);
    std::fill_n(dqkv, 3 * nc, F(0));
    k::attention_backward(dqkv, datt_scratch_.data(), datty_.data(), a + o.qkv, a + o.att, B, T, C,
                          NH);
    F* dln1 = buffer(dln_, nc);
    std::fill_n(dln1, nc, F(0));
    k::matmul_backward(dln1, gw(p.qkv_w), gw(p.qkv_b), dqkv, a + o.ln1, P + p.qkv_w, N, C, 3 * C);
    k::layernorm_backward(dres, ln_w(p.ln1_w), ln_b(p.ln1_b), dln1, x_in, P + p.ln1_w,
                          a + o.ln1_mean, a + o.ln1_rstd, N, C);
  }
  if (is_first()) {
    if (split) {
      save(dres, nc);
    } else {
      get_ids(s, 0, N);
      k::encoder_backward(G + *wte_, G + wpe_, dres, ids_.data(), B, T, C, V);
    }
  } else {
    std::copy_n(dres, nc, din_acts);
  }
  s.backwardable = false;
  s.weight_pending = split;
}

namespace {

// layernorm_backward's weight and bias gradients alone, operation for operation
// (kernels/layernorm.cpp), so that backward_weight adds the bits the fused backward adds.
template <class F>
void layernorm_weight_backward(F* dweight, F* dbias, const F* dout, const F* inp, const F* mean,
                               const F* rstd, int N, int C) {
  const auto c = static_cast<std::size_t>(C);
  for (std::size_t r = 0; r < static_cast<std::size_t>(N); ++r) {
    const F* x = inp + r * c;
    const F* d = dout + r * c;
    const F m = mean[r];
    const F s = rstd[r];
    for (std::size_t i = 0; i < c; ++i) {
      const F n = (x[i] - m) * s;
      dweight[i] += n * d[i];
      dbias[i] += d[i];
    }
  }
}

}  // namespace

template <class F>
void StageModel<F>::backward_weight(int slot) {
  check_slot(slot, "backward_weight");
  Slot& s = slots_[sz(slot)];
  if (!s.weight_pending) {
    invalid(
        fmt::format("StageModel::backward_weight: slot {} has no pending weight gradients: run "
                    "backward_input on it first",
                    slot));
  }
  const int V = config_.vocab, C = config_.dim;
  const int B = s.B, T = s.T, N = B * T;
  const auto nc = static_cast<std::ptrdiff_t>(N) * C;
  const F* acts = s.acts.data();
  const F* P = params_.data();
  F* G = grads_.data();
  // The slot's saved gradients, laid out in backward_input's order: the head's (last stage), then
  // 11 nc per block from the last block to the first, then the embedding's (first stage).
  const F* saved = s.wgrads.data();
  const std::ptrdiff_t head_size = is_last() ? static_cast<std::ptrdiff_t>(N) * V + nc : 0;
  const auto nblocks = static_cast<std::ptrdiff_t>(blocks_.size());
  const F* x_last = acts + blocks_base_ + (blocks_.size() - 1) * block_acts_.size + block_acts_.out;
  const auto head = [&] {
    const HeadActs& h = head_acts_;
    const F* hd = acts + head_base_;
    k::matmul_backward<F>(nullptr, G + *wte_, nullptr, saved, hd + h.lnf, P + *wte_, N, C, V);
    layernorm_weight_backward(G + lnf_w_, G + lnf_b_, saved + static_cast<std::ptrdiff_t>(N) * V,
                              x_last, hd + h.lnf_mean, hd + h.lnf_rstd, N, C);
  };
  // Block l's weight gradients: each tensor's own, so their order among tensors changes no bits.
  const auto block = [&](std::size_t l) {
    const BlockParams& p = blocks_[l];
    const BlockActs& o = block_acts_;
    const F* a = acts + blocks_base_ + l * o.size;
    const F* x_in = l == 0 ? acts : acts + blocks_base_ + (l - 1) * o.size + o.out;
    const F* g = saved + head_size + (nblocks - 1 - static_cast<std::ptrdiff_t>(l)) * 11 * nc;
    // g: dres (MLP), dfch, dln2, dres (attention), dqkv, dln1; the latest first (warmest in cache).
    layernorm_weight_backward(G + p.ln1_w, G + p.ln1_b, g + 10 * nc, x_in, a + o.ln1_mean,
                              a + o.ln1_rstd, N, C);
    k::matmul_backward<F>(nullptr, G + p.qkv_w, G + p.qkv_b, g + 7 * nc, a + o.ln1, P + p.qkv_w, N,
                          C, 3 * C);
    k::matmul_backward<F>(nullptr, G + p.attproj_w, G + p.attproj_b, g + 6 * nc, a + o.atty,
                          P + p.attproj_w, N, C, C);
    layernorm_weight_backward(G + p.ln2_w, G + p.ln2_b, g + 5 * nc, a + o.res2, a + o.ln2_mean,
                              a + o.ln2_rstd, N, C);
    k::matmul_backward<F>(nullptr, G + p.fc_w, G + p.fc_b, g + nc, a + o.ln2, P + p.fc_w, N, C,
                          4 * C);
    k::matmul_backward<F>(nullptr, G + p.fcproj_w, G + p.fcproj_b, g, a + o.fch_gelu,
                          P + p.fcproj_w, N, 4 * C, C);
  };
  const auto embedding = [&] {
    get_ids(s, 0, N);
    k::encoder_backward(G + *wte_, G + wpe_, saved + head_size + nblocks * 11 * nc, ids_.data(), B,
                        T, C, V);
  };
  if (is_first() && is_last()) {
    // One stage: wte is tied in place, and gets the unembedding's contribution first, the
    // embedding's last, as in the fused backward.
    head();
    for (std::size_t l = blocks_.size(); l-- > 0;) block(l);
    embedding();
  } else {
    // The reverse of backward_input's order: what it touched last is the most likely in cache.
    if (is_first()) embedding();
    for (std::size_t l = 0; l < blocks_.size(); ++l) block(l);
    if (is_last()) head();
  }
  s.weight_pending = false;
}

template <class F>
void StageModel<F>::put_ids(Slot& s, std::size_t at, const std::int32_t* ids, int n) {
  // Bytes into the float storage: memcpy is how the object representation may be written.
  std::memcpy(reinterpret_cast<std::byte*>(s.acts.data() + ids_base_) + at * sizeof(std::int32_t),
              ids, sz(n) * sizeof(std::int32_t));
}

template <class F>
void StageModel<F>::get_ids(const Slot& s, std::size_t at, int n) {
  std::memcpy(
      ids_.data(),
      reinterpret_cast<const std::byte*>(s.acts.data() + ids_base_) + at * sizeof(std::int32_t),
      sz(n) * sizeof(std::int32_t));
}

template <class F>
std::span<std::byte> StageModel<F>::stash(int slot) {
  check_slot(slot, "stash");
  return std::as_writable_bytes(std::span<F>(slots_[sz(slot)].acts));
}

template <class F>
typename StageModel<F>::StashInfo StageModel<F>::release_stash(int slot) {
  check_slot(slot, "release_stash");
  Slot& s = slots_[sz(slot)];
  if (!s.backwardable) {
    invalid(
        fmt::format("StageModel::release_stash: slot {} holds no forward to backpropagate: only "
                    "a stash that backward would take can leave the model",
                    slot));
  }
  const StashInfo info{s.B, s.T, s.has_loss};
  s.forwarded = false;
  s.backwardable = false;
  s.has_loss = false;
  return info;
}

template <class F>
void StageModel<F>::restore_stash(int slot, const StashInfo& info) {
  check_slot(slot, "restore_stash");
  check_batch(info.B, info.T, "restore_stash");
  if (info.has_loss != is_last()) {
    invalid(fmt::format("StageModel::restore_stash: has_loss = {} does not fit a {} stage",
                        info.has_loss, is_last() ? "last" : "non-last"));
  }
  Slot& s = slots_[sz(slot)];
  if (s.weight_pending) {
    invalid(fmt::format(
        "StageModel::restore_stash: slot {} waits for backward_weight; run it before reusing the "
        "slot",
        slot));
  }
  s.B = info.B;
  s.T = info.T;
  s.forwarded = true;
  s.backwardable = true;
  s.has_loss = info.has_loss;
}

template <class F>
std::span<const F> StageModel<F>::logits(int slot) const {
  check_slot(slot, "logits");
  const Slot& s = slots_[sz(slot)];
  require_role(is_last(), "logits", "has no logits: only the last stage computes them");
  if (!s.forwarded) {
    invalid(fmt::format("StageModel::logits: slot {} holds no forward: run forward first", slot));
  }
  return {s.acts.data() + head_base_ + head_acts_.logits, sz(s.B) * sz(s.T) * sz(config_.vocab)};
}

template <class F>
std::span<const F> StageModel<F>::losses(int slot) const {
  check_slot(slot, "losses");
  const Slot& s = slots_[sz(slot)];
  require_role(is_last(), "losses", "has no losses: only the last stage computes them");
  if (!s.has_loss) {
    invalid(
        fmt::format("StageModel::losses: slot {} holds no forward with targets: run forward "
                    "with targets first",
                    slot));
  }
  return {s.acts.data() + head_base_ + head_acts_.losses, sz(s.B) * sz(s.T)};
}

template class StageModel<float>;
template class StageModel<double>;

}  // namespace strait::sched
