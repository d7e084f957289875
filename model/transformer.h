// The reference transformer: GPT-2 (Radford et al. 2019) split by layer into pipeline stages.
//
// Architecture (as nanoGPT / llm.c): learned token (wte [V, C]) and position (wpe [ctx, C])
// embeddings; L pre-LN blocks x += proj(attn(ln_1(x))); x += c_proj(gelu(c_fc(ln_2(x)))) with
// causal multi-head attention and tanh-GELU; a final ln_f; logits = ln_f(x) . wte^T (tied
// unembedding); softmax cross-entropy. Activations are [B, T, C] row-major, float type F (float
// for training, double for the finite-difference tests). Ops are in kernels/.
//
// Stages: a stage owns the contiguous layers [first, last). The first stage (first == 0) also
// owns wte and wpe; the last stage (last == L) owns ln_f and the unembedding. With more than one
// stage the last stage holds its own copy of wte, as Megatron-LM does: both copies start
// bit-identical, and the trainer keeps them so by summing the tied_wte() gradient slice between
// the first and last stage before the optimizer step.
//
// Parameters: all of a stage's parameters live in one contiguous buffer, its gradients in another
// of the same layout (one allreduce, one optimizer stream). Names are nanoGPT's without its
// "transformer." prefix, with global layer indices ("wte", "wpe", "h.3.attn.c_attn.weight",
// "ln_f.bias", ...); matrices are nn.Linear [out, in]. Weight decay applies to the 2-D tensors
// (wte, wpe and the four matrices of each block), not to biases and layernorm parameters: nanoGPT's
// configure_optimizers and llm.c's gpt2_update both use this rule.
//
// Initialisation (GPT-2 / nanoGPT): matrices and embeddings ~ N(0, 0.02); the residual output
// projections (attn.c_proj.weight, mlp.c_proj.weight) ~ N(0, 0.02 / sqrt(2 L)); biases 0;
// layernorm weight 1, bias 0. Each tensor's values are Box-Muller normals, computed in double
// (float models round them), from its own std::mt19937_64 (whose output the C++ standard fixes,
// unlike std::normal_distribution's) seeded with SplitMix64(SplitMix64(seed) ^ FNV-1a(name)). So
// they depend only on the seed and the name, never on the stage split: one stage and P stages start
// bit-identical. (libm's log/cos/sin may differ in the last bit between platforms.)
//
// Activations: the model stashes what backward needs for up to `slots` microbatches in flight
// (GPipe, 1F1B). forward(slot, ...) fills a slot; backward(slot, ...) consumes it. Buffers are
// allocated once at construction for max_batch x ctx; B <= max_batch and T <= ctx may vary per
// call (greedy generation runs B = 1 with a growing T). A slot's stash (activations, and the
// tokens / targets its backward reads) is one contiguous range of bytes, so activation offload can
// move it out of the model and back into any slot verbatim (stash / release_stash /
// restore_stash).
//
// Thread-safety: none; one thread drives a StageModel. No threads of its own (OpenBLAS may use
// its own; the caller sets their number).
// Errors: InvalidArgument for bad configs, ranges, sizes, slots, tokens, or a call that does not
// fit the stage's role (e.g. tokens given to a stage that is not the first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strait::sched {

struct GptConfig {
  int vocab = 256;  // V: byte-level by default
  int ctx = 128;    // maximum sequence length T (rows of wpe)
  int layers = 4;   // L
  int dim = 128;    // C
  int heads = 4;    // NH; head size C / NH

  // Throws InvalidArgument naming the first bad field and what to change.
  void validate() const;
  // Parameters of the whole unsplit model (wte counted once).
  [[nodiscard]] std::size_t num_params() const;
};

// Layers [first, last) of a stage.
struct LayerRange {
  int first = 0;
  int last = 0;
  bool operator==(const LayerRange&) const = default;
};

