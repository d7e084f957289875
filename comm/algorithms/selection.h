// Algorithm selection: which algorithm runs a collective, as a pure function of the collective's
// name, the world size and the message size in bytes, through a table of rules (in the spirit of
// UCC's TUNE strings). Every rank must choose the same algorithm; the choice travels in each
// operation's fingerprint (comm/algorithms/collective_op.h), so ranks whose tables differ fail
// with Mismatch instead of running different message schedules into a hang.
//
// Rules, separated by ';' (the STRAIT_TUNE environment variable):
//
//   collective[:ranks=LO-HI][:sites=LO-HI][:LO-HI]:algorithm[@seg=SIZE]
//   e.g.
//   allreduce:0-4K:recursive_doubling;allreduce:4K-1M:rabenseifner;allreduce:1M-inf:ring@seg=1M
//
// Byte ranges are half-open [LO, HI) in bytes of the whole vector (count * size(dtype)), with
// suffixes K, M, G (binary: 1K = 1024; KiB, KB and lower case too) and HI = inf; rank ranges are
// inclusive, HI = inf allowed, and so are site ranges (sites=: how many sites the communicator's
// ranks form, comm/sites.h); an omitted range matches everything. seg= sets the segment size of
// a pipelined algorithm (0: unsegmented). A later rule wins over an earlier one; a collective no
// rule matches runs its first registered algorithm. The same rules as JSON (STRAIT_TUNE_FILE):
//
//   {"rules": [{"collective": "allreduce", "bytes": "0-4K", "algorithm": "recursive_doubling"},
//              {"collective": "allreduce", "ranks": "2-8", "bytes": "1M-inf",
//               "algorithm": "ring", "seg": "1M"}]}
//
// The JSON form also carries what the rule string cannot:
//   - "codec" (optional, a codec spec such as "int8" or "int4:block=32", comm/compress/codec.h):
//     the codec Communicator::allreduce_compressed uses for a message of this size when it is asked
//     for Compression{.codec = "auto"}; a rule may give a codec and no algorithm. Plain allreduce
//     never reads it, so lossy compression stays opt-in. "none" means: run uncompressed. The
//     parser keeps the spec as written; check_rule_codecs (codec_rules.h) checks it.
//   - other top-level members than "rules" are accepted and ignored, so one file can also hold a
//     tuner's measurements ("links", "tuner") and the topology ("sites", read by whoever wants it).
//     Unknown members inside a rule are still errors (a misspelt key must not be silently dropped).
// `strait tune` (tools/tune/) writes such a file; its README section lists every member.
//
// Registering an algorithm is one row in selection.cpp's table (collective, name, id, whether it
// takes seg=, how it is chosen) and its constructor in the same place of
// comm/algorithm_registry.cpp's (comm/algorithm_registry.h); Communicator::post builds the chosen
// row. Rules name the collectives whose algorithm they choose (Choice::Rules: allreduce,
// broadcast, allgather, reduce_scatter, alltoall, reduce, gather, scatter and the v forms).
// Errors:
// InvalidArgument naming the bad token (and where it came from) and listing what is valid.
// Thread-safety: tables are values; const members may be called from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strait::comm {

struct AlgorithmParams {
  std::uint64_t segment_bytes = 0;  // pipelined algorithms: bytes per message (0: unsegmented)
  bool operator==(const AlgorithmParams&) const = default;
};

// A registry row: an algorithm, how it is chosen, and (comm/algorithm_registry.h) the function
// that constructs it.
struct AlgorithmInfo {
  enum class Choice : std::uint8_t { Rules, Codec, Only };
  std::string_view collective;  // "allreduce", "broadcast", ... (comm/collective_args.h's names)
  std::string_view name;        // "ring", as in rules
  std::uint8_t id = 0;          // unique among all algorithms, never 0
  bool segmented = false;       // takes @seg=
  Choice choice = Choice::Only;
  // Whether the fingerprint carries the id: when ranks could choose differently (other rules,
  // other sites), which must then be a Mismatch, not a hang.
  bool fingerprinted = false;
};

// Every algorithm, in registration order (the first of a collective is its fallback).
std::span<const AlgorithmInfo> registered_algorithms();
// Null when there is none.
const AlgorithmInfo* find_algorithm(std::string_view collective, std::string_view name);
const AlgorithmInfo* algorithm_by_id(std::uint8_t id);

