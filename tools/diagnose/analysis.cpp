#include "tools/diagnose/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace strait::tools::diagnose {
namespace {

// One rank's view of a communicator.
struct Member {
  const Dump* dump = nullptr;
  const Comm* comm = nullptr;
  std::int64_t last_finished = -1;        // highest finished collective's seq
  const Entry* current = nullptr;         // lowest collective not finished (pending or failed)
  std::vector<const Entry*> p2p_waits{};  // point to point not finished
};

Member view(const Dump& d, const Comm& c) {
  Member m{.dump = &d, .comm = &c};
  for (const Entry& e : c.entries) {
    if (!e.collective()) {
      if (e.state != "finished") m.p2p_waits.push_back(&e);
      continue;
    }
    if (e.state == "finished") {
      m.last_finished = std::max(m.last_finished, e.seq);
    } else if (m.current == nullptr || e.seq < m.current->seq) {
      m.current = &e;
    }
  }
  return m;
}

std::string seconds(std::int64_t ns) {
  return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9);
}

// "rank 1 (world rank 3)" in a sub-communicator, "rank 1" in the world.
std::string member_names(const Comm& c, const std::vector<int>& ranks) {
  std::string text = format_ranks(ranks);
  bool same = true;
  std::vector<int> world;
  for (int r : ranks) {
    world.push_back(c.world_ranks[static_cast<std::size_t>(r)]);
    same = same && world.back() == r;
  }
  if (!same) text += fmt::format(" (world {})", format_ranks(world));
  return text;
}

struct CommReport {
  std::vector<std::string> lines;
  std::vector<int> missing;  // world ranks with no dump while others wait
  std::vector<int> never;    // world ranks that never entered the operation others wait in
  bool waiting = false;      // some rank waits in an operation
  bool mismatch = false;
};

void report_mismatches(const std::vector<Member>& members, CommReport& out) {
  // seq -> rank -> what it called (its latest entry of that number).
  std::map<std::int64_t, std::map<int, std::string>> by_seq;
  for (std::size_t r = 0; r < members.size(); ++r) {
    if (members[r].comm == nullptr) continue;
    for (const Entry& e : members[r].comm->entries) {
      if (e.collective()) by_seq[e.seq][static_cast<int>(r)] = e.signature();
    }
  }
  for (const auto& [seq, by_rank] : by_seq) {
    std::map<std::string, std::vector<int>> calls;
    for (const auto& [r, signature] : by_rank) calls[signature].push_back(r);
    if (calls.size() < 2) continue;
    out.mismatch = true;
    std::string text = fmt::format("  mismatch at #{}:", seq);
    const char* sep = " ";
    for (const auto& [signature, ranks] : calls) {
      text += fmt::format("{}{} called {}", sep, format_ranks(ranks), signature);
      sep = "; ";
    }
    out.lines.push_back(text);
  }
}

