#include "comm/compress/codec_factory.h"

#include <fmt/format.h>

#include "comm/compress/cast_codec.h"
#include "comm/compress/codec_args.h"
#include "comm/compress/int4_codec.h"
#include "comm/compress/int8_codec.h"
#include "comm/compress/onebit_codec.h"
#include "comm/compress/powersgd.h"
#include "comm/compress/sparseloco_codec.h"
#include "comm/compress/topk_codec.h"
#include "core/error.h"

namespace strait::comm {

namespace {

AbsmaxOptions absmax_options(const detail::CodecArgs& args, std::size_t default_block, bool even) {
  AbsmaxOptions o;
  o.block = args.get_uint("block", default_block);
  if (o.block == 0 || (even && o.block % 2 != 0)) {
    args.fail_value("block", even ? "expected an even number > 0 (two elements share a byte)"
                                  : "expected a number > 0");
  }
  o.stochastic = args.get_bool("stochastic", false);
  o.seed = args.get_uint("seed", 0);
  return o;
}

}  // namespace

const std::vector<std::string_view>& codec_names() {
  static const std::vector<std::string_view> names{"none", "bf16", "fp16",  "int8",
                                                   "int4", "topk", "onebit"};
  return names;
}

std::unique_ptr<Codec> make_codec(std::string_view name, std::string_view args) {
  using detail::CodecArgs;
  if (name == "none" || name == "bf16" || name == "fp16") {
    const CodecArgs parsed(name, args, {});  // rejects any argument
    if (name == "none") return std::make_unique<CastCodec>(Cast::None);
    if (name == "bf16") return std::make_unique<CastCodec>(Cast::Bf16);
    return std::make_unique<CastCodec>(Cast::Fp16);
  }
  if (name == "int8" || name == "int4") {
    const CodecArgs parsed(name, args, {"block", "stochastic", "seed"});
    if (name == "int8") return std::make_unique<Int8Codec>(absmax_options(parsed, 256, false));
    return std::make_unique<Int4Codec>(absmax_options(parsed, 64, true));
  }
  if (name == "topk") {
    const CodecArgs parsed(name, args, {"fraction"});
    const double fraction = parsed.get_double("fraction", 0.01);
    if (!(fraction > 0.0 && fraction <= 1.0)) parsed.fail_value("fraction", "expected 0 < f <= 1");
    return std::make_unique<TopkCodec>(fraction);
  }
  if (name == "onebit") {
    const CodecArgs parsed(name, args, {"block"});
    const auto block = parsed.get_uint("block", 256);
    if (block == 0 || block % 8 != 0) {
      parsed.fail_value("block", "expected a multiple of 8 (each block's bits start a byte)");
    }
    return std::make_unique<OneBitCodec>(block);
  }
  if (name == "sparseloco") {
    const CodecArgs parsed(name, args, {"density", "chunk", "bits"});
    SparseLocoOptions o;
    o.density = parsed.get_double("density", o.density);
    o.chunk = parsed.get_uint("chunk", o.chunk);
    o.bits = static_cast<int>(parsed.get_uint("bits", 2));
    return std::make_unique<SparseLocoCodec>(o);
  }
  if (name == "powersgd") {
    throw Error(ErrorCode::InvalidArgument,
                "powersgd is not an elementwise codec: it approximates whole matrices, so it runs "
                "inside Communicator::allreduce_compressed (comm/algorithms/powersgd_allreduce.h)");
  }
  std::string names;
  for (const auto n : codec_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("unknown codec '{}'; codecs: {}, and powersgd for allreduce_compressed "
                          "(sparseloco for DiLoCo's outer average)",
                          name, names));
}

std::unique_ptr<Codec> make_codec_from_spec(std::string_view spec) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos) return make_codec(spec);
  return make_codec(spec.substr(0, colon), spec.substr(colon + 1));
}

std::string canonical_codec_spec(std::string_view spec) {
  if (PowerSgdOptions::names_powersgd(spec)) return PowerSgdOptions::parse(spec).spec();
  return make_codec_from_spec(spec)->spec();
}

}  // namespace strait::comm
