#include "offload/pinned_pool.h"

#include <gtest/gtest.h>
#include <hwloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/device_reduce.h"
#include "tests/common/expect_error.h"
#include "tests/common/gpu.h"
#include "tests/common/text.h"
#include "tests/offload/mlock_check.h"
#include "tests/offload/test_util.h"

#if STRAIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/device_buffer.h"
#endif

namespace strait::offload {
namespace {

namespace fs = std::filesystem;
using strait::test::contains;
using strait::test::expect_error;

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

PinnedPoolOptions small_classes() {
  PinnedPoolOptions o;
  o.max_class_bytes = 16 * kPage;
  return o;
}

bool all_equal(const PinnedPool::Lease& l, std::byte value) {
  return std::all_of(l.data(), l.data() + l.size(), [&](std::byte x) { return x == value; });
}

// NUMA nodes as sysfs lists them (independent of hwloc), ascending.
std::vector<unsigned> sysfs_nodes() {
  std::vector<unsigned> nodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.rfind("node", 0) == 0 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      nodes.push_back(static_cast<unsigned>(std::stoul(name.substr(4))));
    }
  }
  std::sort(nodes.begin(), nodes.end());
  if (nodes.empty()) nodes.push_back(0);  // no NUMA in the kernel: one node
  return nodes;
}

// The node of a CPU per sysfs (/sys/devices/system/cpu/cpuN/nodeM); node 0 when none is listed.
unsigned sysfs_cpu_node(int cpu) {
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator("/sys/devices/system/cpu/cpu" + std::to_string(cpu), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.rfind("node", 0) == 0) {
      return static_cast<unsigned>(std::stoul(name.substr(4)));
    }
  }
  return 0;
}

// Why this process may not bind memory (mbind refused, e.g. by a container's seccomp profile),
// tried on a scratch mapping with hwloc directly; nullopt when binding works, and then the pool
// must bind too.
std::optional<std::string> mbind_refused() {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return std::string("mmap failed");
  hwloc_topology_t topo = nullptr;
  hwloc_topology_init(&topo);
  hwloc_topology_load(topo);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, sysfs_nodes().front());
  std::optional<std::string> why;
  if (hwloc_set_area_membind(topo, p, kPage, set, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) !=
      0) {
    why = std::string("the kernel refuses mbind here: ") + std::strerror(errno);
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  ::munmap(p, kPage);
  return why;
}

#define STRAIT_SKIP_IF_MBIND_REFUSED()             \
  do {                                             \
    if (const auto strait_why = mbind_refused()) { \
      GTEST_SKIP() << *strait_why;                 \
    }                                              \
  } while (false)

// Where hwloc says the pages of a lease are (after touching them all) and which policy binds them.
struct Location {
  std::vector<unsigned> nodes;  // nodes holding pages
  std::vector<unsigned> bound;  // nodes of the area's binding
  hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
};

std::vector<unsigned> to_vector(hwloc_const_bitmap_t set) {
  std::vector<unsigned> out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) {
    out.push_back(static_cast<unsigned>(i));
  }
  return out;
}

Location locate(const PinnedPool::Lease& lease) {
  std::memset(lease.data(), 1, lease.size());  // first touch for pages mlock did not fault in
  hwloc_topology_t topo = nullptr;
  EXPECT_EQ(hwloc_topology_init(&topo), 0);
  EXPECT_EQ(hwloc_topology_load(topo), 0);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  Location loc;
  EXPECT_EQ(
      hwloc_get_area_memlocation(topo, lease.data(), lease.size(), set, HWLOC_MEMBIND_BYNODESET), 0)
      << std::strerror(errno);
  loc.nodes = to_vector(set);
  EXPECT_EQ(hwloc_get_area_membind(topo, lease.data(), lease.size(), set, &loc.policy,
                                   HWLOC_MEMBIND_BYNODESET),
            0)
      << std::strerror(errno);
  loc.bound = to_vector(set);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return loc;
}