// The stuck operation: the lowest unfinished collective of any rank, and who is where about it.
void report_stuck(const Comm& any, const std::vector<Member>& members, std::int64_t dumped_at,
                  CommReport& out) {
  const Entry* target = nullptr;
  for (const Member& m : members) {
    if (m.current != nullptr && (target == nullptr || m.current->seq < target->seq)) {
      target = m.current;
    }
  }
  if (target == nullptr) return;
  out.waiting = true;
  std::vector<int> waiting, passed, missing;
  std::map<std::int64_t, std::vector<int>> never;  // by last finished
  std::string failure;
  std::int64_t since = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    const int r = static_cast<int>(i);
    if (m.comm == nullptr) {
      missing.push_back(r);
    } else if (m.current != nullptr && m.current->seq == target->seq) {
      waiting.push_back(r);
      if (failure.empty() && m.current->state == "failed") {
        failure = fmt::format("{}: {}", m.current->error_code, m.current->error);
      }
      if (m.current->started_ns > 0) since = std::max(since, m.current->started_ns);
    } else if (m.last_finished >= target->seq) {
      passed.push_back(r);
    } else {
      never[m.last_finished].push_back(r);
    }
  }
  std::string line = fmt::format("  {} wait{} in {}", member_names(any, waiting),
                                 waiting.size() == 1 ? "s" : "", target->describe());
  if (since > 0 && dumped_at > since) line += fmt::format(" (for {})", seconds(dumped_at - since));
  out.lines.push_back(line);
  if (!failure.empty()) out.lines.push_back(fmt::format("    first error: {}", failure));
  for (const auto& [last, ranks] : never) {
    out.lines.push_back(fmt::format("  {} never entered it; {} last finished operation is {}",
                                    member_names(any, ranks), ranks.size() == 1 ? "its" : "their",
                                    last >= 0 ? fmt::format("#{}", last) : "none"));
    for (int r : ranks) out.never.push_back(any.world_ranks[static_cast<std::size_t>(r)]);
  }
  if (!passed.empty()) {
    out.lines.push_back(fmt::format("  {} finished it (and went on)", member_names(any, passed)));
  }
  if (!missing.empty()) {
    out.lines.push_back(fmt::format("  {} wrote no dump: stopped, hung outside strait, or dead",
                                    member_names(any, missing)));
    for (int r : missing) out.missing.push_back(any.world_ranks[static_cast<std::size_t>(r)]);
  }
}

void report_p2p(const Comm& any, const std::vector<Member>& members, CommReport& out) {
  std::map<std::string, std::vector<int>> waits;  // what -> ranks
  for (std::size_t r = 0; r < members.size(); ++r) {
    for (const Entry* e : members[r].p2p_waits) {
      const std::string state = e->state == "failed" ? "failed in" : "waits in";
      waits[fmt::format("{} {}", state, e->describe())].push_back(static_cast<int>(r));
    }
  }
  for (const auto& [what, ranks] : waits) {
    out.lines.push_back(fmt::format("  {} {}", member_names(any, ranks), what));
  }
  if (!waits.empty()) out.waiting = true;
}

CommReport report_comm(const std::vector<Member>& members, std::int64_t dumped_at) {
  CommReport out;
  const Comm* any = nullptr;
  for (const Member& m : members) {
    if (m.comm != nullptr) any = m.comm;
  }
  std::string extra;
  if (any->generation > 0) extra += fmt::format(", generation {}", any->generation);
  if (any->instance > 0)
    extra += fmt::format(", the process's communicator #{} of this id", any->instance + 1);
  out.lines.push_back(fmt::format("comm {} ({} ranks, world {}{}):", any->comm_id, any->size,
                                  format_ranks(any->world_ranks), extra));
  report_mismatches(members, out);
  report_stuck(*any, members, dumped_at, out);
  report_p2p(*any, members, out);
  if (!out.waiting && !out.mismatch) {
    std::int64_t last = -1;
    for (const Member& m : members) last = std::max(last, m.last_finished);
    out.lines.push_back(last >= 0
                            ? fmt::format("  nothing in flight; last finished operation #{}", last)
                            : std::string("  nothing in flight; no collective recorded"));
  }
  return out;
}

// The newest job's dumps, the newest per rank; notes what was left out.
std::vector<Dump> select(std::vector<Dump> dumps, std::vector<std::string>& notes) {
  std::sort(dumps.begin(), dumps.end(),
            [](const Dump& a, const Dump& b) { return a.time_ns > b.time_ns; });
  const std::string job = dumps.front().job;
  std::vector<Dump> kept;
  std::set<int> seen;
  int other_jobs = 0, older = 0;
  for (Dump& d : dumps) {
    if (d.job != job) {
      ++other_jobs;
    } else if (!seen.insert(d.rank).second) {
      ++older;
    } else {
      kept.push_back(std::move(d));
    }
  }
  if (other_jobs > 0) {
    notes.push_back(fmt::format("left out {} dump(s) of other jobs (the newest is job {})",
                                other_jobs, job.empty() ? "unnamed" : job));
  }
  if (older > 0) notes.push_back(fmt::format("left out {} older dump(s) of the same ranks", older));
  std::sort(kept.begin(), kept.end(), [](const Dump& a, const Dump& b) { return a.rank < b.rank; });
  return kept;
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  const bool run = std::adjacent_find(ranks.begin(), ranks.end(),
                                      [](int a, int b) { return b != a + 1; }) == ranks.end();
  if (run && ranks.size() > 2) return fmt::format("ranks {}-{}", ranks.front(), ranks.back());
  return fmt::format("ranks {}", fmt::join(ranks, ", "));
}

