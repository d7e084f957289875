#include "tools/wan_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/params.h"
#include "tools/launcher.h"
#include "tools/wan/testbed.h"

namespace strait::tools {
namespace {

constexpr const char* kFooter = R"(
Sites are network namespaces on this machine joined by a link shaped with tc tbf (each site's
link, each direction, at --rate). Latency is not emulated: netem is not available on these
kernels. Needs root.

  strait wan up --sites 2 --rate 100mbit
  strait wan run --ranks-per-site 1 -- build/strait-bench allreduce -b 64M -e 64M
  strait wan status
  strait wan down

`wan run` uses the testbed of --prefix when it is up, and otherwise brings one up for the job
and removes it afterwards (also after Ctrl-C). Ranks of site i run in namespace PREFIX-site<i>
with MASTER_ADDR = site 0's address, GROUP_RANK = i, UCX_NET_DEVICES=wan0 and STRAIT_SITES
listing each rank's site (unless set, or STRAIT_TOPOLOGY_FILE is), so that allreduces run
hierarchically. --flow-rate R limits each TCP flow (htb classes under each shaper): with
STRAIT_STREAMS=N, a job's N connections per peer then share the link.

`wan run --elastic` hosts the job's store in the launcher (as `strait run --elastic`), listening
in site 0's namespace, and lets the other ranks go on when one fails. A process joins such a job
from any site with `wan exec`, which runs one command in a site of a testbed that is up, with the
environment `wan run` gives (MASTER_ADDR = site 0's address, MASTER_PORT, UCX_NET_DEVICES=wan0),
without a rank:

  strait wan up --prefix p --rate 100mbit
  strait wan run --prefix p --elastic --master-port 29600 -- strait train --elastic ... &
  strait wan exec --prefix p --site 1 --master-port 29600 -- strait train --elastic ... --join)";

struct RunOptions {
  WanOptions wan;
  int ranks_per_site = 1;
  int master_port = 29500;
  bool elastic = false;
  std::vector<std::string> command;
};

struct ExecOptions {
  std::string prefix = WanOptions{}.prefix;
  int site = 0;
  int master_port = RunOptions{}.master_port;
  std::vector<std::string> command;
};

// Replaces this process with `ip netns exec SITE COMMAND...` (returns only by throwing).
[[noreturn]] void exec_in_site(const ExecOptions& e) {
  const std::vector<Site> sites = wan_sites(e.prefix);
  if (sites.empty()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan exec: no testbed named {0} is up (bring one up with `strait wan "
                            "up --prefix {0}`)",
                            e.prefix));
  }
  if (e.site < 0 || static_cast<std::size_t>(e.site) >= sites.size()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("wan exec: --site {}: testbed {} has sites 0 to {}", e.site, e.prefix,
                            sites.size() - 1));
  }
  // What `wan run` gives its ranks, less the rank variables and the sites list (a process that
  // joins an elastic job is given its rank by the re-formation, in a world of one site).
  ::setenv("MASTER_ADDR", sites.front().address.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(e.master_port).c_str(), 1);
  ::setenv("UCX_NET_DEVICES", "wan0", 0);
  std::vector<std::string> args = {"ip", "netns", "exec",
                                   sites[static_cast<std::size_t>(e.site)].netns};
  args.insert(args.end(), e.command.begin(), e.command.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execvp(argv[0], argv.data());
  throw Error(ErrorCode::Io,
              fmt::format("wan exec: cannot execute ip (iproute2): {}", std::strerror(errno)));
}

int run_job(const RunOptions& r) {
  std::optional<std::vector<Site>> made;
  std::vector<Site> sites = wan_sites(r.wan.prefix);
  if (sites.empty()) {
    made = wan_up(r.wan);
    sites = *made;
    fmt::print(stderr, "strait wan: testbed {} up for this job: {} sites at {}\n", r.wan.prefix,
               sites.size(), r.wan.rate);
  }
  // Removed whatever happens to the job (the launcher forwards Ctrl-C to the ranks and returns).
  struct Down {
    const std::optional<std::vector<Site>>& made;
    const std::string& prefix;
    Down(const std::optional<std::vector<Site>>& m, const std::string& p) : made(m), prefix(p) {}
    Down(const Down&) = delete;
    Down& operator=(const Down&) = delete;
    ~Down() {
      if (!made) return;
      try {
        wan_down(prefix);
      } catch (const Error& e) {
        fmt::print(stderr, "strait wan: {}\n", e.what());
      }
    }
  } const down{made, r.wan.prefix};
  LaunchOptions o;
  o.nodes = static_cast<int>(sites.size());
  o.nproc = o.nodes * r.ranks_per_site;
  o.master_addr = sites.front().address;
  o.master_port = static_cast<std::uint16_t>(r.master_port);
  o.command = r.command;
  o.elastic = r.elastic;
  std::string sites_list;  // "0,0,1,1": rank r is in site r / ranks_per_site
  for (std::size_t i = 0; i < sites.size(); ++i) {
    for (int k = 0; k < r.ranks_per_site; ++k) {
      sites_list += fmt::format("{}{}", sites_list.empty() ? "" : ",", i);
    }
  }
  for (const auto& s : sites) {
    o.node_netns.push_back(s.netns);
    std::vector<std::string> env;
    if (std::getenv("UCX_NET_DEVICES") == nullptr) env.emplace_back("UCX_NET_DEVICES=wan0");
    // The job's sites are the testbed's (comm/sites.h), unless the user says otherwise.
    if (!params::is_set("STRAIT_SITES") && !params::is_set("STRAIT_TOPOLOGY_FILE")) {
      env.push_back("STRAIT_SITES=" + sites_list);
    }
    o.node_env.push_back(std::move(env));
  }
  return launch(o);
}

