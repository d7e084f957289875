// The algorithm registry's rows construct what they name (the shape of UCC's algorithm tables,
// whose rows carry their init function): Communicator::post (comm/communicator.h) asks the
// selection table (comm/algorithms/selection.h) for a row and build_algorithm() constructs it
// from a BuildContext. Every collective of comm/collective_args.h has at least one row; adding an
// algorithm is a row in selection.cpp (name, id, how it is chosen) and its constructor at the same
// place in registry.cpp.
//
// How a collective's row is chosen (AlgorithmInfo::choice):
//   Rules  the selection rules pick among the collective's rows by size, world size and sites
//          (allreduce, broadcast, allgather, reduce_scatter, alltoall); the rule parser accepts
//          these collectives only.
//   Codec  the codec spec picks (allreduce_compressed: ring for the elementwise codecs, allgather
//          for top-k, powersgd, hierarchical with several sites): choose_compressed().
//   Only   the collective has this one algorithm.
// Thread-safety: the table is immutable.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "comm/algorithms/fingerprint.h"
#include "comm/algorithms/op_context.h"
#include "comm/algorithms/selection.h"
#include "comm/collective_args.h"
#include "comm/compress/powersgd.h"

namespace strait::comm {

struct Group;
struct Hierarchy;
class CompressionState;
class CollectiveOp;

// What a compressed allreduce was asked for, resolved once before anything is sent.
struct CodecChoice {
  std::string spec;  // canonical: what every rank must agree on
  std::optional<PowerSgdOptions> powersgd{};
  std::shared_ptr<const PowerSgdPlan> plan{};  // powersgd only
  std::uint64_t spec_hash = 0;                 // the fingerprint's counts
  std::string key{};                           // error feedback's key; empty: none
};

struct BuildContext {
  const CollectiveArgs& args;
  OpContext context;                           // group, sequence number, bytes-sent counter
  std::shared_ptr<const Hierarchy> hierarchy;  // null: one site (split communicators)
  AlgorithmParams params{};
  const Fingerprint& fingerprint;
  const CodecChoice* codec = nullptr;  // allreduce_compressed
  std::shared_ptr<CompressionState> compression{};
};

// Constructs the algorithm of `row` (a row of registered_algorithms()). Internal when it has no
// constructor (the two halves of the table differ: a bug).
std::unique_ptr<CollectiveOp> build_algorithm(const AlgorithmInfo& row, const BuildContext& ctx);
[[nodiscard]] bool has_constructor(const AlgorithmInfo& row) noexcept;

// The row of a compressed allreduce with `codec`: powersgd, allgather (top-k), hierarchical (an
// elementwise codec with several sites) or ring.
const AlgorithmInfo& choose_compressed(const CodecChoice& codec, bool multi_site);

// The sequence numbers an operation built by `row` takes (PowerSGD takes several).
std::uint64_t sequence_numbers(const AlgorithmInfo& row);

}  // namespace strait::comm
