#include "offload/io_engine_factory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "offload/remove_on_exit.h"
#include "tests/common/scratch_mount.h"
#include "tests/common/temp_dir.h"
#include "tests/common/text.h"
#include "tests/offload/test_util.h"

namespace strait::offload {
namespace {

using strait::test::contains;
using strait::test::ScratchMount;
using strait::test::TempDir;

// Independent probes with raw system calls (no liburing, no strait code).
bool kernel_allows_io_uring() {
  io_uring_params params{};
  const long fd = ::syscall(__NR_io_uring_setup, 4, &params);
  if (fd < 0) return false;
  ::close(static_cast<int>(fd));
  return true;
}

bool file_system_allows_o_direct(const std::filesystem::path& dir) {
  const RemoveOnExit probe(dir / "o_direct_probe");
  const int fd = ::open(probe.path().c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

ErrorCode code_of(const std::function<void()>& fn, std::string* what = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (what != nullptr) *what = e.what();
    return e.code();
  }
  return ErrorCode::Internal;  // nothing thrown
}

// Collects what spdlog logs while it lives (the default logger is swapped and restored).
class LogCapture {
 public:
  LogCapture() : old_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    sink->set_pattern("%l: %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() { spdlog::set_default_logger(old_); }
  [[nodiscard]] std::string text() const { return text_.str(); }
  // Lines logged at warning level.
  [[nodiscard]] std::vector<std::string> warnings() const {
    std::vector<std::string> out;
    std::istringstream in(text_.str());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("warning: ", 0) == 0) out.push_back(line);
    }
    return out;
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> old_;
};

class FactoryTest : public ::testing::Test {
 protected:
  testing::EnvGuard env_{"STRAIT_IO_ENGINE", std::nullopt};  // the automatic choice by default
  TempDir dir_;
};

TEST_F(FactoryTest, PicksUringWhereIoUringAndODirectWork) {
  const bool expect_uring = kernel_allows_io_uring() && file_system_allows_o_direct(dir_.path());
  const IoEngineChoice choice = make_io_engine(dir_.path());
  EXPECT_EQ(choice.engine->kind(), expect_uring ? IoEngineKind::Uring : IoEngineKind::Posix)
      << choice.reason;
  // The probe file is gone.
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
}

TEST_F(FactoryTest, FallsBackToPosixWhereODirectIsRefused) {
  ScratchMount ramfs("ramfs", 0, "");  // ramfs has no O_DIRECT on any kernel
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.error();
  ASSERT_FALSE(file_system_allows_o_direct(ramfs.path()));
  const IoEngineChoice choice = make_io_engine(ramfs.path());
  EXPECT_EQ(choice.engine->kind(), IoEngineKind::Posix);
  EXPECT_TRUE(contains(choice.reason, "O_DIRECT")) << choice.reason;
  EXPECT_TRUE(std::filesystem::is_empty(ramfs.path()));
}

TEST_F(FactoryTest, FollowsODirectSupportOnTmpfs) {
  // /dev/shm is tmpfs. Before Linux 6.6 tmpfs refused O_DIRECT (fallback to posix); newer kernels
  // accept it, and then io_uring is the right choice there too.
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const testing::EnvGuard tmp("TMPDIR", "/dev/shm");
  TempDir shm;
  const bool direct = file_system_allows_o_direct(shm.path());
  const IoEngineChoice choice = make_io_engine(shm.path());
  if (direct && kernel_allows_io_uring()) {
    EXPECT_EQ(choice.engine->kind(), IoEngineKind::Uring) << choice.reason;
  } else {
    EXPECT_EQ(choice.engine->kind(), IoEngineKind::Posix);
    EXPECT_TRUE(contains(choice.reason, direct ? "io_uring" : "O_DIRECT")) << choice.reason;
  }
}

TEST_F(FactoryTest, FallbackWarnsOnceSayingWhyAndWhatToDo) {
  ScratchMount ramfs("ramfs", 0, "");
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.error();
  const LogCapture log;
  const IoEngineChoice first = make_io_engine(ramfs.path());
  const IoEngineChoice second = make_io_engine(ramfs.path());
  ASSERT_EQ(first.engine->kind(), IoEngineKind::Posix);
  ASSERT_EQ(second.engine->kind(), IoEngineKind::Posix);
  const std::vector<std::string> warnings = log.warnings();
  ASSERT_EQ(warnings.size(), 1U) << log.text();  // once per reason, not per engine
  const std::string& w = warnings[0];
  EXPECT_TRUE(contains(w, "using the posix (pread/pwrite) I/O engine instead of io_uring")) << w;
  EXPECT_TRUE(contains(w, ramfs.path().string())) << w;  // where
  EXPECT_TRUE(contains(w, "refuses O_DIRECT (")) << w;   // why, with the errno
  EXPECT_TRUE(contains(w, "EINVAL")) << w;
  EXPECT_TRUE(contains(w, "STRAIT_IO_ENGINE=posix")) << w;  // what to do
  EXPECT_EQ(w, "warning: offload: using the posix (pread/pwrite) I/O engine instead of io_uring: " +
                   first.reason);
}

TEST_F(FactoryTest, ForcedPosixDoesNotWarn) {
  const testing::EnvGuard force("STRAIT_IO_ENGINE", "posix");
  const LogCapture log;
  EXPECT_EQ(make_io_engine(dir_.path()).engine->kind(), IoEngineKind::Posix);
  EXPECT_TRUE(log.warnings().empty()) << log.text();
}

TEST_F(FactoryTest, EnvironmentForcesPosix) {
  const testing::EnvGuard force("STRAIT_IO_ENGINE", "posix");
  const IoEngineChoice choice = make_io_engine(dir_.path());
  EXPECT_EQ(choice.engine->kind(), IoEngineKind::Posix);
  EXPECT_TRUE(contains(choice.reason, "STRAIT_IO_ENGINE=posix")) << choice.reason;
  IoEngineOptions options;  // the API's force wins over the environment
  options.force = IoEngineKind::Uring;
  if (kernel_allows_io_uring() && file_system_allows_o_direct(dir_.path())) {
    EXPECT_EQ(make_io_engine(dir_.path(), options).engine->kind(), IoEngineKind::Uring);
  }
}

TEST_F(FactoryTest, ForcingUringWhereItCannotWorkSaysWhy) {
  ScratchMount ramfs("ramfs", 0, "");
  if (!ramfs.ok()) GTEST_SKIP() << ramfs.error();
  const testing::EnvGuard force("STRAIT_IO_ENGINE", "uring");
  std::string what;
  EXPECT_EQ(code_of([&] { make_io_engine(ramfs.path()); }, &what), ErrorCode::Unavailable);
  EXPECT_TRUE(contains(what, "STRAIT_IO_ENGINE=uring")) << what;
  EXPECT_TRUE(contains(what, kernel_allows_io_uring() ? "O_DIRECT" : "io_uring")) << what;
}

TEST_F(FactoryTest, RejectsUnknownEngineName) {
  const testing::EnvGuard force("STRAIT_IO_ENGINE", "spdk");
  std::string what;
  EXPECT_EQ(code_of([&] { make_io_engine(dir_.path()); }, &what), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "posix or uring")) << what;
}

TEST_F(FactoryTest, BadDirectoriesAreInvalidArguments) {
  std::string what;
  EXPECT_EQ(code_of([&] { make_io_engine(dir_.path() / "missing"); }, &what),
            ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "does not exist")) << what;
  EXPECT_TRUE(contains(what, "--offload-dir")) << what;

