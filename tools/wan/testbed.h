// The WAN testbed behind `strait wan`: sites joined by a rate-limited wide-area link, built from
// Linux network namespaces on one machine, so that collectives meant for slow links between
// clusters can be run and measured on a laptop or a CI box.
//
// Layout for N sites, prefix P (namespaces as `ip netns` names them, under /run/netns):
//   P-site<i>  one per site: `lo` and `wan0` with address <subnet>.<i+1>/24. Ranks of site i run
//              here; ranks of one site share memory, so they talk over shared memory, not wan0.
//   P-wan      the wide area: a bridge `br0` joining the far ends (`site<i>`) of the sites' veth
//              pairs.
// Each site's link is shaped in both directions with tc's token bucket filter (tbf): egress of
// wan0 (traffic leaving the site) and egress of site<i> (traffic entering it), each at `rate`.
// Traffic between two sites therefore crosses two shapers of the same rate.
// With a flow rate (--flow-rate), each shaper is htb instead: the link at `rate` with a class of
// flow_rate per TCP flow (a u32 hash of both ports into 256 classes; testbed.cpp says how, and
// why not fq, which these kernels lack), as providers police single flows: one connection then
// gets flow_rate, several together up to `rate`. `tc -s class show` shows each class's bytes.
// Latency is NOT emulated: netem (the qdisc that adds delay) is not available on these kernels.
// Runs here see the bandwidth of a WAN link but the round-trip time of a veth pair (~tens of
// microseconds), so latency-bound settings (small messages) look better than on a real WAN.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2 (ip, tc).
// Thread-safety: none (it runs ip and tc, which change the machine's network namespaces).
// Errors: Unavailable when not root; InvalidArgument for bad options (a rate tc would not parse,
// a name that is not a valid namespace name, an existing testbed of that prefix); Io when ip or
// tc fails (its output is in the message). A failed or interrupted up() removes what it made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strait::tools {

struct WanOptions {
  std::string prefix = "strait";   // namespace names start with it: [a-z0-9-], at most 20 chars
  int sites = 2;                   // 2 .. 200
  std::string rate = "100mbit";    // per site and direction, in tc's units: bit, kbit, mbit, gbit
  std::string subnet = "10.77.0";  // the first three octets of the sites' /24
  std::string flow_rate{};         // empty: none; else each flow's limit (fq maxrate), tc units
};

struct Site {
  int index = 0;
  std::string netns;    // P-site<i>
  std::string address;  // of wan0 in the site
};

// Bits per second of a tc rate ("100mbit", "1gbit", "1.5mbit", "64kbit", "1000bit"). Throws
// InvalidArgument for anything else (tc's byte units, "mbps", are refused: they read as bits).
std::uint64_t parse_rate_bits(const std::string& rate);

// Creates the testbed. Throws (after removing whatever it had made) on failure or when SIGINT,
// SIGTERM or SIGHUP arrives meanwhile (they are held back while it runs, then re-raised).
std::vector<Site> wan_up(const WanOptions& options);
// Removes every namespace named P-site<i> and P-wan (the veth pairs and qdiscs go with them).
// Returns how many namespaces it removed; 0 when there was no testbed.
int wan_down(const std::string& prefix);
// The sites of the testbed P, in order; empty when there is none.
std::vector<Site> wan_sites(const std::string& prefix);
// A human-readable report: sites, addresses, and each shaper's rate and counters (bytes sent,
// drops, overlimits) as `tc -s qdisc` gives them.
std::string wan_status(const std::string& prefix);
// Bytes the shaper on wan0 of site `index` has sent (traffic that left the site).
std::uint64_t wan_bytes_sent(const std::string& prefix, int index);

}  // namespace strait::tools
