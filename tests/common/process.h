// Helpers for tests that run programs as a user would: spawning a process with its output captured
// in a file and waiting for it with a limit, waiting for files, and looking at running processes
// through /proc (children, environment). Scratch directories (temp_dir.h) and reading files and
// searching text (text.h) come with it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/common/text.h"

namespace strait::test {

// True while pid exists (a zombie counts: it has not been reaped).
inline bool process_exists(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

// Waits until every path exists; false after `limit`.
inline bool wait_for_files(const std::vector<std::filesystem::path>& paths,
                           std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (const auto& p : paths) all = all && std::filesystem::exists(p);
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A pid written to a file by a script.
inline pid_t read_pid(const std::filesystem::path& p) {
  return static_cast<pid_t>(std::stol(read_file(p)));
}

// NAME=value lines (`env` output, or /proc/<pid>/environ with NULs as separators) as a map.
inline std::map<std::string, std::string> parse_env(const std::string& text,
                                                    char separator = '\n') {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line, separator)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// The environment of a running process (empty once it is gone).
inline std::map<std::string, std::string> process_environment(pid_t pid) {
  return parse_env(read_file("/proc/" + std::to_string(pid) + "/environ"), '\0');
}

// The direct children of a running process, over all its threads (a child belongs to the thread
// that forked it).
inline std::vector<pid_t> child_processes(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::istringstream in(read_file(task.path() / "children"));
    pid_t child = 0;
    while (in >> child) children.push_back(child);
  }
  return children;
}

// Pids of the processes whose environment has NAME=value (all processes this user may inspect).
inline std::vector<pid_t> processes_with_environment(const std::string& name,
                                                     const std::string& value) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string dir = entry.path().filename().string();
    if (dir.empty() || dir.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(dir));
    const auto env = process_environment(pid);
    const auto it = env.find(name);
    if (it != env.end() && it->second == value) found.push_back(pid);
  }
  return found;
}

// PROGRAM ARGS... running with stdout and stderr captured in a file (stderr in a file of its own
// when `error_output` is given), with this process's environment plus `extra_env` ("NAME=value"
// entries, replacing variables of the same name); killed (SIGKILL) and reaped when destroyed
// before wait() returned.
class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args,
          const std::filesystem::path& output, const std::vector<std::string>& extra_env = {},
          const std::filesystem::path& error_output = {})
      : output_(output), error_output_(error_output) {
    std::vector<std::string> all = {program};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    argv.reserve(all.size() + 1);
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);

    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = false;
      for (const auto& x : extra_env) replaced = replaced || x.substr(0, x.find('=')) == name;
      if (!replaced) env_strings.push_back(entry);
    }
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    envp.reserve(env_strings.size() + 1);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    if (error_output.empty()) {
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    } else {
      posix_spawn_file_actions_addopen(&actions, 2, error_output.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    // The program must see SIGINT and SIGTERM whatever the test runner does with them.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigset_t defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = posix_spawn(&pid_, all[0].c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw std::system_error(rc, std::generic_category(), "cannot spawn " + all[0]);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // -1 once wait() returned.
  [[nodiscard]] pid_t pid() const { return pid_; }

  // The wait status. A process still running after `limit` fails the test and is sent
  // `stop_signal`, then SIGKILL if it is still running `grace` later (SIGINT with a grace lets a
  // launcher stop its own children first).
  int wait(std::chrono::seconds limit = std::chrono::seconds(60), int stop_signal = SIGKILL,
           std::chrono::seconds grace = std::chrono::seconds(0)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (true) {
      const pid_t p = ::waitpid(pid_, &status, WNOHANG);
      if (p == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the process did not exit within " << limit.count() << "s; output:\n"
                      << output();
        ::kill(pid_, stop_signal);
        const auto kill_at = std::chrono::steady_clock::now() + grace;
        while (::waitpid(pid_, &status, WNOHANG) != pid_) {
          if (std::chrono::steady_clock::now() >= kill_at) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return status;
  }

  // The exit code (128 + signal when the process itself was killed).
  int exit_code(std::chrono::seconds limit = std::chrono::seconds(60), int stop_signal = SIGKILL,
                std::chrono::seconds grace = std::chrono::seconds(0)) {
    const int status = wait(limit, stop_signal, grace);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  [[nodiscard]] std::string output() const { return read_file(output_); }
  // Its stderr when it has a file of its own, else "".
  [[nodiscard]] std::string error_output() const {
    return error_output_.empty() ? std::string() : read_file(error_output_);
  }

 private:
  std::filesystem::path output_;
  std::filesystem::path error_output_;
  pid_t pid_ = -1;
};

// Polls `p`'s output every 100 ms until it contains `marker` or `limit` has passed; returns the
// output as last read (the caller asserts what it needs in it).
inline std::string wait_for_output(const Process& p, const std::string& marker,
                                   std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::string text = p.output();
  while (text.find(marker) == std::string::npos && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = p.output();
  }
  return text;
}

}  // namespace strait::test