TEST(PinnedPool, SizeClassesArePowersOfTwoFromAPageThenPageMultiples) {
  const PinnedPool pool(small_classes());
  EXPECT_EQ(pool.class_bytes(0), 0U);
  EXPECT_EQ(pool.class_bytes(1), kPage);
  EXPECT_EQ(pool.class_bytes(kPage - 1), kPage);
  EXPECT_EQ(pool.class_bytes(kPage), kPage);
  EXPECT_EQ(pool.class_bytes(kPage + 1), 2 * kPage);
  EXPECT_EQ(pool.class_bytes(3 * kPage), 4 * kPage);
  EXPECT_EQ(pool.class_bytes(5 * kPage - 7), 8 * kPage);
  EXPECT_EQ(pool.class_bytes(16 * kPage), 16 * kPage);  // the cap is still a class
  EXPECT_EQ(pool.class_bytes(16 * kPage + 1), 17 * kPage);
  EXPECT_EQ(pool.class_bytes(20 * kPage - 1), 20 * kPage);
  EXPECT_EQ(pool.class_bytes(100 * kPage), 100 * kPage);
  expect_error(ErrorCode::InvalidArgument,
               [&] { static_cast<void>(pool.class_bytes(SIZE_MAX - kPage + 2)); });

  // Default cap: 64 MiB.
  const PinnedPool defaults;
  EXPECT_EQ(defaults.class_bytes((std::size_t{40} << 20) + 1), std::size_t{64} << 20);
  EXPECT_EQ(defaults.class_bytes((std::size_t{64} << 20) + 1), (std::size_t{64} << 20) + kPage);
}

TEST(PinnedPool, RejectsAClassCapThatIsNoPowerOfTwoPageMultiple) {
  for (const std::size_t cap : {std::size_t{0}, kPage / 2, 3 * kPage, 6 * kPage + 1}) {
    PinnedPoolOptions o;
    o.max_class_bytes = cap;
    expect_error(ErrorCode::InvalidArgument, [&] { const PinnedPool pool(o); });
  }
}

TEST(PinnedPool, LeasesArePageAlignedZeroFilledAndOfTheirClassSize) {
  PinnedPool pool(small_classes());
  for (const std::size_t request : {std::size_t{1}, kPage + 1, 3 * kPage, 16 * kPage + 5}) {
    const PinnedPool::Lease l = pool.acquire(request);
    ASSERT_FALSE(l.empty());
    EXPECT_EQ(l.size(), pool.class_bytes(request));
    EXPECT_EQ(l.bytes().size(), l.size());
    EXPECT_EQ(std::bit_cast<std::uintptr_t>(l.data()) % kPage, 0U) << request;
    EXPECT_TRUE(all_equal(l, std::byte{0})) << request;
    std::memset(l.data(), 0x5a, l.size());  // every byte of the class is writable
  }
  const PinnedPool::Lease none = pool.acquire(0);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.size(), 0U);
  EXPECT_EQ(pool.stats().misses, 4U);  // the empty lease counts nothing
}

TEST(PinnedPool, AReleasedBufferIsReusedLastInFirstOut) {
  PinnedPool pool(small_classes());
  std::byte* a = nullptr;
  std::byte* b = nullptr;
  {
    PinnedPool::Lease la = pool.acquire(5000);  // class 2 pages with 4 KiB pages
    PinnedPool::Lease lb = pool.acquire(kPage + 1);
    a = la.data();
    b = lb.data();
    ASSERT_NE(a, b);
    la.data()[0] = std::byte{7};
    la.reset();
    EXPECT_TRUE(la.empty());
  }  // lb goes back after la: it is the first to be reused
  const PinnedPool::Lease first = pool.acquire(2 * kPage);
  const PinnedPool::Lease second = pool.acquire(2 * kPage - 3);
  EXPECT_EQ(first.data(), b);
  EXPECT_EQ(second.data(), a);
  EXPECT_EQ(second.data()[0], std::byte{7});  // reused, not cleared
  const PinnedPool::Lease other_class = pool.acquire(kPage);
  EXPECT_NE(other_class.data(), a);
  EXPECT_NE(other_class.data(), b);
  const PinnedPoolStats s = pool.stats();
  EXPECT_EQ(s.misses, 3U);
  EXPECT_EQ(s.hits, 2U);
}

