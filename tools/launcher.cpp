#include "tools/launcher.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>

#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/tcp_store.h"
#include "core/error.h"
#include "core/fd.h"
#include "tools/dump_request.h"
#include "tools/rank_output.h"

namespace strait::tools {
namespace {

using Clock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;
using strait::Fd;

constexpr int kMaxRanks = 1 << 16;
constexpr int kExecFailed = 127;  // as a shell reports a command it cannot run

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({}){}", sig, signal_name(sig),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

bool succeeded(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// "rank 3" or "ranks 0-2, 5".
std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string seconds(std::chrono::milliseconds ms) {
  return fmt::format("{:g}s", static_cast<double>(ms.count()) / 1000.0);
}

// What the launcher says on stderr. fwrite, not fmt::print: a closed stderr (`2>&1 | head`)
// leaves nowhere to say it, and must not end the launcher before it has reaped its ranks.
template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  const std::string line =
      fmt::format("strait run: {}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// Moves the calling thread into the network namespace /run/netns/NAME (as `ip netns exec` does)
// until destroyed, then back. Sockets keep the namespace they were made in, and threads started
// meanwhile stay in it: an elastic job's store, hosted by the launcher, listens in the first
// node's namespace (the WAN testbed's site 0), where its ranks and joiners reach it.
class InNetns {
 public:
  explicit InNetns(const std::string& name) {
    const std::string path = "/run/netns/" + name;
    const Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!target) {
      throw Error(ErrorCode::Io,
                  fmt::format("cannot open network namespace {}: {}", path, std::strerror(errno)));
    }
    home_ = Fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!home_) {
      throw Error(ErrorCode::Io,
                  fmt::format("cannot open /proc/thread-self/ns/net: {}", std::strerror(errno)));
    }
    if (::setns(target.get(), CLONE_NEWNET) != 0) {
      throw Error(ErrorCode::Io,
                  fmt::format("cannot enter network namespace {} to host the job's store there: "
                              "{} (needs root, as the WAN testbed does)",
                              name, std::strerror(errno)));
    }
  }
  InNetns(const InNetns&) = delete;
  InNetns& operator=(const InNetns&) = delete;
  ~InNetns() {
    if (::setns(home_.get(), CLONE_NEWNET) != 0) {
      say("cannot return to the launcher's network namespace: {}", std::strerror(errno));
      std::abort();  // the ranks would be started in the wrong namespace
    }
  }

 private:
  Fd home_;
};

// Blocks the signals the launcher handles and delivers them through a signalfd instead, so that
// no work happens in a signal handler. Restores the previous mask and SIGCHLD action on exit.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    // SIGPIPE: a closed stdout of the launcher's (`| head`) makes its writes fail, not kill it
    // while ranks still run (rank_output.h).
    for (const int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&handled_, sig);
    // With SIGCHLD ignored (inherited from a parent) children would be reaped behind our back.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    if (sigaction(SIGCHLD, &dfl, &old_chld_) != 0 ||
        pthread_sigmask(SIG_BLOCK, &handled_, &old_mask_) != 0) {
      throw Error(ErrorCode::Io,
                  fmt::format("cannot set up signal handling: {}", std::strerror(errno)));
    }
    fd_ = Fd(signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_) {
      const int err = errno;
      restore();
      throw Error(ErrorCode::Io, fmt::format("signalfd failed: {}", std::strerror(err)));
    }
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope() { restore(); }

  [[nodiscard]] int fd() const { return fd_.get(); }
  // The mask to give children: the one the launcher was started with.
  [[nodiscard]] const sigset_t& original_mask() const { return old_mask_; }

