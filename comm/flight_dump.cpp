#include "comm/flight_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/debug_log.h"
#include "core/params.h"

namespace strait::comm::fr {
namespace {

using nlohmann::json;

struct Registry {
  std::mutex mutex;  // guards recorders; also serializes the writing of dumps
  std::vector<std::weak_ptr<FlightRecorder>> recorders;
  std::map<std::pair<int, std::uint64_t>, int> instances;  // (comm id, generation) -> registered
  std::string failure_dump;  // the file of the first failure's dump, kept (see dump_all)
};

// Never destroyed: the SIGUSR1 thread may wake while the process exits, after static
// destructors have started.
Registry& registry() {
  alignas(Registry) static std::byte storage[sizeof(Registry)];
  static Registry* const r = std::construct_at(reinterpret_cast<Registry*>(storage));
  return *r;
}

// Set at exit (under the registry's lock, so that a dump under way finishes first): a SIGUSR1
// then writes nothing, since the log and the communicators may be gone.
bool g_exiting = false;  // guarded by Registry::mutex

void mark_exiting() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  g_exiting = true;
}

// SIGUSR1: the handler writes a byte to the pipe; the dump thread reads it.
std::array<int, 2> g_pipe{-1, -1};
struct sigaction g_previous {};

extern "C" void on_sigusr1(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_pipe[1], &byte, 1);
  errno = saved;
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
             g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
  }
}

void dump_thread() {
  for (;;) {
    char byte = 0;
    const ssize_t n = ::read(g_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    dump_all("signal", "SIGUSR1");
  }
}

void install_signal() {
  if (!params::get_bool("STRAIT_FR_SIGNAL").value_or(true)) return;
  if (::pipe2(g_pipe.data(), O_CLOEXEC) != 0) {
    debug::log(debug::Level::Warn, debug::kFr, "flight recorder: no SIGUSR1 dumps: pipe: {}",
               std::strerror(errno));
    return;
  }
  // Detached: it blocks in read() for the life of the process; after exit() began it writes
  // nothing (mark_exiting runs before the statics it would use are destroyed: they were made
  // before this registration).
  registry();
  std::atexit(mark_exiting);
  std::thread(dump_thread).detach();
  struct sigaction sa {};
  sa.sa_sigaction = on_sigusr1;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, &g_previous);
}

json entry_json(const FrEntry& e, std::int64_t to_unix) {
  const auto& info = kind_info(e.kind);
  json j{{"id", e.id},
         {"seq", e.seq},
         {"kind", collective_name(e.kind)},
         {"dtype", kernels::dtype_name(e.dtype)},
         {"count", e.count},
         {"bytes", e.bytes},
         {"algorithm", e.algorithm},
         {"device", e.device},
         {"state", to_string(e.state)},
         {"enqueued_unix_ns", e.enqueued_ns + to_unix},
         {"started_unix_ns", e.started_ns != 0 ? e.started_ns + to_unix : 0},
         {"ended_unix_ns", e.ended_ns != 0 ? e.ended_ns + to_unix : 0}};
  if (info.reduces) j["op"] = kernels::reduce_op_name(e.op);
  if (info.rooted) j["root"] = e.root;
  if (info.point_to_point) {
    j["peer"] = e.root;
    j["tag"] = e.tag;
  }
  if (e.state == FrState::Failed) {
    j["error_code"] = to_string(e.error_code);
    j["error"] = e.error;
  }
  return j;
}

json snapshot_json(const FrSnapshot& s, std::int64_t to_unix) {
  json entries = json::array();
  for (const FrEntry& e : s.entries) entries.push_back(entry_json(e, to_unix));
  return json{
      {"comm_id", s.comm_id},       {"rank", s.rank},         {"size", s.size},
      {"generation", s.generation}, {"instance", s.instance}, {"world_ranks", s.world_ranks},
      {"capacity", s.capacity},     {"recorded", s.recorded}, {"entries", std::move(entries)}};
}

std::string job_id() {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || port == nullptr) return "";
  return fmt::format("{}:{}", addr, port);
}

}  // namespace