TEST(PinnedPool, StatisticsFollowEveryStepExactly) {
  PinnedPool pool(small_classes());
  auto expect = [&](std::size_t held, std::size_t in_use, std::size_t peak, std::size_t buffers,
                    std::uint64_t hits, std::uint64_t misses, std::uint64_t frees, int line) {
    const PinnedPoolStats s = pool.stats();
    EXPECT_EQ(s.bytes_held, held) << "line " << line;
    EXPECT_EQ(s.bytes_in_use, in_use) << "line " << line;
    EXPECT_EQ(s.peak_bytes_in_use, peak) << "line " << line;
    EXPECT_EQ(s.buffers_held, buffers) << "line " << line;
    EXPECT_EQ(s.hits, hits) << "line " << line;
    EXPECT_EQ(s.misses, misses) << "line " << line;
    EXPECT_EQ(s.frees, frees) << "line " << line;
    EXPECT_LE(s.bytes_locked, s.bytes_held) << "line " << line;
    EXPECT_EQ(s.bytes_cuda_registered, 0U) << "line " << line;  // not asked for
  };
  const std::size_t p = kPage;
  expect(0, 0, 0, 0, 0, 0, 0, __LINE__);
  PinnedPool::Lease a = pool.acquire(p);
  PinnedPool::Lease b = pool.acquire(3 * p);  // 4 pages
  expect(5 * p, 5 * p, 5 * p, 2, 0, 2, 0, __LINE__);
  EXPECT_EQ(pool.stats().bytes_locked, (a.locked() ? p : 0) + (b.locked() ? 4 * p : 0));
  b.reset();
  expect(5 * p, p, 5 * p, 2, 0, 2, 0, __LINE__);
  PinnedPool::Lease c = pool.acquire(4 * p);  // b's buffer again
  expect(5 * p, 5 * p, 5 * p, 2, 1, 2, 0, __LINE__);
  a.reset();
  c.reset();
  expect(5 * p, 0, 5 * p, 2, 1, 2, 0, __LINE__);
  const PinnedPool::Lease d = pool.acquire(2 * p);  // a new class
  expect(7 * p, 2 * p, 5 * p, 3, 1, 3, 0, __LINE__);
  EXPECT_EQ(pool.trim(), 5 * p);  // a's and b's buffers; d is leased
  expect(2 * p, 2 * p, 5 * p, 1, 1, 3, 2, __LINE__);
  EXPECT_EQ(pool.trim(), 0U);
}

TEST(PinnedPool, BuffersBeyondTheCacheLimitAreFreed) {
  PinnedPoolOptions o = small_classes();
  o.max_cached_bytes = 2 * kPage;
  PinnedPool pool(o);
  std::vector<PinnedPool::Lease> leases;
  leases.reserve(3);
  for (int i = 0; i < 3; ++i) leases.push_back(pool.acquire(kPage));
  leases.clear();  // two are cached, the third is freed
  PinnedPoolStats s = pool.stats();
  EXPECT_EQ(s.bytes_held, 2 * kPage);
  EXPECT_EQ(s.buffers_held, 2U);
  EXPECT_EQ(s.frees, 1U);
  EXPECT_EQ(s.bytes_in_use, 0U);
  EXPECT_EQ(s.peak_bytes_in_use, 3 * kPage);
  const PinnedPool::Lease big = pool.acquire(4 * kPage);
  PinnedPool::Lease moved = pool.acquire(4 * kPage);
  moved = pool.acquire(kPage);  // move-assignment gives the 4-page buffer back: over the limit
  s = pool.stats();
  EXPECT_EQ(s.bytes_held, 4 * kPage + kPage + kPage);
  EXPECT_EQ(s.bytes_in_use, 5 * kPage);
  EXPECT_EQ(s.frees, 2U);
  EXPECT_EQ(s.hits, 1U);
}

TEST(PinnedPool, LeasesMayOutliveThePool) {
  PinnedPool::Lease kept;
  PinnedPool::Lease moved_out;
  {
    PinnedPool pool(small_classes());
    kept = pool.acquire(3 * kPage);
    PinnedPool::Lease tmp = pool.acquire(kPage);
    moved_out = std::move(tmp);
    EXPECT_TRUE(tmp.empty());     // NOLINT(bugprone-use-after-move): moved-from is empty
    pool.acquire(kPage).reset();  // a cached buffer, freed with the pool
  }
  std::memset(kept.data(), 3, kept.size());
  std::memset(moved_out.data(), 4, moved_out.size());
  EXPECT_TRUE(all_equal(kept, std::byte{3}));
  EXPECT_EQ(kept.size(), 4 * kPage);
  kept.reset();  // freed, not cached: nobody can acquire from the pool any more
  EXPECT_TRUE(kept.empty());
}

