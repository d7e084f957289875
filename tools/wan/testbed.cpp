#include "tools/wan/testbed.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/fd.h"
#include "tools/wan/subprocess.h"

namespace strait::tools {
namespace {

// Holds SIGINT, SIGTERM and SIGHUP back while the machine's namespaces are half made or half
// removed; restoring the mask delivers any that arrived.
class HeldSignals {
 public:
  HeldSignals() {
    sigemptyset(&held_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held_, s);
    pthread_sigmask(SIG_BLOCK, &held_, &old_);
  }
  HeldSignals(const HeldSignals&) = delete;
  HeldSignals& operator=(const HeldSignals&) = delete;
  ~HeldSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  [[nodiscard]] bool arrived() const {
    sigset_t pending;
    sigpending(&pending);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) {
      if (sigismember(&pending, s) == 1) return true;
    }
    return false;
  }

 private:
  sigset_t held_{};
  sigset_t old_{};
};

std::string hub(const std::string& prefix) {
  return prefix + "-wan";
}
std::string site_ns(const std::string& prefix, int i) {
  return fmt::format("{}-site{}", prefix, i);
}

void check_prefix(const std::string& prefix) {
  static const std::regex valid("[a-z0-9][a-z0-9-]{0,19}");
  if (!std::regex_match(prefix, valid)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: prefix {:?} must be 1-20 characters of a-z, 0-9 and '-', "
                            "starting with a letter or digit",
                            prefix));
  }
}

void check_root() {
  if (::geteuid() != 0) {
    throw Error(ErrorCode::Unavailable,
                "wan: the testbed needs root (it creates network namespaces and tc qdiscs): run "
                "it with sudo or as root");
  }
}

// Names in `ip netns list` ("name" or "name (id: 3)").
std::vector<std::string> namespaces() {
  std::vector<std::string> out;
  std::istringstream in(run_checked({"ip", "netns", "list"}));
  std::string line;
  while (std::getline(in, line)) {
    const auto end = line.find(' ');
    if (!line.empty()) out.push_back(line.substr(0, end));
  }
  return out;
}

std::vector<std::string> testbed_namespaces(const std::string& prefix) {
  const std::regex mine(std::regex_replace(prefix, std::regex("-"), "\\-") + "-(wan|site[0-9]+)");
  std::vector<std::string> out;
  for (auto& n : namespaces()) {
    if (std::regex_match(n, mine)) out.push_back(n);
  }
  return out;
}

std::string tbf_burst(std::uint64_t bits_per_s) {
  // tbf needs a bucket of at least rate/HZ; 10 ms of traffic covers any HZ, and a few full-size
  // frames keep slow links from stalling on GSO segments.
  const std::uint64_t bytes = std::max<std::uint64_t>(bits_per_s / 8 / 100, 16 * 1514);
  return fmt::format("{}b", bytes);
}

// Per-flow limits without fq (these kernels have no fq, fq_codel, sfq or flow classifier; htb
// and u32 are there): htb with the link's rate at the top, and under it kBuckets x kBuckets leaf
// classes of `flow_rate` each, one per (source port, destination port) bucket pair: u32 hashes
// the low 4 bits of the source port (IP offset 20: these headers have no options) into a table
// that hashes the low 4 bits of the destination port into a class. Both ports, because UCX
// carries both directions of a peer pair on connections one side opened: one way the flows differ
// in source port, the other way (all from the peer's listening port) in destination port. Flows
// whose ports agree in those bits share a class (about 1 in 256 per pair). Anything else (ARP,
// non-TCP) goes to a leaf at the link rate. One `tc -batch` per device: ~800 commands.
constexpr int kBuckets = 16;