std::string dump_dir() {
  return params::text("STRAIT_FR_DUMP_DIR").value_or("/tmp/strait-fr");
}

void register_recorder(const std::shared_ptr<FlightRecorder>& recorder) {
  static std::once_flag once;
  std::call_once(once, install_signal);
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::erase_if(r.recorders, [](const auto& w) { return w.expired(); });
  r.recorders.push_back(recorder);
  recorder->set_instance(r.instances[{recorder->comm_id(), recorder->generation()}]++);
}

std::string_view trigger_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::Mismatch: return "mismatch";
    case ErrorCode::PeerLost: return "peer_lost";
    case ErrorCode::Aborted: return "abort";
    default: return "";
  }
}

void on_failure(FlightRecorder& recorder, const Error& error) {
  const std::string_view trigger = trigger_of(error.code());
  if (trigger.empty() || !recorder.first_failure()) return;
  const std::string path = dump_all(trigger, error.message());
  debug::log(debug::Level::Warn, debug::kColl, "comm {} failed ({}): {}; flight recorder dump: {}",
             recorder.comm_id(), to_string(error.code()), error.message(),
             path.empty() ? "none" : path);
}

std::string dump_all(std::string_view trigger, std::string_view reason) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (g_exiting) return "";
  // After a failure the process tears its communicators down: a later SIGUSR1 (the launcher's)
  // would replace the state at the failure with less. It answers with the failure's file,
  // stamped now, so that the launcher sees the answer.
  std::error_code ec;
  if (trigger == "signal" && !r.failure_dump.empty() &&
      std::filesystem::path(r.failure_dump).parent_path() == dump_dir() &&
      std::filesystem::exists(r.failure_dump, ec)) {
    std::filesystem::last_write_time(r.failure_dump, std::filesystem::file_time_type::clock::now(),
                                     ec);
    return r.failure_dump;
  }
  std::vector<FrSnapshot> snapshots;
  for (const auto& w : r.recorders) {
    if (auto rec = w.lock()) snapshots.push_back(rec->snapshot());
  }
  if (snapshots.empty()) return "";
  std::sort(snapshots.begin(), snapshots.end(), [](const auto& a, const auto& b) {
    return std::tie(a.comm_id, a.instance) < std::tie(b.comm_id, b.instance);
  });
  const int world_rank = snapshots.front().world_ranks[snapshots.front().rank];
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  const std::int64_t to_unix = wall - fr_now_ns();
  json comms = json::array();
  for (const auto& s : snapshots) comms.push_back(snapshot_json(s, to_unix));
  const std::string host = debug::host_name();
  const json doc{{"format", "strait-flight-recorder"},
                 {"version", 1},
                 {"rank", world_rank},
                 {"host", host},
                 {"pid", ::getpid()},
                 {"job", job_id()},
                 {"trigger", trigger},
                 {"reason", reason},
                 {"time_unix_ns", wall},
                 {"communicators", std::move(comms)}};
  namespace fs = std::filesystem;
  const fs::path dir = dump_dir();
  const fs::path path =
      dir / fmt::format("strait-fr-rank{}-{}-{}.json", world_rank, host, ::getpid());
  try {
    fs::create_directories(dir);
    const fs::path tmp = fs::path(path).concat(".tmp");
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << doc.dump(1) << '\n';
      out.flush();
      if (!out) throw std::runtime_error("write failed");
    }
    fs::rename(tmp, path);
    if (trigger != "signal" && r.failure_dump.empty()) r.failure_dump = path.string();
  } catch (const std::exception& e) {
    debug::log(debug::Level::Warn, debug::kFr, "flight recorder: cannot write {}: {}",
               path.string(), e.what());
    return "";
  }
  debug::log(debug::Level::Info, debug::kFr,
             "flight recorder: dump ({}) written to {}; `strait diagnose {}` reads every rank's",
             trigger, path.string(), dir.string());
  return path.string();
}

}  // namespace strait::comm::fr