TEST(PinnedPool, ConcurrentAcquireAndReleaseKeepTotalsConsistent) {
  PinnedPool pool(small_classes());
  const unsigned node = sysfs_nodes().front();
  constexpr int kThreads = 6;
  constexpr int kIters = 300;
  const std::vector<std::size_t> sizes = {1, kPage, 3 * kPage, 10 * kPage, 17 * kPage};
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto mark = static_cast<std::byte>(t + 1);
      for (int i = 0; i < kIters; ++i) {
        const Placement where = i % 3 == 0 ? Placement::node(node) : Placement::any();
        PinnedPool::Lease l =
            pool.acquire(sizes[static_cast<std::size_t>(t + i) % sizes.size()], where);
        std::memset(l.data(), static_cast<int>(mark), l.size());
        std::this_thread::yield();
        if (!all_equal(l, mark)) corrupted.fetch_add(1);  // another lease shares the buffer
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  const PinnedPoolStats s = pool.stats();
  EXPECT_EQ(s.hits + s.misses, std::uint64_t{kThreads} * kIters);
  EXPECT_EQ(s.bytes_in_use, 0U);
  EXPECT_GE(s.peak_bytes_in_use, 17 * kPage);
  EXPECT_LE(s.peak_bytes_in_use, kThreads * 17 * kPage);
  EXPECT_EQ(s.frees, 0U);
  EXPECT_EQ(s.buffers_held, s.misses);  // nothing was freed, so every buffer made is held
  EXPECT_GT(s.hits, s.misses);          // the cache works under contention
  EXPECT_EQ(pool.trim(), s.bytes_held);
  const PinnedPoolStats after = pool.stats();
  EXPECT_EQ(after.bytes_held, 0U);
  EXPECT_EQ(after.bytes_locked, 0U);
  EXPECT_EQ(after.buffers_held, 0U);
  EXPECT_EQ(after.frees, s.misses);
}

TEST(PinnedPool, LockedBytesMatchTheKernelsAccounting) {
  STRAIT_SKIP_IF_MLOCK_INTERCEPTED();
  const long before = testing::locked_kib();
  ASSERT_GE(before, 0) << "no VmLck in /proc/self/status";
  PinnedPool pool(small_classes());
  {
    const PinnedPool::Lease l = pool.acquire(9 * kPage);  // 16 pages
    const std::size_t locked = l.locked() ? 16 * kPage : 0;
    EXPECT_EQ(pool.stats().bytes_locked, locked);
    EXPECT_EQ(testing::locked_kib(), before + static_cast<long>(locked / 1024));
  }
  // Still cached, so still locked when it was.
  EXPECT_EQ(testing::locked_kib(), before + static_cast<long>(pool.stats().bytes_locked / 1024));
  pool.trim();
  EXPECT_EQ(testing::locked_kib(), before) << "trim must unlock and unmap";
  EXPECT_EQ(pool.stats().bytes_locked, 0U);
}

TEST(PinnedPool, UnlockedBuffersWhenRlimitMemlockRefuses) {
  STRAIT_SKIP_IF_MLOCK_INTERCEPTED();
  // In a child: drop CAP_IPC_LOCK and set RLIMIT_MEMLOCK to 0, so mlock must fail.
  const int code = testing::run_in_child([] {
    if (!testing::forbid_mlock()) return 77;

    const testing::CapturedLog log;
    PinnedPool pool(small_classes());
    const PinnedPool::Lease a = pool.acquire(kPage);
    PinnedPool::Lease b = pool.acquire(3 * kPage);
    if (a.locked() || b.locked()) return 1;
    std::memset(b.data(), 1, b.size());  // usable all the same
    b.reset();
    const PinnedPoolStats s = pool.stats();
    if (s.bytes_held != 5 * kPage || s.bytes_in_use != kPage || s.bytes_locked != 0 ||
        s.misses != 2) {
      return 2;
    }
    const std::string text = log.text();
    if (log.count("could not lock") != 1) return 3;
    for (const char* hint :
         {"RLIMIT_MEMLOCK is 0 KiB", "ulimit -l", "limits.conf", "CAP_IPC_LOCK"}) {
      if (!contains(text, hint)) return 4;
    }
    return 0;
  });
  if (code == 77) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK here";
  EXPECT_EQ(code, 0) << "1: locked despite the limit, 2: wrong statistics, 3: not exactly one "
                        "warning, 4: the warning lacks the limit or how to raise it";
}

TEST(PinnedPool, NodePlacementBindsThePagesToThatNode) {
  STRAIT_SKIP_IF_MBIND_REFUSED();
  PinnedPool pool(small_classes());
  const std::vector<unsigned> nodes = sysfs_nodes();
  for (const unsigned node : nodes) {
    const PinnedPool::Lease l = pool.acquire(5 * kPage, Placement::node(node));
    ASSERT_EQ(l.numa_node(), std::optional<unsigned>(node));
    const Location loc = locate(l);
    EXPECT_EQ(loc.policy, HWLOC_MEMBIND_BIND) << "node " << node;
    EXPECT_EQ(loc.bound, std::vector<unsigned>{node});
    EXPECT_EQ(loc.nodes, std::vector<unsigned>{node});
  }
  // An unbound buffer keeps the default policy.
  const PinnedPool::Lease any = pool.acquire(kPage);
  EXPECT_FALSE(any.numa_node().has_value());
  EXPECT_NE(locate(any).policy, HWLOC_MEMBIND_BIND);
  // A node-bound buffer is cached for its node; Placement::any() may take it.
  PinnedPool one(small_classes());
  std::byte* bound = one.acquire(kPage, Placement::node(nodes.front())).data();
  const PinnedPool::Lease again = one.acquire(kPage);
  EXPECT_EQ(again.data(), bound);
  EXPECT_EQ(again.numa_node(), std::optional<unsigned>(nodes.front()));
}

TEST(PinnedPool, ANodeThatDoesNotExistIsAnInvalidArgument) {
  PinnedPool pool(small_classes());
  for (const unsigned bad : {sysfs_nodes().back() + 1, 4096U}) {
    try {
      static_cast<void>(pool.acquire(kPage, Placement::node(bad)));
      ADD_FAILURE() << "node " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "NUMA node " + std::to_string(bad) + " does not exist")) << what;
      EXPECT_TRUE(contains(what, "Placement::any()")) << what;
    }
  }
  EXPECT_EQ(pool.stats().misses, 0U);
}

