/// \file
/// Re-forming a world communicator at an agreed point (an elastic job's round boundary): without
/// the ranks that were lost or are excluded (shrink), and with processes that ask to join (grow).
/// The role of NCCL's ncclCommShrink and of torchelastic's re-rendezvous, as
/// Communicator::reform() and Communicator::join() (comm/communicator.h).
///
/// Protocol (all through the job's root store; generation g re-forms into n = g + 1):
///  1. Every member of generation g that calls reform() registers under "strait/reform/<n>": its
///     rank and its view of who is gone (the ranks its transport reports lost, peer_lost(), and
///     ReformOptions::exclude). Processes in join() take a ticket from "strait/reform/<n>/joiners".
///  2. The first member to register decides (an atomic counter elects it): it waits until every
///     rank of g that no registered view calls gone has registered, at most
///     ReformOptions::deadline. Who has not registered by then is left out, as lost ("did not
///     arrive within ..."). It then writes the decision: the members of n, ordered by their rank in
///     g, then the joiners whose tickets were drawn before it decided, in ticket order (only as
///     many as the largest multiple of ReformOptions::joiners_multiple: the rest are "too late"
///     below).
///  3. Everyone reads the decision. A member left out fails with Aborted; a joiner left out (it
///     came too late) waits for generation n + 1. The members create the new world communicator
///     over a view of the store under "strait/gen/<n>": a fresh transport (new UCX worker, new
///     endpoints, only to members of n), sequence numbers from 0, communicator ids from 0.
/// Guarantees: every member of n sees the same member list. An excluded or lost process cannot
/// disturb n: its endpoints lead to the old workers only (messages to them land in generation g's
/// communicator, or nowhere once it is destroyed), and no member of n connects to it. Every wait is
/// bounded by the deadline.
/// What the caller must still agree on: an operation can complete on some ranks and fail on others
/// (a rank that dies after its last part was sent; with heartbeats, a rank whose operation was
/// still draining when the others' re-formation failed it, comm/heartbeat.h). After reform(), the
/// members should agree on what the interrupted round achieved (e.g. a Min allreduce of "my round
/// completed", as torchft's commit vote) before going on.
/// Limits (say so before relying on it):
///  - The store must outlive every rank that can be lost: a TcpStore whose server runs in a
///    process that is not a rank (a launcher-hosted or standalone store), or in a rank that is
///    never lost. With the default launch store (the server in rank 0), losing rank 0 loses the
///    store: reform() then fails with PeerLost. The store is not re-elected. `strait run --elastic`
///    (and `strait train --elastic`) host it in the launcher and say so to the ranks with
///    TORCHELASTIC_USE_AGENT_STORE=True (comm/bootstrap/launch_env.h).
///  - The decider is the first member to arrive; if it dies between being elected and writing the
///    decision, the others fail with Timeout naming it (call reform() again to retry is not
///    supported: the generation number is spent).
///  - A joiner whose ticket was admitted must arrive at the new communicator's creation; if it dies
///    in between, creation fails with Timeout (bounded by the communicator's timeout).
///  - Reformed communicators have one site (no hierarchical allreduce across sites), and take the
///    decider's heartbeat interval (its world's CommOptions::heartbeat) and STRAIT_STREAMS, so a
///    joiner need not know them.
/// Thread-safety: reform() is collective and, like every operation, is called from one thread per
/// rank; join() from any thread.
#pragma once

#include <chrono>
#include <vector>

namespace strait::comm {

/// What Communicator::reform() leaves out and admits (see the file comment for the protocol).
struct ReformOptions {
  /// Ranks of the current communicator to leave out, besides those known lost. The union of what
  /// the members pass is used, so one rank's exclusion suffices; may include the caller itself
  /// (it then gets Aborted, the others go on).
  std::vector<int> exclude{};
  /// How long the decider waits for the members that are not known lost (those still missing then
  /// are left out, and logged); the others wait for the decision up to twice this from their own
  /// arrival (the decider may have arrived later than they). Zero: the communicator's timeout.
  std::chrono::milliseconds deadline{0};
  /// Admit the processes waiting in join() (false: shrink only; they wait for a later reform).
  bool admit_joiners = true;
  /// Admit joiners only in whole multiples of this (>= 1): of the tickets drawn when the decider
  /// decides, the first (count / joiners_multiple) * joiners_multiple; the others wait for a later
  /// reform, as joiners that came too late do. For processes that are only useful together (the
  /// stages of a pipeline replica: ranks then follow ticket order, so joiner k of an admitted
  /// group is k-th of it). The decider's value is the one used.
  int joiners_multiple = 1;
};

}  // namespace strait::comm
