// The flight recorders' dumps (comm/flight_recorder.h): every live communicator of this process,
// written to one JSON file per process on a trigger, for `strait diagnose` (tools/diagnose) to
// read with the other ranks' files.
//
// The file: STRAIT_FR_DUMP_DIR (default /tmp/strait-fr, created if missing) /
// strait-fr-rank<R>-<host>-<pid>.json, R the process's world rank; written whole to a temporary
// name and renamed, so a reader never sees half a dump. A later dump of the same process replaces
// it. docs/troubleshooting.md documents the format ("format": "strait-flight-recorder",
// "version": 1).
//
// Triggers: the first failure of each communicator with Timeout, Mismatch, PeerLost or Aborted
// (on_failure(), called where an operation completes), Communicator::abort(), and SIGUSR1: the
// handler only writes a byte to a pipe; a thread started with the first recorder writes the dump.
// The handler is installed once per process, unless STRAIT_FR_SIGNAL=0, and calls the handler it
// replaced (when that was a function).
// Thread-safety: any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/flight_recorder.h"
#include "core/error.h"

namespace strait::comm::fr {

// Adds `recorder` to the process's dumps while it lives; the first call sets up SIGUSR1.
void register_recorder(const std::shared_ptr<FlightRecorder>& recorder);
// Writes the dump of every live recorder; `trigger` is one word ("timeout", "signal", ...),
// `reason` what happened. Returns the file's path, or "" when there is nothing to dump or it
// could not be written (logged at WARN, never thrown: dumps run on failure paths).
std::string dump_all(std::string_view trigger, std::string_view reason);
// An operation of `recorder`'s communicator failed with `error`: dumps on the communicator's
// first Timeout, Mismatch, PeerLost or Aborted.
void on_failure(FlightRecorder& recorder, const Error& error);
// The trigger word of an error code ("timeout", "mismatch", "peer_lost", "abort"), or "" for codes
// that do not trigger a dump.
[[nodiscard]] std::string_view trigger_of(ErrorCode code) noexcept;
// The directory dumps go to (STRAIT_FR_DUMP_DIR or /tmp/strait-fr).
[[nodiscard]] std::string dump_dir();

}  // namespace strait::comm::fr