TEST(PinnedPool, CallingThreadPlacementUsesTheNodeOfTheThreadsCpu) {
  STRAIT_SKIP_IF_MBIND_REFUSED();
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  PinnedPool pool(small_classes());
  int checked = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && checked < 4; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    ++checked;
    std::optional<unsigned> got;
    std::vector<unsigned> where;
    bool pinned = false;
    std::thread([&] {  // a thread of its own, so the test's own affinity stays as it is
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pinned = ::sched_setaffinity(0, sizeof(one), &one) == 0;
      const PinnedPool::Lease l = pool.acquire(2 * kPage, Placement::calling_thread());
      got = l.numa_node();
      if (got) where = locate(l).nodes;
    })
        .join();
    ASSERT_TRUE(pinned) << "cpu " << cpu;
    EXPECT_EQ(got, std::optional<unsigned>(sysfs_cpu_node(cpu))) << "cpu " << cpu;
    EXPECT_EQ(where, std::vector<unsigned>{sysfs_cpu_node(cpu)}) << "cpu " << cpu;
  }
  EXPECT_GT(checked, 0);
}

TEST(PinnedPool, PciPlacementUsesTheDevicesLocalNode) {
  STRAIT_SKIP_IF_MBIND_REFUSED();
  // A PCI device (not a bridge, which hwloc lists apart) as sysfs lists it, and its node there
  // (-1: no locality, hwloc then gives the machine's first node).
  std::string bus;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices", ec)) {
    std::string cls;
    std::ifstream(e.path() / "class") >> cls;
    if (cls.rfind("0x0604", 0) == 0 || cls.rfind("0x0607", 0) == 0) continue;
    bus = e.path().filename().string();
    break;
  }
  if (bus.empty()) GTEST_SKIP() << "no PCI devices visible in /sys/bus/pci/devices";
  int sys_node = -1;
  std::ifstream(fs::path("/sys/bus/pci/devices") / bus / "numa_node") >> sys_node;
  const unsigned expect = sys_node >= 0 ? static_cast<unsigned>(sys_node) : sysfs_nodes().front();

  PinnedPool pool(small_classes());
  const PinnedPool::Lease l = pool.acquire(kPage, Placement::pci(bus));
  ASSERT_EQ(l.numa_node(), std::optional<unsigned>(expect)) << bus;
  EXPECT_EQ(locate(l).nodes, std::vector<unsigned>{expect});
  // nvidia-smi's spelling: an 8-digit domain, upper-case hex.
  std::string smi = "0000" + bus;
  std::transform(smi.begin(), smi.end(), smi.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  EXPECT_EQ(pool.acquire(kPage, Placement::pci(smi)).numa_node(), std::optional<unsigned>(expect));

  for (const char* bad : {"ffff:ff:1f.7", "not-a-bus-id"}) {
    try {
      static_cast<void>(pool.acquire(kPage, Placement::pci(bad)));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_TRUE(contains(e.what(), std::string("no PCI device with bus id '") + bad)) << e.what();
    }
  }
}

