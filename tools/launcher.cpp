#include "tools/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
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
#include <optional>

#include "comm/bootstrap/socket.h"
#include "core/error.h"
#include "core/fd.h"

namespace strait::tools {
namespace {

using Clock = std::chrono::steady_clock;
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

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "strait run: {}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

// Blocks the signals the launcher handles and delivers them through a signalfd instead, so that
// no work happens in a signal handler. Restores the previous mask and SIGCHLD action on exit.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    for (const int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, sig);
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
  for (const auto& [name, value] : vars) image.env.push_back(name + "=" + value);
  finalize(image.args, image.argv);
  finalize(image.env, image.envp);
  return image;
}

// The child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(int error_fd, pid_t launcher, const sigset_t& mask,
                             const ExecImage& image) {
  setpgid(0, 0);
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

  [[nodiscard]] bool was_sent(int sig) const {
    return std::find(sent.begin(), sent.end(), sig) != sent.end();
  }
  // Ended by a signal the launcher sent it, rather than by its own exit (even one prompted by
  // such a signal) or by some other signal.
  [[nodiscard]] bool stopped_by_launcher() const {
    return WIFSIGNALED(status) && was_sent(WTERMSIG(status));
  }
};

class Job {
 public:
  explicit Job(const LaunchOptions& options) : o_(options) {}

  int run() {
    const SignalScope signals;  // before the first fork: no child's exit can be missed
    const std::uint16_t port =
        o_.master_port != 0 ? o_.master_port : comm::net::pick_free_port(o_.master_addr);
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
    std::vector<int> stopped;
    for (const Rank& r : ranks_) {
      if (r.stopped_by_launcher()) stopped.push_back(r.index);
    }
    if (!stopped.empty()) say("stopped by the launcher: {}", format_ranks(stopped));
    return result_.value_or(0);
  }

 private:
  // Forks and execs one rank. Returns 0, or the errno of a failed exec (reported by the child
  // through a close-on-exec pipe: EOF means exec succeeded).
  int spawn(Rank& rank, const ExecImage& image, const sigset_t& child_mask) {
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
    if (pid == 0) exec_child(write_end.get(), launcher, child_mask, image);
    setpgid(pid, pid);  // also done by the child: whichever runs first wins the race
    write_end.reset();
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
    while (true) {
      reap();
      check_deadlines();
      if (std::none_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; })) {
        return;
      }
      int timeout_ms = -1;
      for (const auto& deadline : {term_at_, kill_at_}) {
        if (!deadline) continue;
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
        const int ms = static_cast<int>(std::clamp<long long>(left, 0, 1'000'000));
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
      pollfd pfd{signals.fd(), POLLIN, 0};
      const int rc = poll(&pfd, 1, timeout_ms);
      if (rc < 0 && errno != EINTR) {
        throw Error(ErrorCode::Io, fmt::format("poll failed: {}", std::strerror(errno)));
      }
      for (const int sig : signals.drain()) {
        if (sig != SIGCHLD) on_interrupt(sig);
      }
    }
  }

  void reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      const pid_t p = waitpid(r.pid, &status, WNOHANG);
      if (p == r.pid) on_exit(r, status);
    }
  }

  void on_exit(Rank& r, int status) {
    r.running = false;
    r.status = status;
    if (succeeded(status) || r.stopped_by_launcher()) return;  // the latter listed at the end
    if (!r.sent.empty()) {
      // It outlived the launcher's signal (ignored or handled it, or died of another signal):
      // report what it did. The launcher's exit status was decided before it sent any signal.
      say("rank {} (pid {}) {} after the launcher's {}", r.index, r.pid, describe(status),
          format_signals(r.sent));
      return;
    }
    say("rank {} (pid {}) {}", r.index, r.pid, describe(status));
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

  void check_deadlines() {
    const auto now = Clock::now();
    if (term_at_ && now >= *term_at_) {
      term_at_.reset();
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
  // sees (and be reported as exiting after it).
  void send_to_running(int sig) {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      if (!r.was_sent(sig)) r.sent.push_back(sig);
      if (kill(-r.pid, sig) != 0) kill(r.pid, sig);  // group not set up yet: the rank itself
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

  const LaunchOptions& o_;
  std::vector<Rank> ranks_;
  std::optional<int> result_;  // the launcher's exit status, decided by the first failure
  int first_failed_ = -1;
  bool interrupted_ = false;
  std::optional<Clock::time_point> term_at_;  // when to SIGTERM the ranks still running
  std::optional<Clock::time_point> kill_at_;  // when to SIGKILL them
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
