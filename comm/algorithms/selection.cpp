#include "comm/algorithms/selection.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/params.h"

namespace strait::comm {
namespace {

// The registry's rows: one per algorithm. Ids are unique across collectives and must not change
// meaning within a job (all ranks run one build). The first row of a collective is the one it runs
// when no rule matches. Each row's constructor stands at the same place of
// comm/algorithm_registry.cpp's table (checked there): this half stays free of the algorithms'
// code, so the parsers and the fingerprint's describe() link without them (the fuzz targets, the
// tuner).
using Choice = AlgorithmInfo::Choice;
constexpr std::array kAlgorithms = {
    AlgorithmInfo{"allreduce", "ring", 1, true, Choice::Rules, true},
    AlgorithmInfo{"allreduce", "recursive_doubling", 2, false, Choice::Rules, true},
    AlgorithmInfo{"allreduce", "rabenseifner", 3, false, Choice::Rules, true},
    // comm/algorithms/hierarchical_allreduce.h; seg= pipelines its inter-site ring.
    AlgorithmInfo{"allreduce", "hierarchical", 4, true, Choice::Rules, true},
    // comm/algorithms/direct_allreduce.h: ranks on one host, by rule only.
    AlgorithmInfo{"allreduce", "direct", 22, false, Choice::Rules, true},
    // comm/algorithms/mailbox_allreduce.h: ranks on one host, a slot (1 MiB) at a time; where it
    // cannot run, the next matching rule decides (Communicator::post).
    AlgorithmInfo{"allreduce", "mailbox", 23, false, Choice::Rules, true},
    AlgorithmInfo{"allreduce_compressed", "ring", 5, false, Choice::Codec, false},
    AlgorithmInfo{"allreduce_compressed", "allgather", 6, false, Choice::Codec, false},
    AlgorithmInfo{"allreduce_compressed", "powersgd", 7, false, Choice::Codec, false},
    // Compressed only between sites: which ranks share a site is not in the codec spec.
    AlgorithmInfo{"allreduce_compressed", "hierarchical", 8, false, Choice::Codec, true},
    AlgorithmInfo{"broadcast", "binomial", 9, false, Choice::Rules, true},
    AlgorithmInfo{"reduce", "binomial", 10, false, Choice::Rules, true},
    AlgorithmInfo{"gather", "binomial", 11, false, Choice::Rules, true},
    AlgorithmInfo{"scatter", "binomial", 12, false, Choice::Rules, true},
    AlgorithmInfo{"allgather", "ring", 13, false, Choice::Rules, true},
    AlgorithmInfo{"allgather_v", "ring", 14, false, Choice::Rules, true},
    AlgorithmInfo{"reduce_scatter", "ring", 15, false, Choice::Rules, true},
    AlgorithmInfo{"reduce_scatter_v", "ring", 16, false, Choice::Rules, true},
    AlgorithmInfo{"alltoall", "pairwise", 17, false, Choice::Rules, true},
    AlgorithmInfo{"alltoall_v", "pairwise", 18, false, Choice::Rules, true},
    AlgorithmInfo{"barrier", "dissemination", 19},
    AlgorithmInfo{"send", "point_to_point", 20},
    AlgorithmInfo{"recv", "point_to_point", 21},
    // comm/algorithms/local_copy.h: ranks on one host (the mailbox's), read in place; where it
    // cannot run, the next matching rule decides (Communicator::prepare).
    AlgorithmInfo{"broadcast", "single_copy", 24, false, Choice::Rules, true},
    AlgorithmInfo{"allgather", "single_copy", 25, false, Choice::Rules, true},
    AlgorithmInfo{"reduce_scatter", "single_copy", 26, false, Choice::Rules, true},
    AlgorithmInfo{"alltoall", "single_copy", 27, false, Choice::Rules, true},
    // The same for allreduce (reduce-scatter and allgather by reads): by rule only; with buffers
    // from Communicator::alloc it reads peers' data in place (comm/symmetric_memory.h).
    AlgorithmInfo{"allreduce", "single_copy", 28, false, Choice::Rules, true},
    // The rooted and v forms the same way. allgather_v's and reduce_scatter_v's rules see the mean
    // block (the counts agree on every rank); alltoall_v's see 0 bytes, as its ranks share no
    // size (Communicator::prepare).
    AlgorithmInfo{"reduce", "single_copy", 29, false, Choice::Rules, true},
    AlgorithmInfo{"gather", "single_copy", 30, false, Choice::Rules, true},
    AlgorithmInfo{"scatter", "single_copy", 31, false, Choice::Rules, true},
    AlgorithmInfo{"allgather_v", "single_copy", 32, false, Choice::Rules, true},
    AlgorithmInfo{"reduce_scatter_v", "single_copy", 33, false, Choice::Rules, true},
    AlgorithmInfo{"alltoall_v", "single_copy", 34, false, Choice::Rules, true},
};

// The built-in choices, from f32 sum allreduces timed with `strait run -n 2` and `-n 4` on the
// 2-core development machine (UCX 1.13 over shared memory, CMA off). What decides is the number of
// messages a rank waits for in turn and whether UCX sends them eagerly: up to 8248 bytes (its
// 8256-byte shared-memory segments less headers) a message costs ~20 us, one byte more takes the
// rendezvous protocol, ~100-500 us when the cores are busy. Hence: recursive doubling (one whole
// vector per step, log2 P steps) while the vector is an eager message; then the ring pipelined
// in 8 KiB segments, so every message stays eager (2-4x faster than Rabenseifner's or an
// unsegmented ring's rendezvous halves from 32 KiB to 1 MiB); from 1 MiB the ring in 1 MiB
// segments, where the per-message cost of 8 KiB segments dominates and single messages of tens of
// MiB stall UCX's rendezvous. The machine was shared (load 4-12), so medians moved 2-5x between
// runs; only differences larger than that decided. Other machines may want other rules:
// STRAIT_TUNE.
// With several sites (comm/sites.h), vectors the ring would take go hierarchical: inside a site
// the ring's bytes cross the fast network, and between sites every rank sends only its shard, so
// the slow links carry the vector once per site pair instead of once per rank pair crossing them.
// (With singleton sites it is the ring over sites, as fast as the flat ring.) Short vectors stay
// on recursive doubling, whose log2(P) whole-vector messages beat 2 (L-1) + 2 (S-1) steps.
// Vectors up to 1 MiB (a mailbox slot) between ranks that all share this host's memory take the
// mailbox: one synchronisation through shared memory and no message, faster than Open MPI's
// shared-memory allreduce at every size from 8 B to 512 KiB with 2 and 4 ranks here, and than the
// ring up to 1 MiB (1 MiB, 2 ranks: 80 against the ring's 132 us and Open MPI's 133;
// docs/results/collectives.md); where it cannot run the earlier rules decide
// (Communicator::post). From 3 ranks longer vectors take it too, a slot at a time, each slot
// split so that every rank reduces only its 1/P (mailbox_allreduce.h): ranks that outnumber the
// cores are CPU-bound, and the ring's P - 1 steps each wait for a rank to be scheduled (8 ranks on
// 2 cores, 2 - 64 MiB: 1.7 - 2.7x faster than the ring; 4 ranks 1.3 - 5x under load). With 2
// ranks it takes them up to 32 MiB (since the slot is copied in pieces: 1.2 - 1.8x faster than the
// ring at 2 - 32 MiB, on ordinary and symmetric buffers, 3 interleaved rounds); from 64 MiB the
// ring keeps them (it reads symmetric buffers in place: 1.1 - 3.5x faster there). Declared sites
// keep the hierarchical allreduce from 8249 bytes (the last rule wins).
// Allgather, reduce_scatter and alltoall between ranks on one host read their peers' buffers in
// place from 64 KiB of a block, where the transport's messages take its rendezvous protocol
// anyway (comm/algorithms/local_copy.h); where the ranks share no memory the earlier rules (none:
// the first row) decide. Broadcast and allreduce have the same by rule only: with 2 ranks under
// load the binomial broadcast (one message, read once by the transport) measured as fast or
// faster (2 ranks, 1-256 MiB, strait-bench --bound, load 8-16), and the allreduce pays off with
// buffers from Communicator::alloc, which the table cannot see.
// Gather and scatter between ranks on one host read in place from 64 KiB of a block too, reduce
// from 64 KiB to 16 MiB of the vector; allgather_v and reduce_scatter_v from 64 KiB of the mean
// block with 3 ranks or more (allgather_v up to 16 MiB). From strait-bench A/B runs against the
// binomial trees and rings, 2 and 4 ranks, 64 KiB - 64 MiB, alternating, on the loaded 2-core
// machine (load 7-11; medians of 5 and 3 runs; to be re-measured on a quiet one): gather and
// scatter faster in median at all but one size per rank count (1.1-7x, 100x where the tree hit
// scheduling stalls); reduce 1.5-12x up to 4 MiB with 2 ranks, 0.65-3.7x with 4, but 0.6-0.8x
// from 16 MiB with 2; the v forms 1.1-30x with 4 ranks, while with 2 (one exchange each way,
// the ring's messages themselves single copy in the transport) up to 3x slower in median from
// 256 KiB to 4 MiB. alltoall_v's rules see no size (Communicator::prepare): by rule only, though
// it measured 1.25-11x faster with 4 ranks from 64 KiB.
constexpr std::string_view kDefaultRules =
    "allreduce:0-8249:recursive_doubling;"
    "allreduce:8249-1M:ring@seg=8K;"
    "allreduce:1M-inf:ring@seg=1M;"
    "allreduce:0-1048577:mailbox;"  // sizes are [LO, HI): a full slot, 1 MiB, included
    "allreduce:ranks=3-inf:1048577-inf:mailbox;"
    "allreduce:ranks=2-2:1048577-33554433:mailbox;"
    "allreduce:sites=2-inf:8249-inf:hierarchical@seg=1M;"
    "allgather:64K-inf:single_copy;"
    "reduce_scatter:64K-inf:single_copy;"
    "alltoall:64K-inf:single_copy;"
    "gather:64K-inf:single_copy;"
    "scatter:64K-inf:single_copy;"
    "reduce:64K-16M:single_copy;"
    "allgather_v:ranks=3-inf:64K-16M:single_copy;"
    "reduce_scatter_v:ranks=3-inf:64K-inf:single_copy";

constexpr std::string_view kSyntax =
    "rules look like collective[:ranks=LO-HI][:sites=LO-HI][:LO-HI]:algorithm[@seg=SIZE], "
    "separated by ';', "
    "with sizes in bytes (suffixes K, M, G; inf), e.g. "
    "allreduce:0-4K:recursive_doubling;allreduce:4K-inf:ring@seg=1M";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const auto at = s.find(sep);
    out.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

std::string join_names(std::string_view collective) {
  std::string out;
  for (const auto& a : registered_algorithms()) {
    if (a.collective != collective) continue;
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

// The collectives with registered algorithms; `rules_only`: those whose algorithm rules choose.
std::string join_collectives(bool rules_only) {
  std::vector<std::string_view> seen;
  for (const auto& a : registered_algorithms()) {
    if (rules_only && a.choice != AlgorithmInfo::Choice::Rules) continue;
    if (std::find(seen.begin(), seen.end(), a.collective) == seen.end()) {
      seen.push_back(a.collective);
    }
  }
  std::string out;
  for (const auto c : seen) out += fmt::format("{}{}", out.empty() ? "" : ", ", c);
  return out;
}

struct BadSize {
  std::string why;
};

// "4K", "1M", "123", "inf" (when allowed); throws BadSize saying what is wrong.
std::uint64_t size_value(std::string_view token, bool allow_inf) {
  const std::string t = lower(trim(token));
  if (t == "inf") {
    if (allow_inf) return SelectionRule::kInf;
    throw BadSize{"inf is only allowed as the upper end of a range"};
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || end == t.data()) {
    throw BadSize{"expected a size such as 4096, 4K or 1M"};
  }
  const std::string_view suffix(end, static_cast<std::size_t>(t.data() + t.size() - end));
  std::uint64_t unit = 0;
  if (suffix.empty() || suffix == "b") {
    unit = 1;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    unit = 1ULL << 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    unit = 1ULL << 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    unit = 1ULL << 30;
  } else {
    throw BadSize{fmt::format("unknown size suffix '{}' (use K, M or G)", suffix)};
  }
  if (value > SelectionRule::kInf / unit / 2) throw BadSize{"the size is too large"};
  return value * unit;
}

// Errors name the source, the rule and the token.
class RuleParser {
 public:
  RuleParser(std::string_view source, std::string_view rule) : source_(source), rule_(rule) {}

  [[noreturn]] void fail(std::string_view token, const std::string& why) const {
    throw Error(ErrorCode::InvalidArgument, fmt::format("{}: rule '{}': bad token '{}': {}. {}",
                                                        source_, rule_, token, why, kSyntax));
  }

  // "4K", "1M", "123", "inf" (when allowed).
  std::uint64_t size(std::string_view token, bool allow_inf) const {
    try {
      return size_value(token, allow_inf);
    } catch (const BadSize& e) {
      fail(token, e.why);
    }
  }

  void bytes_range(std::string_view token, SelectionRule& rule) const {
    const auto dash = token.find('-');
    if (dash == std::string_view::npos || dash == 0 || dash + 1 == token.size()) {
      fail(token, "a byte range is LO-HI, e.g. 0-4K or 1M-inf");
    }
    rule.min_bytes = size(token.substr(0, dash), false);
    rule.max_bytes = size(token.substr(dash + 1), true);
    if (rule.min_bytes >= rule.max_bytes) fail(token, "the range is empty (LO must be below HI)");
  }

  // ranks=LO-HI (world sizes) or sites=LO-HI (site counts): inclusive, HI may be inf.
  void count_range(std::string_view token, int& lo, int& hi) const {
    const auto value = token.substr(token.find('=') + 1);
    const auto dash = value.find('-');
    const auto number = [&](std::string_view v, bool allow_inf) {
      v = trim(v);
      if (allow_inf && lower(v) == "inf") return SelectionRule::kAnyRanks;
      int n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1) {
        fail(token, "ranks= and sites= take counts >= 1: N or LO-HI (HI may be inf)");
      }
      return n;
    };
    lo = number(value.substr(0, dash), false);
    hi = dash == std::string_view::npos ? lo : number(value.substr(dash + 1), true);
    if (lo > hi) fail(token, "the range is empty");
  }

  void collective(std::string_view token, SelectionRule& rule) const {
    if (find_algorithm_of(token) == nullptr) {
      fail(token, fmt::format("unknown collective; valid: {}", join_collectives(true)));
    }
    rule.collective = std::string(token);
  }

  void algorithm(std::string_view token, SelectionRule& rule) const {
    const auto at = token.find('@');
    const std::string_view name = trim(token.substr(0, at));
    const AlgorithmInfo* info = find_algorithm(rule.collective, name);
    if (info == nullptr) {
      fail(token, fmt::format("unknown {} algorithm '{}'; valid: {}", rule.collective, name,
                              join_names(rule.collective)));
    }
    rule.selection.algorithm = info;
    if (at == std::string_view::npos) return;
    for (const auto param : split(token.substr(at + 1), ',')) {
      const auto eq = param.find('=');
      const std::string key = lower(trim(param.substr(0, eq)));
      if (eq == std::string_view::npos || key != "seg") {
        fail(param, fmt::format("unknown parameter; valid: {}",
                                info->segmented ? "seg=SIZE" : "none (this algorithm takes none)"));
      }
      if (!info->segmented) fail(param, fmt::format("{} takes no seg= parameter", info->name));
      rule.selection.params.segment_bytes = size(param.substr(eq + 1), false);
    }
  }

 private:
  // The first row of a collective whose algorithm rules choose.
  static const AlgorithmInfo* find_algorithm_of(std::string_view collective) {
    for (const auto& a : registered_algorithms()) {
      if (a.collective == collective && a.choice == AlgorithmInfo::Choice::Rules) return &a;
    }
    return nullptr;
  }

  std::string_view source_;
  std::string_view rule_;
};

SelectionRule parse_rule(std::string_view source, std::string_view text) {
  const RuleParser p(source, text);
  const auto tokens = split(text, ':');
  if (tokens.size() < 2 || tokens.size() > 5) {
    p.fail(text, "a rule has 2 to 5 ':'-separated parts");
  }
  SelectionRule rule;
  p.collective(tokens.front(), rule);
  bool have_ranks = false;
  bool have_sites = false;
  bool have_bytes = false;
  for (std::size_t i = 1; i + 1 < tokens.size(); ++i) {
    const auto t = tokens[i];
    if (lower(t).starts_with("ranks=")) {
      if (have_ranks) p.fail(t, "a second rank range");
      p.count_range(t, rule.min_ranks, rule.max_ranks);
      have_ranks = true;
    } else if (lower(t).starts_with("sites=")) {
      if (have_sites) p.fail(t, "a second site range");
      p.count_range(t, rule.min_sites, rule.max_sites);
      have_sites = true;
    } else {
      if (have_bytes) p.fail(t, "a second byte range");
      p.bytes_range(t, rule);
      have_bytes = true;
    }
  }
  p.algorithm(tokens.back(), rule);
  return rule;
}

std::string format_size(std::uint64_t bytes) {
  if (bytes == SelectionRule::kInf) return "inf";
  if (bytes != 0 && bytes % (1ULL << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes != 0 && bytes % (1ULL << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes != 0 && bytes % (1ULL << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

}  // namespace

std::span<const AlgorithmInfo> registered_algorithms() {
  return kAlgorithms;
}

const AlgorithmInfo* find_algorithm(std::string_view collective, std::string_view name) {
  for (const auto& a : registered_algorithms()) {
    if (a.collective == collective && a.name == name) return &a;
  }
  return nullptr;
}

const AlgorithmInfo* algorithm_by_id(std::uint8_t id) {
  for (const auto& a : registered_algorithms()) {
    if (a.id == id) return &a;
  }
  return nullptr;
}

std::string Selection::describe() const {
  if (algorithm == nullptr) return "none";
  if (!algorithm->segmented || params.segment_bytes == 0) return std::string(algorithm->name);
  return fmt::format("{}@seg={}", algorithm->name, format_size(params.segment_bytes));
}

bool SelectionRule::matches(std::string_view coll, int world, std::uint64_t bytes,
                            int sites) const {
  return coll == collective && world >= min_ranks && world <= max_ranks && sites >= min_sites &&
         sites <= max_sites && bytes >= min_bytes && bytes < max_bytes;
}

std::string SelectionRule::describe() const {
  std::string out = collective;
  if (min_ranks != 1 || max_ranks != kAnyRanks) {
    out += fmt::format(":ranks={}-{}", min_ranks,
                       max_ranks == kAnyRanks ? std::string("inf") : std::to_string(max_ranks));
  }
  if (min_sites != 1 || max_sites != kAnyRanks) {
    out += fmt::format(":sites={}-{}", min_sites,
                       max_sites == kAnyRanks ? std::string("inf") : std::to_string(max_sites));
  }
  if (min_bytes != 0 || max_bytes != kInf) {
    out += fmt::format(":{}-{}", format_size(min_bytes), format_size(max_bytes));
  }
  if (selection.algorithm != nullptr) out += ":" + selection.describe();
  if (!codec.empty()) out += " codec=" + codec;
  return out;
}

std::string format_rule_size(std::uint64_t bytes) {
  return format_size(bytes);
}

std::uint64_t parse_rule_size(std::string_view token, std::string_view what) {
  try {
    return size_value(token, true);
  } catch (const BadSize& e) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: '{}' is not a size: {}", what, token, e.why));
  }
}

AlgorithmTable AlgorithmTable::defaults() {
  return parse(kDefaultRules, "the built-in table");
}

AlgorithmTable AlgorithmTable::parse(std::string_view rules, std::string_view source) {
  AlgorithmTable table;
  for (const auto rule : split(rules, ';')) {
    if (!rule.empty()) table.add(parse_rule(source, rule));
  }
  return table;
}

AlgorithmTable AlgorithmTable::parse_json(std::string_view text, std::string_view source) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("{}: {}. Expected {{\"rules\": [{{\"collective\": \"allreduce\", "
                             "\"ranks\": \"2-8\", \"bytes\": \"0-4K\", \"algorithm\": "
                             "\"recursive_doubling\"}}, ...]}} (ranks, bytes and seg optional)",
                             source, why));
  };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(fmt::format("not valid JSON ({})", e.what()));
  }
  // Other top-level members (a tuner's "links", "sites", "tuner") are for other readers.
  if (!doc.is_object() || !doc.contains("rules") || !doc["rules"].is_array()) {
    throw bad("the document must be an object whose member \"rules\" is an array");
  }
  AlgorithmTable table;
  std::size_t index = 0;
  for (const auto& item : doc["rules"]) {
    const std::string where = fmt::format("rules[{}]", index++);
    if (!item.is_object()) throw bad(fmt::format("{} is not an object", where));
    // Rebuilt as a rule string, so both formats go through one parser and one set of messages.
    std::string rule;
    std::string algorithm;
    std::string ranks;
    std::string sites;
    std::string bytes;
    std::string seg;
    std::string codec;
    for (const auto& [key, value] : item.items()) {
      if (key == "codec") {
        // A codec spec has its own ':' and ',' ("int4:block=32"), so it stays out of the rule
        // string. check_rule_codecs (codec_rules.h) checks it: the codecs are not this file's.
        if (!value.is_string() || value.get<std::string>().empty()) {
          throw bad(fmt::format("{}.codec must be a codec spec such as \"int8\"", where));
        }
        codec = value.get<std::string>();
        continue;
      }
      std::string text_value;
      if (value.is_string()) {
        text_value = value.get<std::string>();
      } else if (value.is_number_unsigned()) {
        text_value = std::to_string(value.get<std::uint64_t>());
      } else {
        throw bad(fmt::format("{}.{} must be a string or a non-negative integer", where, key));
      }
      if (text_value.find_first_of(":;@") != std::string::npos) {
        throw bad(fmt::format("{}.{} = '{}' contains one of : ; @", where, key, text_value));
      }
      if (key == "collective") {
        rule = text_value;
      } else if (key == "algorithm") {
        algorithm = text_value;
      } else if (key == "ranks") {
        ranks = text_value;
      } else if (key == "sites") {
        sites = text_value;
      } else if (key == "bytes") {
        bytes = text_value;
      } else if (key == "seg") {
        seg = text_value;
      } else {
        throw bad(
            fmt::format("{} has an unknown member \"{}\" (valid: collective, ranks, sites, "
                        "bytes, algorithm, seg, codec)",
                        where, key));
      }
    }
    if (rule.empty() || (algorithm.empty() && codec.empty())) {
      throw bad(fmt::format("{} needs \"collective\" and \"algorithm\" (or \"codec\")", where));
    }
    if (algorithm.empty() && !seg.empty()) {
      throw bad(fmt::format("{} has \"seg\" but no \"algorithm\" it could apply to", where));
    }

    // A codec-only rule borrows the collective's first algorithm to get through the one parser,
    // then drops it: such a rule must not change which algorithm plain collectives run.
    const bool codec_only = algorithm.empty();
    if (codec_only) {
      for (const auto& a : registered_algorithms()) {
        if (a.collective == rule) {
          algorithm = std::string(a.name);
          break;
        }
      }
      if (algorithm.empty()) algorithm = "?";  // the parser then names the unknown collective
    }
    if (!ranks.empty()) rule += ":ranks=" + ranks;
    if (!sites.empty()) rule += ":sites=" + sites;
    if (!bytes.empty()) rule += ":" + bytes;
    rule += ":" + algorithm;
    if (!seg.empty()) rule += "@seg=" + seg;
    SelectionRule parsed = parse_rule(fmt::format("{} {}", source, where), rule);
    // Only allreduce_compressed asks for a codec (choose_codec("allreduce", ...)): a codec on
    // another (known: parse_rule names an unknown one) collective would be ignored silently.
    if (!codec.empty() && parsed.collective != "allreduce") {
      throw bad(
          fmt::format("{} gives collective \"{}\" a codec: codecs are chosen for "
                      "\"allreduce\" only (allreduce_compressed)",
                      where, parsed.collective));
    }
    if (codec_only) parsed.selection = Selection{};
    parsed.codec = std::move(codec);
    table.add(std::move(parsed));
  }
  return table;
}

AlgorithmTable AlgorithmTable::from_environment(const Given& given) {
  AlgorithmTable table = defaults();
  const std::optional<std::string> path =
      given.file ? given.file : params::text("STRAIT_TUNE_FILE");
  if (path && !path->empty()) {
    const std::string source =
        given.file ? given.file_source.value_or(*path) : fmt::format("STRAIT_TUNE_FILE={}", *path);
    std::ifstream in(*path);
    std::stringstream text;
    if (in.is_open()) text << in.rdbuf();
    if (!in.is_open() || in.bad()) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{}: cannot read it ({}); unset it or name a JSON file of algorithm "
                              "rules, as `strait tune` writes",
                              source, std::strerror(errno)));
    }
    table.append(parse_json(text.str(), source));
  }
  const std::optional<std::string> rules = given.rules ? given.rules : params::text("STRAIT_TUNE");
  if (rules)
    table.append(parse(*rules, given.rules ? given.rules_source.value_or("") : "STRAIT_TUNE"));
  return table;
}

void AlgorithmTable::append(const AlgorithmTable& later) {
  rules_.insert(rules_.end(), later.rules_.begin(), later.rules_.end());
}

Selection AlgorithmTable::choose(std::string_view collective, int world, std::uint64_t bytes,
                                 int sites, const AlgorithmInfo* unavailable) const {
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->selection.algorithm != nullptr && it->selection.algorithm != unavailable &&
        it->matches(collective, world, bytes, sites)) {
      return it->selection;
    }
  }
  for (const auto& a : registered_algorithms()) {
    if (a.collective == collective) return Selection{&a, {}};
  }
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("no algorithm is registered for the collective '{}' (registered: {})",
                          collective, join_collectives(false)));
}

std::optional<std::string> AlgorithmTable::choose_codec(std::string_view collective, int world,
                                                        std::uint64_t bytes) const {
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (!it->codec.empty() && it->matches(collective, world, bytes)) return it->codec;
  }
  return std::nullopt;
}

std::string AlgorithmTable::describe() const {
  std::string out;
  for (const auto& r : rules_) out += fmt::format("{}{}", out.empty() ? "" : ";", r.describe());
  return out;
}

}  // namespace strait::comm