  const std::filesystem::path file = dir_.path() / "plain-file";
  std::ofstream(file) << "x";
  EXPECT_EQ(code_of([&] { make_io_engine(file); }, &what), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(what, "not a directory")) << what;

  // /proc exists and is a directory, but no file can be created there, even by root.
  if (kernel_allows_io_uring()) {
    EXPECT_EQ(code_of([&] { make_io_engine("/proc"); }, &what), ErrorCode::InvalidArgument);
    EXPECT_TRUE(contains(what, "not writable")) << what;
  }
}

TEST_F(FactoryTest, FallsBackToPosixWhenSeccompRefusesIoUring) {
#if defined(__x86_64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  GTEST_SKIP() << "no seccomp architecture constant for this CPU in the test";
  constexpr std::uint32_t kArch = 0;
#endif
  const std::filesystem::path dir = dir_.path();
  // The filter is process-wide and permanent: install it in a child.
  const int code = testing::run_in_child([&] {
    sock_filter filter[] = {
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(seccomp_data, arch)},
        {BPF_JMP | BPF_JEQ | BPF_K, 1, 0, kArch},
        {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(seccomp_data, nr)},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, __NR_io_uring_setup},
        {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | EPERM},
        {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
    };
    const sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 77;
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return 77;
    if (kernel_allows_io_uring()) return 10;  // the filter did not take
    const LogCapture log;
    const IoEngineChoice choice = make_io_engine(dir);
    if (choice.engine->kind() != IoEngineKind::Posix) return 1;
    if (!contains(choice.reason, "EPERM") || !contains(choice.reason, "seccomp")) {
      std::cerr << "reason: " << choice.reason << "\n";
      return 2;
    }
    const std::vector<std::string> warnings = log.warnings();
    if (warnings.size() != 1 || !contains(warnings[0], "instead of io_uring") ||
        !contains(warnings[0], "io_uring_disabled") || !contains(warnings[0], "EPERM")) {
      std::cerr << "log: " << log.text() << "\n";
      return 4;
    }
    IoEngineOptions forced;
    forced.force = IoEngineKind::Uring;
    if (code_of([&] { make_io_engine(dir, forced); }) != ErrorCode::Unavailable) return 3;
    return 0;
  });
  if (code == 77) GTEST_SKIP() << "cannot install a seccomp filter here";
  EXPECT_EQ(code, 0) << "1: not posix, 2: reason does not say why, 3: forced uring did not "
                        "fail, 4: not one warning saying why, 10: filter ineffective";
}

}  // namespace
}  // namespace strait::offload