// Splits `layers` into `stages` contiguous ranges as evenly as possible; the first
// layers % stages stages get one layer more (the last stage already carries the unembedding).
// Throws InvalidArgument when stages < 1 or stages > layers.
std::vector<LayerRange> split_layers(int layers, int stages);

struct TensorInfo {
  std::string name;           // e.g. "h.3.mlp.c_fc.weight" (global layer index)
  std::size_t offset = 0;     // into params() / grads(), in elements
  std::size_t count = 0;      // elements
  std::vector<int> shape;     // row-major
  bool weight_decay = false;  // true for 2-D tensors (see above)
};

// A range of params() / grads(), in elements.
struct Slice {
  std::size_t offset = 0;
  std::size_t count = 0;
};

namespace detail {

// Allocates whole 4 KiB pages on a 4 KiB boundary: a slot's stash then moves to and from O_DIRECT
// files (activation offload to NVMe) without staging copies.
template <class T>
struct PageAlignedAllocator {
  using value_type = T;
  static constexpr std::size_t kPage = 4096;

  PageAlignedAllocator() = default;
  template <class U>
  explicit PageAlignedAllocator(const PageAlignedAllocator<U>& /*other*/) noexcept {}

  T* allocate(std::size_t n) {
    if (n > (std::numeric_limits<std::size_t>::max() - kPage) / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    const std::size_t bytes = (n * sizeof(T) + kPage - 1) / kPage * kPage;
    return static_cast<T*>(::operator new (bytes, std::align_val_t{kPage}));
  }
  void deallocate(T* p, std::size_t /*n*/) noexcept {
    ::operator delete (p, std::align_val_t{kPage});
  }
  friend bool operator==(const PageAlignedAllocator&, const PageAlignedAllocator&) = default;
};

}  // namespace detail

template <class F>
class StageModel {
 public:
  // Throws InvalidArgument for an invalid config, a range outside [0, L) or empty, max_batch < 1
  // or slots < 1.
  StageModel(const GptConfig& config, LayerRange layers, int max_batch, int slots,
             std::uint64_t seed);
  // The same over parameter and gradient storage the caller owns (RankModel puts the chunks of a
  // pipeline rank in one buffer): params and grads hold parameter_count(config, layers) elements
  // each and outlive the model; the parameters are initialised into them and the gradients zeroed.
  // Throws InvalidArgument for spans of another size.
  StageModel(const GptConfig& config, LayerRange layers, int max_batch, int slots,
             std::uint64_t seed, std::span<F> params, std::span<F> grads);
  // No copies: params() / grads() would still point at the original's buffers. A move keeps them
  // (a moved std::vector keeps its heap buffer).
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;
  StageModel(StageModel&&) noexcept = default;
  StageModel& operator=(StageModel&&) noexcept = default;
  ~StageModel() = default;

  // Elements of params() for a stage holding `layers` of `config` (validated as the constructor
  // does).
  [[nodiscard]] static std::size_t parameter_count(const GptConfig& config, LayerRange layers);

  [[nodiscard]] const GptConfig& config() const { return config_; }
  [[nodiscard]] LayerRange layers() const { return range_; }
  [[nodiscard]] bool is_first() const { return range_.first == 0; }
  [[nodiscard]] bool is_last() const { return range_.last == config_.layers; }
  [[nodiscard]] int max_batch() const { return max_batch_; }
  [[nodiscard]] int slots() const { return static_cast<int>(slots_.size()); }

  std::span<F> params() { return params_; }
  [[nodiscard]] std::span<const F> params() const { return params_; }
  std::span<F> grads() { return grads_; }
  [[nodiscard]] std::span<const F> grads() const { return grads_; }
  void zero_grads();

  // In buffer order. tensor() throws InvalidArgument for a name this stage does not hold.
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] const TensorInfo& tensor(std::string_view name) const;
  std::span<F> param(std::string_view name);
  std::span<F> grad(std::string_view name);
  // The wte slice on the first and on the last stage (the same tensor when there is one stage);
  // nullopt on middle stages.
  [[nodiscard]] std::optional<Slice> tied_wte() const;

