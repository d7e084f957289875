// The codecs by name: the factory over every Codec of comm/compress/ (make_codec), their specs
// ("name:key=value,...") and the names this build knows. A header of its own so that the codecs
// include only the Codec interface (codec.h) and the factory alone sees them all.
// Thread-safety: every function may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/compress/codec.h"

namespace strait::comm {

// A codec by name and "key=value,key=value" arguments, e.g. make_codec("int8", "block=256,
// stochastic=1,seed=7"). Throws InvalidArgument for an unknown name (listing the names), an
// unknown or repeated key (naming it and the valid keys) or a bad value (naming the key).
std::unique_ptr<Codec> make_codec(std::string_view name, std::string_view args = {});
// The same from "name" or "name:args" (what Codec::spec() returns).
std::unique_ptr<Codec> make_codec_from_spec(std::string_view spec);
// The canonical spec of anything allreduce_compressed takes as a codec: an elementwise codec's
// (make_codec_from_spec(spec)->spec()) or PowerSGD's (comm/compress/powersgd.h). Throws
// InvalidArgument as those do, naming the bad name, key or value.
std::string canonical_codec_spec(std::string_view spec);
// Every name make_codec() knows.
const std::vector<std::string_view>& codec_names();

}  // namespace strait::comm