void shape_flows(const std::string& ns, const std::string& dev, const std::string& rate,
                 const std::string& flow_rate) {
  std::string batch;
  const auto add = [&](const std::string& line) { batch += line + "\n"; };
  // r2q 1000: class quanta of rate / 1000 bytes stay within what htb accepts at 100mbit.
  add(fmt::format("qdisc add dev {} root handle 1: htb default 2 r2q 1000", dev));
  add(fmt::format("class add dev {} parent 1: classid 1:1 htb rate {} ceil {}", dev, rate, rate));
  add(fmt::format("class add dev {} parent 1:1 classid 1:2 htb rate {} ceil {}", dev, rate, rate));
  const std::string tcp = "protocol ip u32";
  const std::string is_tcp = "match ip protocol 6 0xff";
  for (int i = 0; i < kBuckets; ++i) {
    add(fmt::format("filter add dev {} parent 1: prio 1 handle {:x}: {} divisor {}", dev, 0x10 + i,
                    tcp, kBuckets));
  }
  add(fmt::format("filter add dev {} parent 1: prio 1 handle 2: {} divisor {}", dev, tcp,
                  kBuckets));
  for (int i = 0; i < kBuckets; ++i) {
    for (int j = 0; j < kBuckets; ++j) {
      const int cls = 0x100 + i * kBuckets + j;
      add(fmt::format("class add dev {} parent 1:1 classid 1:{:x} htb rate {} ceil {}", dev, cls,
                      flow_rate, flow_rate));
      add(fmt::format("filter add dev {} parent 1: prio 1 {} ht {:x}:{:x}: {} flowid 1:{:x}", dev,
                      tcp, 0x10 + i, j, is_tcp, cls));
    }
    add(
        fmt::format("filter add dev {} parent 1: prio 1 {} ht 2:{:x}: {} hashkey mask 0x{:08x} at "
                    "20 link {:x}:",
                    dev, tcp, i, is_tcp, kBuckets - 1, 0x10 + i));
  }
  add(
      fmt::format("filter add dev {} parent 1: prio 1 {} ht 800:: {} hashkey mask 0x{:08x} at 20 "
                  "link 2:",
                  dev, tcp, is_tcp, (kBuckets - 1) << 16));
  char path[] = "/tmp/strait-wan-tc-XXXXXX";
  const Fd fd(::mkstemp(path));
  if (!fd) throw Error(ErrorCode::Io, fmt::format("wan: mkstemp: {}", std::strerror(errno)));
  struct Unlink {
    explicit Unlink(const char* p) : path(p) {}
    Unlink(const Unlink&) = delete;
    Unlink& operator=(const Unlink&) = delete;
    ~Unlink() { ::unlink(path); }
    const char* path;
  };
  const Unlink unlink_later(path);
  if (::write(fd.get(), batch.data(), batch.size()) != static_cast<ssize_t>(batch.size())) {
    throw Error(ErrorCode::Io, fmt::format("wan: writing {}: {}", path, std::strerror(errno)));
  }
  run_checked({"tc", "-n", ns, "-batch", path});
}

}  // namespace

std::uint64_t parse_rate_bits(const std::string& rate) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit))");
  std::smatch m;
  if (!std::regex_match(rate, m, form)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: rate {:?} is not a number followed by bit, kbit, mbit or gbit "
                            "(e.g. 100mbit)",
                            rate));
  }
  const double value = std::stod(m[1].str());
  const std::string unit = m[3].str();
  const double scale = unit == "gbit" ? 1e9 : unit == "mbit" ? 1e6 : unit == "kbit" ? 1e3 : 1.0;
  const double bits = value * scale;
  if (bits < 8000 || bits > 1e12) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: rate {} is outside 8kbit .. 1000gbit", rate));
  }
  return static_cast<std::uint64_t>(std::llround(bits));
}

std::vector<Site> wan_up(const WanOptions& o) {
  check_prefix(o.prefix);
  if (o.sites < 2 || o.sites > 200) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: {} sites: a testbed has 2 to 200", o.sites));
  }
  const std::uint64_t bits = parse_rate_bits(o.rate);
  if (!o.flow_rate.empty()) (void)parse_rate_bits(o.flow_rate);
  static const std::regex subnet_form(
      R"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){2})");
  if (!std::regex_match(o.subnet, subnet_form)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: subnet {:?} is not three octets like 10.77.0", o.subnet));
  }
  check_root();
  if (!testbed_namespaces(o.prefix).empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan: a testbed named {0} is already up (`strait wan status --prefix "
                            "{0}`): remove it with `strait wan down --prefix {0}`, or choose "
                            "another --prefix",
                            o.prefix));
  }
  const HeldSignals held;
  std::vector<Site> sites;
  try {
    const std::string wan = hub(o.prefix);
    const std::string burst = tbf_burst(bits);
    const auto shape = [&](const std::string& ns, const std::string& dev) {
      if (o.flow_rate.empty()) {
        run_checked({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", o.rate,
                     "burst", burst, "latency", "100ms"});
        return;
      }
      shape_flows(ns, dev, o.rate, o.flow_rate);
    };
    const auto step = [&] {
      if (held.arrived()) throw Error(ErrorCode::Aborted, "wan up: interrupted");
    };
    run_checked({"ip", "netns", "add", wan});
    run_checked({"ip", "-n", wan, "link", "set", "lo", "up"});
    run_checked({"ip", "-n", wan, "link", "add", "name", "br0", "type", "bridge"});
    run_checked({"ip", "-n", wan, "link", "set", "br0", "up"});
    for (int i = 0; i < o.sites; ++i) {
      step();
      Site s{i, site_ns(o.prefix, i), fmt::format("{}.{}", o.subnet, i + 1)};
      const std::string far = fmt::format("site{}", i);
      run_checked({"ip", "netns", "add", s.netns});
      run_checked({"ip", "-n", s.netns, "link", "set", "lo", "up"});
      run_checked({"ip", "-n", s.netns, "link", "add", "name", "wan0", "type", "veth", "peer",
                   "name", far, "netns", wan});
      run_checked({"ip", "-n", s.netns, "addr", "add", s.address + "/24", "dev", "wan0"});
      run_checked({"ip", "-n", s.netns, "link", "set", "wan0", "up"});
      run_checked({"ip", "-n", wan, "link", "set", far, "master", "br0"});
      run_checked({"ip", "-n", wan, "link", "set", far, "up"});
      shape(s.netns, "wan0");
      shape(wan, far);
      sites.push_back(std::move(s));
    }
    step();
  } catch (...) {
    wan_down(o.prefix);
    throw;
  }
  return sites;
}