  // Forward of one microbatch into `slot` (overwriting what it held). Inputs are copied into the
  // slot, so the caller may reuse its buffers at once. tokens/targets: [B, T] int32 in [0, V);
  // in_acts/out_acts: [B, T, C]. 1 <= B <= max_batch, 1 <= T <= ctx.
  // First stage of several: tokens -> out_acts.
  void forward(int slot, const std::int32_t* tokens, int B, int T, F* out_acts);
  // Middle stage: in_acts -> out_acts.
  void forward(int slot, const F* in_acts, int B, int T, F* out_acts);
  // Last stage of several, and the single stage: returns the mean cross-entropy over the B * T
  // positions. targets may be null (inference): then no loss is computed, NaN is returned and
  // the slot cannot be backpropagated; logits(slot) is valid either way.
  double forward(int slot, const F* in_acts, const std::int32_t* targets, int B, int T);
  double forward(int slot, const std::int32_t* tokens, const std::int32_t* targets, int B, int T);

  // Backward of the microbatch in `slot`, which must hold a forward not yet backpropagated;
  // accumulates (+=) into grads() and frees the slot.
  // Last stage: dout_acts must be null; the gradient of loss_scale * (mean loss) is propagated
  // (loss_scale = 1 / microbatches for gradient accumulation). Other stages: dout_acts [B, T, C]
  // is the gradient of the stage's output and loss_scale is ignored (the next stage applied it).
  // Non-first stages write (=) din_acts [B, T, C], the gradient of in_acts; the first stage takes
  // null.
  void backward(int slot, const F* dout_acts, F loss_scale, F* din_acts);

  // The same backward in two halves, as zero-bubble pipelines (Qi et al., "Zero Bubble Pipeline
  // Parallelism", ICLR 2024) run it. backward_input (B) takes backward's arguments and computes
  // only din_acts, what the previous stage waits for; it touches no grads() and keeps the slot,
  // saving the gradients of every weight op's output (about 11 x B x T x C values per block, plus
  // the logits' gradient on the last stage) for backward_weight (W), which accumulates the weight
  // gradients and frees the slot. W may wait: other slots' forwards and B's may run in between.
  // B then W gives bit for bit what backward gives (din_acts and grads()), and Ws run in the
  // order of the fused backwards accumulate the same bits. A slot whose W is pending cannot take
  // a forward; W without a pending B throws InvalidArgument.
  void backward_input(int slot, const F* dout_acts, F loss_scale, F* din_acts);
  void backward_weight(int slot);

  // Activation offload. A slot's stash is stash_bytes() bytes: the [max_batch x ctx]-sized
  // activation layout, then the tokens (first stage) and targets (last stage) as int32, padded to
  // whole 4 KiB pages. stash(slot) is its address, 4 KiB-aligned and fixed for the model's
  // lifetime.
  struct StashInfo {  // what the bytes do not say: the microbatch's shape and whether it has a loss
    int B = 0;
    int T = 0;
    bool has_loss = false;
  };
  [[nodiscard]] std::size_t stash_bytes() const noexcept { return stash_elems_ * sizeof(F); }
  std::span<std::byte> stash(int slot);
  // Takes the forward held in `slot` off the model's books: the slot holds nothing afterwards
  // (backward, logits and losses on it fail) but its bytes stay untouched until the next forward or
  // restore into it, so a copy of stash(slot) may still be in flight. Throws InvalidArgument when
  // the slot holds no forward to backpropagate.
  StashInfo release_stash(int slot);
  // Declares that stash(slot) holds, again, the bytes of a stash released earlier (from this slot
  // or another) with `info`: backward(slot) then computes exactly (bit for bit) what it would have
  // computed on the original slot. Throws InvalidArgument for a shape outside the model's limits.
  void restore_stash(int slot, const StashInfo& info);