Report analyse(std::vector<Dump> dumps) {
  Report report;
  if (dumps.empty()) return report;
  std::vector<std::string> notes;
  dumps = select(std::move(dumps), notes);
  // Every communicator, by (id, generation, size), with each rank's view.
  std::map<std::tuple<int, std::uint64_t, int, int>, std::vector<Member>> comms;
  std::set<int> world, dumped;
  std::int64_t dumped_at = 0;
  for (const Dump& d : dumps) {
    dumped.insert(d.rank);
    dumped_at = std::max(dumped_at, d.time_ns);
    for (const Comm& c : d.comms) {
      auto& members = comms[{c.comm_id, c.generation, c.instance, c.size}];
      members.resize(static_cast<std::size_t>(c.size));
      members[static_cast<std::size_t>(c.rank)] = view(d, c);
      world.insert(c.world_ranks.begin(), c.world_ranks.end());
    }
  }
  std::vector<int> missing;
  std::set_difference(world.begin(), world.end(), dumped.begin(), dumped.end(),
                      std::back_inserter(missing));
  std::vector<std::string> lines;
  lines.push_back(fmt::format("{} dump(s) from {} of {} rank(s){}", dumps.size(),
                              format_ranks({dumped.begin(), dumped.end()}), world.size(),
                              missing.empty() ? "" : "; no dump from " + format_ranks(missing)));
  for (const std::string& n : notes) lines.push_back("note: " + n);
  std::set<int> no_dump, never, waiting;
  for (const auto& [key, members] : comms) {
    CommReport c = report_comm(members, dumped_at);
    lines.push_back("");
    lines.insert(lines.end(), c.lines.begin(), c.lines.end());
    no_dump.insert(c.missing.begin(), c.missing.end());
    never.insert(c.never.begin(), c.never.end());
    report.mismatch = report.mismatch || c.mismatch;
    for (const Member& m : members) {
      if (m.comm != nullptr && (m.current != nullptr || !m.p2p_waits.empty())) {
        waiting.insert(m.dump->rank);
      }
    }
  }
  // A rank that never entered an operation because it waits in another one is a victim, not a
  // cause: the suspects are the silent ranks, then those that wait nowhere.
  std::set<int> suspects = no_dump;
  for (int r : never) {
    if (!waiting.contains(r)) suspects.insert(r);
  }
  if (suspects.empty()) suspects = never;
  report.suspects.assign(suspects.begin(), suspects.end());
  lines.push_back("");
  if (!report.suspects.empty()) {
    lines.push_back(fmt::format("look first at {}:", format_ranks(report.suspects)));
    std::vector<int> silent, idle;
    for (int r : report.suspects) (no_dump.contains(r) ? silent : idle).push_back(r);
    const std::string waiters = format_ranks({waiting.begin(), waiting.end()});
    if (!silent.empty()) {
      lines.push_back(
          fmt::format("  {} wrote no dump while {} wait: stopped, hung outside strait, "
                      "or dead (`kill -USR1 PID` asks a live process for a dump)",
                      format_ranks(silent), waiters));
    }
    if (!idle.empty()) {
      lines.push_back(fmt::format("  {} never entered the operation {} wait in{}",
                                  format_ranks(idle), waiters,
                                  never.size() > idle.size() ? "" : ", and waits in no other"));
    }
  } else if (report.mismatch) {
    lines.push_back("look first at the mismatch: ranks called different operations in one order");
  } else {
    lines.push_back("no rank stands out: every rank is in the same operation (see its errors)");
  }
  for (const std::string& l : lines) report.text += l + "\n";
  return report;
}

}  // namespace strait::tools::diagnose
