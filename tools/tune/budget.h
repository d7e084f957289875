// The accuracy budget of `strait tune --max-codec`: codecs ordered by how much they may change a
// gradient, so that "at most int8" is a comparison of levels.
//
//   level 0  none              lossless
//   level 1  fp16, bf16        16-bit casts (relative error 2^-11 / 2^-8 per element)
//   level 2  int8              blockwise absmax, 8 bits
//   level 3  int4              blockwise absmax, 4 bits
//   level 4  onebit, topk      biased, need error feedback (PowerSGD belongs here too)
//
// Adding a codec is one line in budget.cpp's table; a codec that make_codec() knows but the table
// does not is put at the lossiest level, so it is never chosen under a tighter budget.
// Thread-safety: pure functions over constant tables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strait::tools::tune {

inline constexpr int kLossless = 0;
inline constexpr int kLossiest = 4;

// The level of a codec name (the part of a spec before ':').
int codec_level(std::string_view codec_name);

// Every codec registered in this build (comm::codec_names()), in accuracy order (then by name).
std::vector<std::string> codecs_by_accuracy();

// The level of a --max-codec value. InvalidArgument naming the value and listing the valid names
// in accuracy order when it is not a registered codec.
int parse_max_codec(std::string_view name);

}  // namespace strait::tools::tune
