// Checking the codecs that selection rules give (comm/algorithms/selection.h, the JSON "codec"
// member), apart from the parser so that the selection table does not depend on the codecs.
// Communicator::create calls it, so a bad codec in STRAIT_TUNE_FILE fails at start-up rather than
// at the first allreduce_compressed with codec "auto".
// Errors: InvalidArgument naming the rule and the codec, with make_codec()'s reason.
// Thread-safety: pure.
#pragma once

#include "comm/algorithms/selection.h"

namespace strait::comm {

void check_rule_codecs(const AlgorithmTable& table);

}  // namespace strait::comm