  // Last stage: logits [B, T, V] of the slot's latest forward; the row of sequence b, position t
  // starts at (b * T + t) * V (greedy generation reads t = T - 1). Throws on other stages.
  [[nodiscard]] std::span<const F> logits(int slot) const;
  // Per-position losses [B, T] of the slot's latest forward with targets (last stage).
  [[nodiscard]] std::span<const F> losses(int slot) const;

 private:
  // Offsets into params_ of one block's tensors.
  struct BlockParams {
    std::size_t ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b;
    std::size_t ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  // Offsets inside a slot's activation buffer of one block's stash (from the block's base).
  struct BlockActs {
    std::size_t ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, out, size;
  };
  struct HeadActs {  // last stage only
    std::size_t lnf, lnf_mean, lnf_rstd, logits, probs, losses, size;
  };
  struct Slot {
    // The stash: activations [0, ids_base_), then the tokens (first stage: for the embedding
    // backward) and the targets (last stage: for the loss backward) as int32 bytes.
    std::vector<F, detail::PageAlignedAllocator<F>> acts;
    int B = 0;
    int T = 0;
    bool forwarded = false;       // holds a forward (logits/losses readable)
    bool backwardable = false;    // holds a forward with targets (or a non-last stage's forward)
    bool has_loss = false;        // last stage: losses of the latest forward are valid
    bool weight_pending = false;  // backward_input ran; backward_weight has not
    std::vector<F> wgrads;        // what backward_weight needs (see run_backward)
  };

  std::size_t add_tensor(const std::string& name, std::vector<int> shape, bool decay);
  void init_params(std::uint64_t seed);
  void lay_out_activations(int max_batch, int slots);
  void check_slot(int slot, const char* op) const;
  void check_batch(int B, int T, const char* op) const;
  void require_role(bool ok, const char* op, const char* what) const;
  // Tokens / targets in a slot's stash: `at` is in int32s from the start of that region; the
  // targets start at max_ids() on a stage that also holds tokens, else at 0.
  [[nodiscard]] std::size_t max_ids() const {
    return static_cast<std::size_t>(max_batch_) * static_cast<std::size_t>(config_.ctx);
  }
  void put_ids(Slot& s, std::size_t at, const std::int32_t* ids, int n);
  void get_ids(const Slot& s, std::size_t at, int n);  // into ids_
  // split = false: the fused backward; true: backward_input, saving into the slot's wgrads the
  // gradients backward_weight replays.
  void run_backward(int slot, const F* dout_acts, F loss_scale, F* din_acts, bool split);
  double run_forward(int slot, const std::int32_t* tokens, const F* in_acts,
                     const std::int32_t* targets, int B, int T, F* out_acts);

  GptConfig config_;
  LayerRange range_;
  int max_batch_;
  std::vector<TensorInfo> tensors_;
  std::vector<F> own_params_;  // empty when the caller owns the storage
  std::vector<F> own_grads_;
  std::span<F> params_;
  std::span<F> grads_;
  std::optional<std::size_t> wte_;  // offset of wte (first stage, or the last stage's copy)
  std::size_t wpe_ = 0;
  std::size_t lnf_w_ = 0;
  std::size_t lnf_b_ = 0;
  std::vector<BlockParams> blocks_;
  BlockActs block_acts_{};
  HeadActs head_acts_{};
  std::size_t blocks_base_ = 0;  // after the stage input x0 [B, T, C]
  std::size_t head_base_ = 0;
  std::size_t ids_base_ = 0;     // elements: where the tokens / targets start
  std::size_t stash_elems_ = 0;  // elements of Slot::acts
  std::vector<Slot> slots_;
  std::vector<std::int32_t>
      ids_;  // backward's copy of a slot's tokens or targets [max_batch x ctx]
  // Backward scratch, shared by all slots (one backward runs at a time).
  std::vector<F> dres_, dln_, datty_, dqkv_, dfch_, dfch_gelu_, dlogits_, datt_scratch_;
};

extern template class StageModel<float>;
extern template class StageModel<double>;

}  // namespace strait::sched