  // Signals received since the last call, in order.
  std::vector<int> drain() const {
    std::vector<int> out;
    std::array<signalfd_siginfo, 16> infos{};
    while (true) {
      const ssize_t n = read(fd_.get(), infos.data(), sizeof infos);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof(signalfd_siginfo); ++i) {
        out.push_back(static_cast<int>(infos[i].ssi_signo));
      }
    }
    return out;
  }

 private:
  void restore() {
    // A closed stdout or stderr (`2>&1 | head`) raised SIGPIPE while it was blocked, and its
    // writes failed instead: take it here, and ignore later ones (no rank is left to inherit
    // that), so the launcher still returns its ranks' status rather than dying of it.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    const timespec now{};
    while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
    }
    std::signal(SIGPIPE, SIG_IGN);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGCHLD, &old_chld_, nullptr);
  }

  sigset_t handled_{};
  sigset_t old_mask_{};
  struct sigaction old_chld_ {};
  Fd fd_;
};

// What a child needs for execvpe, prepared before fork (the child only makes system calls).
struct ExecImage {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::vector<std::string> env;
  std::vector<char*> envp;
};

void finalize(std::vector<std::string>& strings, std::vector<char*>& pointers) {
  pointers.clear();
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
}

ExecImage make_image(const LaunchOptions& o, std::uint16_t port, int rank) {
  const int per_node = o.nproc / o.nodes;
  const auto node = static_cast<std::size_t>(rank / per_node);
  std::vector<std::pair<std::string, std::string>> vars = {
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nproc)},
      {"LOCAL_RANK", std::to_string(rank % per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
      {"GROUP_RANK", std::to_string(node)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nodes)},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(o.nproc)},
  };
  if (o.elastic) vars.emplace_back("TORCHELASTIC_USE_AGENT_STORE", "True");
  if (node < o.node_env.size()) {
    for (const auto& entry : o.node_env[node]) {
      const auto eq = entry.find('=');
      vars.emplace_back(entry.substr(0, eq), eq == std::string::npos ? "" : entry.substr(eq + 1));
    }
  }
  ExecImage image;
  if (node < o.node_netns.size() && !o.node_netns[node].empty()) {
    image.args = {"ip", "netns", "exec", o.node_netns[node]};
  }
  image.args.insert(image.args.end(), o.command.begin(), o.command.end());
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool overridden =
        std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    if (!overridden) image.env.emplace_back(entry);
  }
  for (const auto& [name, value] : vars) image.env.push_back(fmt::format("{}={}", name, value));
  finalize(image.args, image.argv);
  finalize(image.env, image.envp);
  return image;
}

// The child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(int error_fd, pid_t launcher, const sigset_t& mask,
                             const ExecImage& image, int out_fd, int err_fd) {
  setpgid(0, 0);
  if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) {
    const int err = errno;
    [[maybe_unused]] const ssize_t n = write(error_fd, &err, sizeof err);
    _exit(kExecFailed);
  }
  // Ranks must not outlive a launcher that is killed outright (SIGKILL cannot be forwarded).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(kExecFailed);  // it died before prctl took effect
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  execvpe(image.argv[0], image.argv.data(), image.envp.data());
  const int err = errno;
  [[maybe_unused]] const ssize_t n = write(error_fd, &err, sizeof err);
  _exit(kExecFailed);
}

// "SIGTERM", "SIGTERM and SIGKILL", "SIGTERM, SIGINT and SIGKILL".
std::string format_signals(const std::vector<int>& sigs) {
  std::string out;
  for (std::size_t i = 0; i < sigs.size(); ++i) {
    if (i > 0) out += i + 1 == sigs.size() ? " and " : ", ";
    out += signal_name(sigs[i]);
  }
  return out;
}

struct Rank {
  int index = 0;
  pid_t pid = -1;  // kept once reaped, for the report
  bool running = false;
  int status = 0;         // the wait status, once reaped
  std::vector<int> sent;  // the signals the launcher sent it, each once, in order
  WallClock::time_point ended_at{};
  // Set while it is suspended (SIGSTOP, SIGTSTP, ...), and kept once it ends suspended or not.
  std::optional<WallClock::time_point> suspended_at;
  int suspended_by = 0;
  bool suspended = false;
  std::unique_ptr<RankOutput> out;  // its stdout and stderr, relayed line by line
  std::unique_ptr<RankOutput> err;
  // Its last error line on stderr before the launcher's first signal: it had failed on its own.
  std::optional<std::string> own_error;

