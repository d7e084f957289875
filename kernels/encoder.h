// GPT-2 input encoding: token embedding plus learned position embedding (llm.c encoder_*).
//
// Shapes (row-major): tokens [B, T] int32 in [0, V); wte [V, C]; wpe [>= T, C]; out/dout [B, T, C].
// forward:  out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// backward: dwte[tokens[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :] (accumulates, as
//           every backward here does, so microbatch gradient accumulation needs no extra pass).
// F is float or double. Thread-safety: pure functions over caller-owned memory.
// Errors: InvalidArgument for negative sizes or a token outside [0, V) (names its position).
#pragma once

#include <cstdint>

namespace strait::kernels {

template <class F>
void encoder_forward(F* out, const std::int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                     int C, int V);

template <class F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const std::int32_t* tokens, int B, int T,
                      int C, int V);

}  // namespace strait::kernels