TEST(PinnedPool, NoCudaRegistrationWithoutTheOptionOrADevice) {
  PinnedPool plain(small_classes());
  EXPECT_FALSE(plain.acquire(kPage).cuda_registered());
  EXPECT_EQ(plain.stats().bytes_cuda_registered, 0U);

  std::string why;
  if (kernels::cuda_device_available(&why)) {
    GTEST_SKIP() << "a CUDA device is present: RegistersWithCudaWhenADeviceIsPresent covers it";
  }
  PinnedPoolOptions o = small_classes();
  o.register_with_cuda = true;
  PinnedPool pool(o);
  const PinnedPool::Lease l = pool.acquire(kPage);
  EXPECT_FALSE(l.cuda_registered()) << why;
  EXPECT_EQ(pool.stats().bytes_cuda_registered, 0U);
  std::memset(l.data(), 1, l.size());
}

TEST(PinnedPool, RegistersWithCudaWhenADeviceIsPresent) {
  STRAIT_SKIP_WITHOUT_CUDA_DEVICE();
  PinnedPoolOptions o = small_classes();
  o.register_with_cuda = true;
  PinnedPool pool(o);
  {
    PinnedPool::Lease l = pool.acquire(3 * kPage);
    ASSERT_TRUE(l.cuda_registered());
    EXPECT_EQ(pool.stats().bytes_cuda_registered, 4 * kPage);
#if STRAIT_HAVE_CUDA
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, l.data() + kPage), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // registered (pinned) host memory
    // A round trip through the device from and into the registered buffer.
    std::vector<std::byte> pattern(l.size());
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::byte>(i * 7);
    std::memcpy(l.data(), pattern.data(), pattern.size());
    kernels::DeviceBuffer dev(l.size());
    ASSERT_EQ(cudaMemcpy(dev.data(), l.data(), l.size(), cudaMemcpyHostToDevice), cudaSuccess);
    std::memset(l.data(), 0, l.size());
    ASSERT_EQ(cudaMemcpy(l.data(), dev.data(), l.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(l.data(), pattern.data(), pattern.size()), 0);

    // The GPU's own PCI bus id places buffers on its node (sysfs's numa_node; -1: first node).
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    std::array<char, 32> bus{};
    ASSERT_EQ(cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device), cudaSuccess);
    std::string sys_bus(bus.data());
    std::transform(sys_bus.begin(), sys_bus.end(), sys_bus.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    int sys_node = -1;
    std::ifstream(fs::path("/sys/bus/pci/devices") / sys_bus / "numa_node") >> sys_node;
    const unsigned expect = sys_node >= 0 ? static_cast<unsigned>(sys_node) : sysfs_nodes().front();
    if (!mbind_refused()) {
      PinnedPool near_pool(o);
      const PinnedPool::Lease near = near_pool.acquire(kPage, Placement::pci(bus.data()));
      EXPECT_EQ(near.numa_node(), std::optional<unsigned>(expect)) << bus.data();
      EXPECT_TRUE(near.cuda_registered());
    }
#endif
  }
  EXPECT_EQ(pool.acquire(4 * kPage).cuda_registered(), true);  // cached registered buffer
  EXPECT_EQ(pool.trim(), 4 * kPage);
  EXPECT_EQ(pool.stats().bytes_cuda_registered, 0U);
}

}  // namespace
}  // namespace strait::offload