  [[nodiscard]] bool was_sent(int sig) const {
    return std::find(sent.begin(), sent.end(), sig) != sent.end();
  }
  // Ended by a signal the launcher sent it, rather than by its own exit (even one prompted by
  // such a signal) or by some other signal.
  [[nodiscard]] bool stopped_by_launcher() const {
    return WIFSIGNALED(status) && was_sent(WTERMSIG(status));
  }
};

// "2026-12-01 21:05:31.412" (or without the date), local time.
std::string wall_time(WallClock::time_point t, bool date = true) {
  const std::time_t secs = WallClock::to_time_t(t);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  const std::tm local = fmt::localtime(secs);
  return date ? fmt::format("{:%Y-%m-%d %H:%M:%S}.{:03}", local, ms)
              : fmt::format("{:%H:%M:%S}.{:03}", local, ms);
}

std::string shorten(std::string_view line, std::size_t max) {
  if (line.size() <= max) return std::string(line);
  return fmt::format("{}...", line.substr(0, max));
}

class Job {
 public:
  explicit Job(const LaunchOptions& options) : o_(options) {}

  int run() {
    const SignalScope signals;  // before the first fork: no child's exit can be missed
    // Where rank 0 (or, elastic, the launcher) hosts the store: the first node's namespace.
    const std::string store_netns = o_.node_netns.empty() ? std::string() : o_.node_netns.front();
    std::uint16_t port = o_.master_port;
    if (o_.elastic) {
      // The store's server thread starts after SignalScope, so it inherits the blocked signals;
      // the children only exec (async-signal-safe calls) after fork. Port 0: the kernel's choice.
      comm::TcpStoreOptions so;
      so.host = o_.master_addr;
      so.port = port;
      so.is_server = true;
      {
        std::optional<InNetns> in;
        if (!store_netns.empty()) in.emplace(store_netns);
        store_ = std::make_unique<comm::TcpStore>(so);
      }
      port = store_->port();
      say("elastic: the job's store is at {}:{}{}; a process joins with MASTER_ADDR={} "
          "MASTER_PORT={} (strait train --join){}",
          o_.master_addr, port,
          store_netns.empty() ? "" : fmt::format(" in network namespace {}", store_netns),
          o_.master_addr, port,
          store_netns.empty() ? "" : " from a namespace that reaches it (strait wan exec)");
    } else if (port == 0) {
      port = comm::net::pick_free_port(o_.master_addr);
    }
    started_at_ = WallClock::now();
    ranks_.resize(static_cast<std::size_t>(o_.nproc));
    for (int r = 0; r < o_.nproc; ++r) {
      Rank& rank = ranks_[static_cast<std::size_t>(r)];
      rank.index = r;
      int err = 0;
      try {
        err = spawn(rank, make_image(o_, port, r), signals.original_mask());
      } catch (const Error& e) {  // fork or pipe failed: stop the ranks already started
        say("{}", e.what());
        result_ = 1;
        stop(SIGTERM, fmt::format("rank {} could not be started", r));
        kill_at_ = Clock::now() + o_.stop_timeout;
        break;
      }
      if (err != 0) {
        const bool searched = o_.command[0].find('/') == std::string::npos;
        say("cannot execute {:?}: {}{}", o_.command[0], std::strerror(err),
            err == ENOENT && searched ? " (is it installed and on PATH?)" : "");
        result_ = kExecFailed;
        stop(SIGTERM, "the command cannot be executed");
        kill_at_ = Clock::now() + o_.stop_timeout;
        break;
      }
    }
    supervise(signals);
    drain_output();
    if (o_.elastic && !result_ && !interrupted_) {
      // Elastic: the job succeeded if some rank finished it.
      const bool finished = std::any_of(ranks_.begin(), ranks_.end(),
                                        [](const Rank& r) { return succeeded(r.status); });
      if (!finished && elastic_failure_) result_ = *elastic_failure_;
      if (!finished && first_elastic_failed_ >= 0) first_failed_ = first_elastic_failed_;
    }
    if (first_failed_ >= 0 || interrupted_) summarize();
    return result_.value_or(0);
  }

