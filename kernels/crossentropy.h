// Softmax + cross-entropy over a vocabulary (GPT-2's language-model loss).
//
// Shapes (row-major): logits, probs, dlogits [N, V] with N = B * T positions; targets [N] int32 in
// [0, V); losses [N].
// forward:  probs = softmax(logits) per row, computed stably (the row max is subtracted first);
//           losses[n] = logsumexp(logits[n]) - logits[n, targets[n]] (the log-sum-exp form keeps
//           the loss finite even when a probability underflows). Returns the mean loss over the N
//           positions, accumulated in double (0 when N = 0). probs may alias logits (softmax in
//           place).
// backward: dlogits += scale * (probs - onehot(targets)), i.e. the gradient of
//           scale * sum_n losses[n]: pass scale = 1/N for the mean loss, 1/(N * microbatches) when
//           accumulating over microbatches. dlogits must not alias probs.
// F is float or double. Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for N < 0, V <= 0, or a target outside [0, V) (names its position).
#pragma once

#include <cstdint>

namespace strait::kernels {

template <class F>
double crossentropy_forward(F* losses, F* probs, const F* logits, const std::int32_t* targets,
                            int N, int V);

template <class F>
void crossentropy_backward(F* dlogits, const F* probs, const std::int32_t* targets, F scale, int N,
                           int V);

}  // namespace strait::kernels