// The outcome of a selection: an algorithm and its parameters.
struct Selection {
  const AlgorithmInfo* algorithm = nullptr;
  AlgorithmParams params;
  // "ring@seg=1M", "rabenseifner".
  [[nodiscard]] std::string describe() const;
};

struct SelectionRule {
  static constexpr int kAnyRanks = std::numeric_limits<int>::max();
  static constexpr std::uint64_t kInf = std::numeric_limits<std::uint64_t>::max();
  std::string collective;
  int min_ranks = 1;  // inclusive
  int max_ranks = kAnyRanks;
  int min_sites = 1;  // inclusive
  int max_sites = kAnyRanks;
  std::uint64_t min_bytes = 0;  // [min_bytes, max_bytes)
  std::uint64_t max_bytes = kInf;
  Selection selection;  // algorithm null: the rule only gives a codec
  std::string
      codec{};  // codec spec for allreduce_compressed's "auto" (JSON only); empty: none given
  [[nodiscard]] bool matches(std::string_view coll, int world, std::uint64_t bytes,
                             int sites = 1) const;
  // The rule in STRAIT_TUNE syntax, with " codec=SPEC" appended when it gives a codec (which that
  // syntax cannot express).
  [[nodiscard]] std::string describe() const;
};

// Sizes as rules write them: "4096", "4K", "1M", "1G" (binary), "inf" for the maximum.
std::string format_rule_size(std::uint64_t bytes);
// The inverse: "4K", "1MiB", "123" (K, M, G binary, KB/KiB and lower case too). InvalidArgument
// naming `what` and the token when it is not such a size.
std::uint64_t parse_rule_size(std::string_view token, std::string_view what);

class AlgorithmTable {
 public:
  AlgorithmTable() = default;  // no rules: every collective runs its first registered algorithm

  // The built-in rules, measured on a 2-core machine with 2 and 4 ranks (selection.cpp).
  static AlgorithmTable defaults();
  // Rules in STRAIT_TUNE syntax; `source` names where they came from in error messages.
  static AlgorithmTable parse(std::string_view rules, std::string_view source = "STRAIT_TUNE");
  // Rules as JSON (the format above).
  static AlgorithmTable parse_json(std::string_view text, std::string_view source);
  // What a caller gives instead of STRAIT_TUNE_FILE / STRAIT_TUNE (the C API's config), each with
  // the source its errors name.
  struct Given {
    std::optional<std::string> file, file_source;
    std::optional<std::string> rules, rules_source;
  };
  // defaults(), then the rules of the file (given, else STRAIT_TUNE_FILE), then the rule text's
  // (given, else STRAIT_TUNE; later rules win). InvalidArgument when either is malformed or the
  // file cannot be read.
  static AlgorithmTable from_environment(const Given& given = {});

  void add(SelectionRule rule) { rules_.push_back(std::move(rule)); }
  // Appends `later`'s rules, which then take precedence.
  void append(const AlgorithmTable& later);

  // The algorithm for a `bytes`-byte `collective` over `world` ranks in `sites` sites: the last
  // matching rule's (among rules that name one), else the collective's first registered
  // algorithm. Rules that name `unavailable` are passed over (the mailbox where the ranks share
  // no memory, or the vector exceeds a slot: the next matching rule decides). InvalidArgument for
  // an unknown collective.
  [[nodiscard]] Selection choose(std::string_view collective, int world, std::uint64_t bytes,
                                 int sites = 1, const AlgorithmInfo* unavailable = nullptr) const;
  [[nodiscard]] const std::vector<SelectionRule>& rules() const noexcept { return rules_; }
  // The codec of the last matching rule that gives one, nullopt when none does (what
  // allreduce_compressed with codec "auto" runs; comm/communicator.h).
  [[nodiscard]] std::optional<std::string> choose_codec(std::string_view collective, int world,
                                                        std::uint64_t bytes) const;
  // All rules in STRAIT_TUNE syntax.
  [[nodiscard]] std::string describe() const;

 private:
  std::vector<SelectionRule> rules_;
};

}  // namespace strait::comm