 private:
  // Forks and execs one rank. Returns 0, or the errno of a failed exec (reported by the child
  // through a close-on-exec pipe: EOF means exec succeeded).
  int spawn(Rank& rank, const ExecImage& image, const sigset_t& child_mask) {
    const std::string prefix = o_.tag_output ? fmt::format("[rank {}] ", rank.index) : "";
    rank.out = std::make_unique<RankOutput>(STDOUT_FILENO, prefix);
    rank.err = std::make_unique<RankOutput>(STDERR_FILENO, prefix);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw Error(ErrorCode::Io, fmt::format("pipe2 failed: {}", std::strerror(errno)));
    }
    Fd read_end(fds[0]);
    Fd write_end(fds[1]);
    const pid_t launcher = getpid();
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      throw Error(ErrorCode::Io, fmt::format("cannot start rank {}: fork failed: {}", rank.index,
                                             std::strerror(errno)));
    }
    if (pid == 0) {
      exec_child(write_end.get(), launcher, child_mask, image, rank.out->child_end(),
                 rank.err->child_end());
    }
    setpgid(pid, pid);  // also done by the child: whichever runs first wins the race
    write_end.reset();
    rank.out->close_child_end();
    rank.err->close_child_end();
    rank.pid = pid;
    rank.running = true;
    int child_errno = 0;
    ssize_t n = 0;
    do {
      n = read(read_end.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof child_errno)) return 0;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
    rank.pid = -1;
    return child_errno;
  }

  void supervise(const SignalScope& signals) {
    std::vector<pollfd> fds;
    std::vector<RankOutput*> streams;  // streams[i] is polled as fds[i + 1]
    while (true) {
      reap();
      check_deadlines();
      if (std::none_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; })) {
        return;
      }
      int timeout_ms = -1;
      if (dumps_.waiting()) timeout_ms = 20;  // look for the dumps' files
      for (const auto& deadline : {term_at_, kill_at_}) {
        if (!deadline) continue;
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
        const int ms = static_cast<int>(std::clamp<long long>(left, 0, 1'000'000));
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
      poll_streams(fds, streams, signals.fd(), timeout_ms);
      for (const int sig : signals.drain()) {
        if (sig != SIGCHLD && sig != SIGPIPE) on_interrupt(sig);
      }
    }
  }

  // Waits up to timeout_ms (-1: no limit) for output or a signal, and relays what came.
  void poll_streams(std::vector<pollfd>& fds, std::vector<RankOutput*>& streams, int signal_fd,
                    int timeout_ms) {
    fds.clear();
    streams.clear();
    if (signal_fd >= 0) fds.push_back({signal_fd, POLLIN, 0});
    for (Rank& r : ranks_) {
      for (RankOutput* s : {r.out.get(), r.err.get()}) {
        if (s == nullptr || s->fd() < 0) continue;
        fds.push_back({s->fd(), POLLIN, 0});
        streams.push_back(s);
      }
    }
    const int rc = poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      throw Error(ErrorCode::Io, fmt::format("poll failed: {}", std::strerror(errno)));
    }
    const std::size_t first = signal_fd >= 0 ? 1 : 0;
    for (std::size_t i = 0; rc > 0 && i < streams.size(); ++i) {
      if (fds[i + first].revents != 0) streams[i]->pump();
    }
  }

  // Once every rank has been reaped: what their pipes still hold. A pipe that a rank's own child
  // keeps open is given up after a moment.
  void drain_output() {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    std::vector<pollfd> fds;
    std::vector<RankOutput*> streams;
    while (Clock::now() < until) {
      const bool open = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) {
        return (r.out && r.out->fd() >= 0) || (r.err && r.err->fd() >= 0);
      });
      if (!open) break;
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      poll_streams(fds, streams, -1, static_cast<int>(std::max<long long>(left.count(), 0)));
    }
    for (Rank& r : ranks_) {
      if (r.out) r.out->finish();
      if (r.err) r.err->finish();
    }
  }

  void reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      const pid_t p = waitpid(r.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (p != r.pid) continue;
      if (WIFSTOPPED(status)) {
        r.suspended = true;
        r.suspended_at = WallClock::now();
        r.suspended_by = WSTOPSIG(status);
        continue;
      }
      if (WIFCONTINUED(status)) {
        r.suspended = false;
        continue;
      }
      // What it wrote before it exited comes before the launcher's line about it.
      if (r.out) r.out->pump();
      if (r.err) r.err->pump();
      on_exit(r, status);
    }
  }

  void on_exit(Rank& r, int status) {
    r.running = false;
    r.status = status;
    r.ended_at = WallClock::now();
    if (succeeded(status) || r.stopped_by_launcher()) return;  // listed in the summary
    if (!r.sent.empty()) {
      // It outlived the launcher's signal (ignored or handled it, or died of another signal):
      // report what it did. The launcher's exit status was decided before it sent any signal.
      say("rank {} (pid {}) {} after the launcher's {}", r.index, r.pid, describe(status),
          format_signals(r.sent));
      return;
    }
    say("rank {} (pid {}) {}{}", r.index, r.pid, describe(status),
        o_.elastic ? " (--elastic: the other ranks go on)" : "");
    if (o_.elastic) {
      if (!elastic_failure_) {
        elastic_failure_ = exit_code_of(status);
        first_elastic_failed_ = r.index;
      }
      return;
    }
    if (result_) return;
    result_ = exit_code_of(status);
    first_failed_ = r.index;
    term_at_ = Clock::now() + o_.kill_grace;
    if (o_.kill_grace.count() > 0 && any_running()) {
      say("stopping the other ranks in {} (--kill-grace)", seconds(o_.kill_grace));
    }
  }

  void on_interrupt(int sig) {
    reap();  // a rank that already exited is reported as it is, not as signalled
    if (!interrupted_) {
      interrupted_ = true;
      interrupted_by_ = sig;
      interrupted_at_ = WallClock::now();
      if (!result_) result_ = 128 + sig;
      term_at_.reset();
      const auto running = running_ranks();
      if (!running.empty()) {
        say("got {}: forwarding it to {} ({} again kills them)", signal_name(sig),
            format_ranks(running), sig == SIGINT ? "Ctrl-C" : signal_name(sig));
      }
      send_to_running(sig);
      const auto deadline = Clock::now() + o_.stop_timeout;
      kill_at_ = kill_at_ ? std::min(*kill_at_, deadline) : deadline;
      return;
    }
    const auto running = running_ranks();
    if (!running.empty()) say("got {} again: killing {}", signal_name(sig), format_ranks(running));
    send_to_running(SIGKILL);
    kill_at_.reset();
  }

  // Before the ranks of a failed job are stopped: SIGUSR1 to those that write a flight-recorder
  // dump on it (tools/dump_request.h); the SIGTERM waits up to kDumpWait for their files.
  static constexpr std::chrono::seconds kDumpWait{2};
  bool ask_for_dumps() {
    std::vector<std::pair<int, pid_t>> running;
    for (const Rank& r : ranks_) {
      if (r.running && !r.suspended) running.emplace_back(r.index, r.pid);
    }
    const std::vector<int> asked = dumps_.ask(running);
    if (!asked.empty()) {
      say("asking {} for {} flight-recorder dump{}", format_ranks(asked),
          asked.size() == 1 ? "its" : "their", asked.size() == 1 ? "" : "s");
    }
    return !asked.empty();
  }

  void check_deadlines() {
    const auto now = Clock::now();
    if (term_at_ && now >= *term_at_ && first_failed_ >= 0 && !dumps_.asked() && ask_for_dumps()) {
      term_at_ = now + kDumpWait;
    }
    const auto alive = [&](pid_t pid) {
      return std::any_of(ranks_.begin(), ranks_.end(),
                         [&](const Rank& r) { return r.running && r.pid == pid; });
    };
    if (term_at_ && dumps_.waiting() && !dumps_.pending(alive)) term_at_ = now;
    if (term_at_ && now >= *term_at_) {
      term_at_.reset();
      dumps_.clear();
      stop(SIGTERM, fmt::format("rank {} failed", first_failed_));
      kill_at_ = now + o_.stop_timeout;
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      reap();
      const auto running = running_ranks();
      if (!running.empty()) {
        say("{} still running {} after being asked to stop: sending SIGKILL", format_ranks(running),
            seconds(o_.stop_timeout));
      }
      send_to_running(SIGKILL);
    }
  }

  void stop(int sig, const std::string& why) {
    reap();  // a rank that already exited is reported as it is, not as signalled
    const auto running = running_ranks();
    if (running.empty()) return;
    say("sending {} to {} ({})", signal_name(sig), format_ranks(running), why);
    send_to_running(sig);
  }

  // Signals whole process groups, so that a rank's own children stop too. Only groups whose
  // leader is not yet reaped: until then its pid, and so the group id, cannot be reused. Callers
  // reap() first, so that only a rank exiting at this very moment can be sent a signal it never
  // sees (and be reported as exiting after it). A suspended rank also gets SIGCONT, as a shell's
  // `kill` does, so that it acts on the signal now rather than at SIGKILL.
  void send_to_running(int sig) {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      if (r.sent.empty() && r.err) {
        r.err->pump();  // what it wrote before the signal
        r.own_error = r.err->last_error_line();
      }
      if (!r.was_sent(sig)) r.sent.push_back(sig);
      if (kill(-r.pid, sig) != 0) kill(r.pid, sig);  // group not set up yet: the rank itself
      if (r.suspended && sig != SIGKILL && kill(-r.pid, SIGCONT) != 0) kill(r.pid, SIGCONT);
    }
  }

  [[nodiscard]] std::vector<int> running_ranks() const {
    std::vector<int> out;
    for (const Rank& r : ranks_) {
      if (r.running) out.push_back(r.index);
    }
    return out;
  }

  [[nodiscard]] bool any_running() const { return !running_ranks().empty(); }

  [[nodiscard]] std::string after_start(WallClock::time_point t) const {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - started_at_);
    return fmt::format("{:.1f} s after the start", static_cast<double>(ms.count()) / 1000.0);
  }

  // How a rank other than the first failure ended, in one line (without its index).
  [[nodiscard]] std::string outcome(const Rank& r) const {
    if (r.pid < 0) return "not started";
    std::string out;
    if (r.suspended_at) {
      out = fmt::format("was suspended by {} at {}, then ", signal_name(r.suspended_by),
                        wall_time(*r.suspended_at, false));
    }
    if (r.stopped_by_launcher() && r.own_error) {
      return out + fmt::format("had already failed, then the launcher's {} ended it: {}",
                               signal_name(WTERMSIG(r.status)), shorten(*r.own_error, 120));
    }
    if (r.stopped_by_launcher()) {
      return out + fmt::format("stopped by the launcher ({})", signal_name(WTERMSIG(r.status)));
    }
    out += describe(r.status);
    if (!r.sent.empty()) out += fmt::format(" after the launcher's {}", format_signals(r.sent));
    if (succeeded(r.status) && r.sent.empty()) return out;
    // A failure of its own: when, and the last thing it said.
    out += fmt::format(" at {}", wall_time(r.ended_at, false));
    if (const RankOutput* said = last_words(r)) out += ": " + shorten(said->tail().back(), 120);
    return out;
  }

  // The stream that holds a rank's error: stderr, or stdout when it wrote nothing on stderr.
  [[nodiscard]] static const RankOutput* last_words(const Rank& r) {
    if (r.err && !r.err->tail().empty()) return r.err.get();
    if (r.out && !r.out->tail().empty()) return r.out.get();
    return nullptr;
  }

  // The last lines of the output: the root cause, whole, then each other rank's outcome (as
  // torchrun's error summary, with the first failure first).
  void summarize() const {
    constexpr std::string_view kRule = "==========";
    if (first_failed_ >= 0) {
      const Rank& first = ranks_[static_cast<std::size_t>(first_failed_)];
      say("{} rank {} failed first {}", kRule, first.index, kRule);
      say("rank {} (pid {}) {} at {} ({})", first.index, first.pid, describe(first.status),
          wall_time(first.ended_at), after_start(first.ended_at));
      if (first.suspended_at) {
        say("it had been suspended by {} at {}", signal_name(first.suspended_by),
            wall_time(*first.suspended_at));
      }
      if (const RankOutput* said = last_words(first)) {
        const auto& tail = said->tail();
        const bool err = said == first.err.get();
        say("its last {} on {}{}:",
            tail.size() == 1 ? "line" : fmt::format("{} lines", tail.size()),
            err ? "stderr" : "stdout (nothing on stderr)",
            said->line_count() > tail.size() ? fmt::format(" (of {})", said->line_count()) : "");
        for (const std::string& line : tail) say("  {}", line);
      } else {
        say("it wrote nothing on stdout or stderr");
      }
    } else {
      say("{} interrupted {}", kRule, kRule);
      say("the launcher got {} at {} ({}) and stopped the ranks", signal_name(interrupted_by_),
          wall_time(interrupted_at_), after_start(interrupted_at_));
    }
    // The other ranks, those with the same outcome on one line.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (const Rank& r : ranks_) {
      if (r.index == first_failed_) continue;
      const std::string how = outcome(r);
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == how; });
      if (it == groups.end()) {
        groups.emplace_back(how, std::vector<int>{r.index});
      } else {
        it->second.push_back(r.index);
      }
    }
    if (!groups.empty()) say("{}:", first_failed_ >= 0 ? "the other ranks" : "the ranks");
    for (const auto& [how, which] : groups) say("  {}: {}", format_ranks(which), how);
  }

  const LaunchOptions& o_;
  std::vector<Rank> ranks_;
  std::optional<int> result_;  // the launcher's exit status, decided by the first failure
  int first_failed_ = -1;
  std::unique_ptr<comm::TcpStore> store_;  // elastic: the job's store, hosted here
  std::optional<int> elastic_failure_;     // elastic: the first failure's exit status
  int first_elastic_failed_ = -1;
  bool interrupted_ = false;
  int interrupted_by_ = 0;
  WallClock::time_point interrupted_at_{};
  WallClock::time_point started_at_{};
  std::optional<Clock::time_point> term_at_;  // when to SIGTERM the ranks still running
  std::optional<Clock::time_point> kill_at_;  // when to SIGKILL them
  DumpRequest dumps_;                         // flight-recorder dumps asked of the ranks
};

}  // namespace

