// The CommOptions of a straitConfig_t (capi/strait.h): each field the config sets, and the
// environment's value (CommOptions' defaults, STRAIT_TUNE_FILE, STRAIT_TUNE) for each it leaves
// unset. A NULL config leaves every field unset.
// The algorithm rules: the built-in table, then the rules of tuneFile (else STRAIT_TUNE_FILE's),
// then tune's (else STRAIT_TUNE's), as AlgorithmTable::from_environment orders them.
// Errors: InvalidArgument naming `function` and the field (a bad struct header, timeoutMs or
// streams out of range, sites NULL with siteCount > 0, an unreadable tune file or malformed rules),
// and those of CommOptions' defaults for a bad environment.
// Thread-safety: reads the environment (getenv).
#pragma once

#include "capi/strait.h"
#include "comm/communicator.h"

namespace strait::capi {

[[nodiscard]] comm::CommOptions options_from(const straitConfig_t* config, const char* function);

}  // namespace strait::capi
