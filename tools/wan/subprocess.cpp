#include "tools/wan/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fd.h"

extern char** environ;

namespace strait::tools {

CommandResult run_capture(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error(ErrorCode::InvalidArgument, "run_capture: empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(ErrorCode::Io, fmt::format("pipe2 failed: {}", std::strerror(errno)));
  }
  Fd read_end(fds[0]);
  Fd write_end(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> ptrs;
  ptrs.reserve(args.size() + 1);
  for (auto& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, ptrs[0], &actions, nullptr, ptrs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  write_end.reset();
  if (err != 0) {
    throw Error(ErrorCode::Io,
                fmt::format("cannot run {}: {}{}", argv[0], std::strerror(err),
                            err == ENOENT ? " (ip and tc come with Debian's iproute2: run "
                                            "scripts/setup.sh)"
                                          : ""));
  }
  CommandResult result;
  std::array<char, 4096> buf{};
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buf.data(), buf.size());
    if (n > 0) {
      result.output.append(buf.data(), static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string run_checked(const std::vector<std::string>& argv) {
  CommandResult r = run_capture(argv);
  if (!r.ok()) {
    while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
    throw Error(ErrorCode::Io, fmt::format("`{}` failed (exit status {}): {}", fmt::join(argv, " "),
                                           r.status, r.output));
  }
  return r.output;
}

}  // namespace strait::tools