int launch(const LaunchOptions& options) {
  if (options.nproc < 1 || options.nproc > kMaxRanks) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("-n {} is out of range: pass 1 to {} ranks", options.nproc, kMaxRanks));
  }
  if (options.command.empty() || options.command[0].empty()) {
    throw Error(ErrorCode::InvalidArgument,
                "no command to run: usage is `strait run -n N -- CMD ARGS...`");
  }
  if (options.master_addr.empty()) {
    throw Error(ErrorCode::InvalidArgument, "--master-addr is empty: pass a host name or address");
  }
  if (options.nodes < 1 || options.nproc % options.nodes != 0) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{} ranks cannot be split evenly into {} nodes: pass a multiple",
                            options.nproc, options.nodes));
  }
  const auto per_node_list = [&](std::size_t n, const char* what) {
    if (n != 0 && n != static_cast<std::size_t>(options.nodes)) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{} {} given for {} nodes: give one per node or none", n, what,
                              options.nodes));
    }
  };
  per_node_list(options.node_netns.size(), "network namespaces");
  per_node_list(options.node_env.size(), "environments");
  if (options.kill_grace.count() < 0 || options.stop_timeout.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, "--kill-grace and --stop-timeout cannot be negative");
  }
  Job job(options);
  return job.run();
}

}  // namespace strait::tools