void add_wan_options(CLI::App* cmd, WanOptions& o, bool shape) {
  cmd->add_option("--prefix", o.prefix, "Names of the testbed's namespaces start with this")
      ->capture_default_str();
  if (!shape) return;
  cmd->add_option("--sites", o.sites, "Number of sites")
      ->check(CLI::Range(2, 200))
      ->capture_default_str();
  cmd->add_option("--rate", o.rate,
                  "Each site's link rate, each direction (tc units: kbit, "
                  "mbit, gbit)")
      ->capture_default_str();
  cmd->add_option("--subnet", o.subnet, "First three octets of the sites' /24")
      ->capture_default_str();
  cmd->add_option("--flow-rate", o.flow_rate,
                  "Also limit each flow (TCP connection) to this rate (htb classes per flow under "
                  "the shaper), as per-flow policing does; default: no per-flow limit");
}

}  // namespace

void add_wan_command(CLI::App& app, int& exit_code) {
  CLI::App* wan = app.add_subcommand("wan",
                                     "A WAN testbed on this machine: sites as network "
                                     "namespaces joined by rate-limited links");
  wan->footer(kFooter);
  wan->require_subcommand(1);

  auto up_opts = std::make_shared<WanOptions>();
  CLI::App* up = wan->add_subcommand("up", "Create the testbed");
  add_wan_options(up, *up_opts, true);
  up->callback([up_opts] {
    const auto sites = wan_up(*up_opts);
    for (const auto& s : sites) {
      fmt::print("site {}: namespace {}, address {}\n", s.index, s.netns, s.address);
    }
    fmt::print("each site's link: {} each way (tc tbf){}; no latency emulation\n", up_opts->rate,
               up_opts->flow_rate.empty()
                   ? std::string()
                   : fmt::format(", each TCP flow at most {} (htb)", up_opts->flow_rate));
  });

  auto down_opts = std::make_shared<WanOptions>();
  CLI::App* down = wan->add_subcommand("down", "Remove the testbed");
  add_wan_options(down, *down_opts, false);
  down->callback([down_opts] {
    const int n = wan_down(down_opts->prefix);
    fmt::print("{}\n", n == 0 ? fmt::format("no testbed named {} was up", down_opts->prefix)
                              : fmt::format("removed {} namespaces", n));
  });

  auto status_opts = std::make_shared<WanOptions>();
  CLI::App* status = wan->add_subcommand("status", "Show the sites and the shapers' counters");
  add_wan_options(status, *status_opts, false);
  status->callback([status_opts] { fmt::print("{}", wan_status(status_opts->prefix)); });

  auto run_opts = std::make_shared<RunOptions>();
  CLI::App* run = wan->add_subcommand("run", "Run a job with ranks in every site");
  add_wan_options(run, run_opts->wan, true);
  run->add_option("--ranks-per-site", run_opts->ranks_per_site, "Ranks started in each site")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  run->add_option("--master-port", run_opts->master_port, "Port of rank 0's store (in site 0)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  run->add_flag("--elastic", run_opts->elastic,
                "Host the job's store in the launcher, in site 0 (TORCHELASTIC_USE_AGENT_STORE="
                "True), and let the other ranks go on when one fails (for strait train --elastic; "
                "processes join with `strait wan exec`)");
  run->add_option("command", run_opts->command, "The program to run, and its arguments")
      ->required();
  run->callback([run_opts, &exit_code] { exit_code = run_job(*run_opts); });

  auto exec_opts = std::make_shared<ExecOptions>();
  CLI::App* exec = wan->add_subcommand(
      "exec",
      "Run one command in a site of a testbed that is up, with the environment of `wan run` "
      "but no rank (e.g. a process joining an elastic job)");
  exec->add_option("--prefix", exec_opts->prefix,
                   "Names of the testbed's namespaces start with this")
      ->capture_default_str();
  exec->add_option("--site", exec_opts->site, "The site to run in (0 is the first)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  exec->add_option("--master-port", exec_opts->master_port,
                   "MASTER_PORT for the command (the job's store, in site 0)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  exec->add_option("command", exec_opts->command, "The program to run, and its arguments")
      ->required();
  exec->callback([exec_opts] { exec_in_site(*exec_opts); });
}

}  // namespace strait::tools
