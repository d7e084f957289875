#include "tools/diagnose/dump.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strait::tools::diagnose {

using nlohmann::json;

std::string Entry::describe() const {
  if (!collective()) {
    return fmt::format("{} {} {} (tag {}, {} B)", kind, kind == "send" ? "to" : "from", peer, tag,
                       bytes);
  }
  std::string detail = fmt::format("{} x {}", dtype, count);
  if (!op.empty()) detail += ", " + op;
  if (root >= 0) detail += fmt::format(", root {}", root);
  if (!algorithm.empty()) detail += ", " + algorithm;
  return fmt::format("{} #{} ({})", kind, seq, detail);
}

std::string Entry::signature() const {
  return fmt::format("{} ({} x {}{}{})", kind, dtype, count, op.empty() ? "" : ", " + op,
                     root >= 0 ? fmt::format(", root {}", root) : "");
}

namespace {

Entry parse_entry(const json& j) {
  Entry e;
  e.id = j.at("id").get<std::uint64_t>();
  e.seq = j.at("seq").get<std::int64_t>();
  e.kind = j.at("kind").get<std::string>();
  e.dtype = j.at("dtype").get<std::string>();
  e.op = j.value("op", "");
  e.algorithm = j.value("algorithm", "");
  e.state = j.at("state").get<std::string>();
  e.error_code = j.value("error_code", "");
  e.error = j.value("error", "");
  e.count = j.at("count").get<std::uint64_t>();
  e.bytes = j.value("bytes", std::uint64_t{0});
  e.root = j.value("root", -1);
  e.peer = j.value("peer", -1);
  e.tag = j.value("tag", std::uint64_t{0});
  e.enqueued_ns = j.value("enqueued_unix_ns", std::int64_t{0});
  e.started_ns = j.value("started_unix_ns", std::int64_t{0});
  e.ended_ns = j.value("ended_unix_ns", std::int64_t{0});
  return e;
}

}  // namespace

Dump parse_dump(const std::string& text, const std::string& file) {
  try {
    const json doc = json::parse(text);
    if (doc.value("format", "") != "strait-flight-recorder") {
      throw Error(ErrorCode::InvalidArgument, "its \"format\" is not \"strait-flight-recorder\"");
    }
    if (doc.value("version", 0) != 1) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("version {} (this strait reads version 1)", doc.value("version", 0)));
    }
    Dump d{.file = file,
           .rank = doc.at("rank").get<int>(),
           .host = doc.value("host", ""),
           .pid = doc.value("pid", 0L),
           .job = doc.value("job", ""),
           .trigger = doc.value("trigger", ""),
           .reason = doc.value("reason", ""),
           .time_ns = doc.value("time_unix_ns", std::int64_t{0})};
    for (const json& c : doc.at("communicators")) {
      Comm comm{.comm_id = c.at("comm_id").get<int>(),
                .rank = c.at("rank").get<int>(),
                .size = c.at("size").get<int>(),
                .generation = c.value("generation", std::uint64_t{0}),
                .instance = c.value("instance", 0),
                .world_ranks = c.at("world_ranks").get<std::vector<int>>(),
                .recorded = c.value("recorded", std::uint64_t{0})};
      for (const json& e : c.at("entries")) comm.entries.push_back(parse_entry(e));
      if (comm.size < 1 || comm.rank < 0 || comm.rank >= comm.size ||
          comm.world_ranks.size() != static_cast<std::size_t>(comm.size)) {
        throw Error(ErrorCode::InvalidArgument,
                    fmt::format("comm {}: rank {} of {} with {} world ranks", comm.comm_id,
                                comm.rank, comm.size, comm.world_ranks.size()));
      }
      d.comms.push_back(std::move(comm));
    }
    return d;
  } catch (const json::exception& e) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: not a flight-recorder dump: {}", file, e.what()));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::InvalidArgument) throw;
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: not a flight-recorder dump: {}", file, e.message()));
  }
}

}  // namespace strait::tools::diagnose