int wan_down(const std::string& prefix) {
  check_prefix(prefix);
  check_root();
  const HeldSignals held;
  int removed = 0;
  std::string failures;
  for (const auto& ns : testbed_namespaces(prefix)) {
    const CommandResult r = run_capture({"ip", "netns", "del", ns});
    if (r.ok()) {
      ++removed;
    } else {
      failures += fmt::format("\n  ip netns del {}: {}", ns, r.output);
    }
  }
  if (!failures.empty()) {
    throw Error(ErrorCode::Io, fmt::format("wan down: could not remove{}", failures));
  }
  return removed;
}

std::vector<Site> wan_sites(const std::string& prefix) {
  check_prefix(prefix);
  std::vector<Site> sites;
  const auto names = testbed_namespaces(prefix);
  for (int i = 0;; ++i) {
    const std::string ns = site_ns(prefix, i);
    if (std::find(names.begin(), names.end(), ns) == names.end()) break;
    const std::string out =
        run_checked({"ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "wan0"});
    static const std::regex inet(R"(inet ([0-9.]+)/)");
    std::smatch m;
    if (!std::regex_search(out, m, inet)) {
      throw Error(ErrorCode::Io, fmt::format("wan: site {} ({}) has no IPv4 address on wan0: "
                                             "remove the testbed and bring it up again",
                                             i, ns));
    }
    sites.push_back(Site{i, ns, m[1].str()});
  }
  return sites;
}

std::uint64_t wan_bytes_sent(const std::string& prefix, int index) {
  const std::string out =
      run_checked({"tc", "-n", site_ns(prefix, index), "-s", "qdisc", "show", "dev", "wan0"});
  static const std::regex sent(R"(Sent ([0-9]+) bytes)");
  std::smatch m;
  if (!std::regex_search(out, m, sent)) {
    throw Error(ErrorCode::Io,
                fmt::format("wan: no counters in `tc -s qdisc` of site {}: {}", index, out));
  }
  return std::stoull(m[1].str());
}

std::string wan_status(const std::string& prefix) {
  const auto sites = wan_sites(prefix);
  if (sites.empty()) return fmt::format("no testbed named {} is up\n", prefix);
  std::string out =
      fmt::format("testbed {}: {} sites, hub namespace {}\n", prefix, sites.size(), hub(prefix));
  for (const auto& s : sites) {
    out += fmt::format("site {}: namespace {}, wan0 {}\n", s.index, s.netns, s.address);
    const auto indent = [](const std::string& text) {
      std::string r;
      std::istringstream in(text);
      std::string line;
      while (std::getline(in, line)) r += "    " + line + "\n";
      return r;
    };
    out += "  leaving the site (wan0):\n" +
           indent(run_checked({"tc", "-n", s.netns, "-s", "qdisc", "show", "dev", "wan0"}));
    out += fmt::format("  entering the site (site{} in {}):\n", s.index, hub(prefix)) +
           indent(run_checked({"tc", "-n", hub(prefix), "-s", "qdisc", "show", "dev",
                               fmt::format("site{}", s.index)}));
  }
  out += "latency is not emulated (no netem on this kernel): see tools/wan/testbed.h\n";
  return out;
}

}  // namespace strait::tools
