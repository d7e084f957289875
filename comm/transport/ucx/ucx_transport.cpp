#include "comm/transport/ucx/ucx_transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>

#include "comm/transport/peer_memory.h"
#include "comm/transport/ucx/ucx_log.h"
#include "core/error.h"
#include "core/params.h"
#include "kernels/reduce.h"

namespace strait::comm {

namespace {

Error ucx_error(const char* what, ucs_status_t status) {
  const std::string said = ucx_log::last_message();
  return Error(ErrorCode::Unavailable,
               fmt::format("UCX {} failed: {}{}. Check UCX_* environment variables and `ucx_info "
                           "-d`",
                           what, ucs_status_string(status),
                           said.empty() ? "" : fmt::format(" (UCX said: {})", said)));
}

bool force_peer_error_mode() {
  return params::get_enum("STRAIT_UCX_ERR_MODE").value_or("auto") == "peer";
}

// The record a rank publishes: host identity, pid, the address of its probe word (single copy)
// and its worker's address.
Bytes encode_record(const std::string& host, pid_t pid, std::uint64_t probe, const void* addr,
                    std::size_t len) {
  Bytes out;
  const auto append = [&out](const void* data, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(data);
    out.insert(out.end(), b, b + n);
  };
  const auto host_len = static_cast<std::uint32_t>(host.size());
  append(&host_len, sizeof host_len);
  append(host.data(), host.size());
  append(&pid, sizeof pid);
  append(&probe, sizeof probe);
  append(addr, len);
  return out;
}

struct Record {
  std::string host;
  pid_t pid = 0;
  std::uint64_t probe = 0;
  Bytes address;
};

Record decode_record(const Bytes& in, int peer) {
  const auto bad = [&] {
    return Error(ErrorCode::Mismatch,
                 fmt::format("the UCX address record of rank {} is malformed ({} bytes): are all "
                             "ranks running the same strait build?",
                             peer, in.size()));
  };
  Record r;
  std::uint32_t host_len = 0;
  if (in.size() < sizeof host_len) throw bad();
  std::memcpy(&host_len, in.data(), sizeof host_len);
  const std::size_t header = sizeof host_len + host_len + sizeof r.pid + sizeof r.probe;
  if (in.size() <= header) throw bad();
  r.host.assign(reinterpret_cast<const char*>(in.data()) + sizeof host_len, host_len);
  std::memcpy(&r.pid, in.data() + sizeof host_len + host_len, sizeof r.pid);
  std::memcpy(&r.probe, in.data() + sizeof host_len + host_len + sizeof r.pid, sizeof r.probe);
  r.address.assign(in.begin() + static_cast<std::ptrdiff_t>(header), in.end());
  return r;
}

void check_arguments(int rank, int size, int streams, std::size_t single_copy_min) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("UcxTransport: rank {} is not in a world of size {}", rank, size));
  }
  if (streams < 1 || streams > kMaxLanes) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("UcxTransport: {} streams per peer; 1 .. {} are possible", streams, kMaxLanes));
  }
  if (single_copy_min != 0 && single_copy_min < sizeof(UcxTransport::Announcement)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("UcxTransport: single-copy messages from {} bytes: at least {} (or 0 "
                            "for none)",
                            single_copy_min, sizeof(UcxTransport::Announcement)));
  }
}

// A peer's key under `prefix` (its host, its address record), waiting at most `timeout`.
Bytes peer_key(Store& store, const std::string& prefix, const char* what, int p, int rank, int size,
               std::chrono::milliseconds timeout) {
  try {
    return store.get(fmt::format("{}/{}/{}", prefix, what, p), timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    throw Error(ErrorCode::Timeout,
                fmt::format("rank {} of {}: rank(s) {} did not start within {} ms (connection "
                            "setup): is it launched, with the same MASTER_ADDR, MASTER_PORT "
                            "and WORLD_SIZE? Raise STRAIT_TIMEOUT_S if it is only slow",
                            rank, size, p, timeout.count()));
  }
}

}  // namespace

UcxTransport::UcxTransport(Store& store, const std::string& prefix, int rank, int size,
                           std::chrono::milliseconds timeout, int streams,
                           std::size_t single_copy_min)
    : rank_(rank),
      size_(size),
      context_(nullptr, ucp_cleanup),
      worker_(nullptr, ucp_worker_destroy),
      streams_(streams),
      single_copy_min_(single_copy_min) {
  check_arguments(rank, size, streams, single_copy_min);
  {
    std::random_device random;
    next_token_ = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  }
  // Whether every rank runs on this host decides the transports, before UCX starts.
  const std::string host = host_identity();
  store.set(fmt::format("{}/host/{}", prefix, rank), Bytes(host.begin(), host.end()));
  int local_ranks = 1;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const Bytes theirs = peer_key(store, prefix, "host", p, rank, size, timeout);
    if (std::string(theirs.begin(), theirs.end()) == host) ++local_ranks;
  }
  const bool one_host = local_ranks == size;
  const bool force_peer_mode = force_peer_error_mode();
  cpu_set_t cpus;
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  core_per_local_rank_ = local_ranks <= cores;
  const bool shm_only = one_host && !force_peer_mode;

  start_ucx(shm_only);

  const std::vector<std::uint64_t> probes =
      connect_peers(store, prefix, host, force_peer_mode, timeout);
  try {
    agree_single_copy(store, prefix, probes, timeout);
  } catch (const Error&) {
    close_endpoints();
    throw;
  }
}

// The constructor's first step: UCX's configuration (see the comments), context, worker and the
// epoll set the progress engine sleeps on.
void UcxTransport::start_ucx(bool shm_only) {
  ucx_log::install();  // UCX's messages go to strait's logger (ucx_log.h), not to stderr
  ucp_config_t* raw_config = nullptr;
  if (auto st = ucp_config_read(nullptr, nullptr, &raw_config); st != UCS_OK) {
    throw ucx_error("ucp_config_read", st);
  }
  const std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> config(raw_config,
                                                                      ucp_config_release);
  const auto set = [&](const char* name, const char* value) {
    if (auto st = ucp_config_modify(config.get(), name, value); st != UCS_OK) {
      throw ucx_error(fmt::format("ucp_config_modify({}={})", name, value).c_str(), st);
    }
  };
  // UCX 1.13 treats a failed CMA read (process_vm_readv of a peer that died) as fatal without
  // peer-failure mode and aborts the survivors with a backtrace. Without CMA a dead local peer is
  // an ordinary PeerLost (through its pidfd); large local messages then go through the shared
  // memory FIFO.
  // When every rank is on this host (and peer-failure mode, which needs TCP, is not forced), TCP
  // goes too: its interface costs an epoll_wait system call on every progress call (an 8-byte
  // allreduce of 2 ranks on 2 cores: 25-45 us with it, 9-15 us without), and UCX would send large
  // local messages over loopback TCP. With more ranks than cores this needs a waiting rank to give
  // its core to the one it waits for (ProgressEngine::drive yields): 4 ranks on 2 cores, 8 B
  // allreduce 64-73 us with TCP, 24-38 us without; 2 MiB 1.6-1.7 GB/s busbw with, 2.3-2.8 without.
  // Eager sends at every size (RNDV_THRESH=inf) unless RDMA devices are present, for two reasons.
  // Safety: a rendezvous send waits for the receiver to ask for the data, and a receiver that asks
  // after the sender's operation failed (a late rank) made UCX read the freed send buffer even
  // after the endpoint was force-closed (withdraw()): without peer-failure mode UCX finds the
  // request by its address. An eager send leaves the sender's buffer once it is in the shared
  // memory FIFO or the socket. Speed: over TCP, the rendezvous handshake of every pipeline
  // segment left a 100 Mbit/s link 68% used (16 MiB allreduce, 2 sites of the WAN testbed), eager
  // sends 93%. With RDMA, rendezvous is zero-copy and peer-failure mode keeps it safe, so UCX
  // keeps its own threshold there. A user's own UCX_TLS and UCX_RNDV_THRESH win.
  std::error_code ignored;
  const bool rdma = std::filesystem::exists("/sys/class/infiniband", ignored) &&
                    !std::filesystem::is_empty("/sys/class/infiniband", ignored);
  if (std::getenv("UCX_TLS") == nullptr) set("TLS", shm_only ? "^cma,tcp" : "^cma");
  if (std::getenv("UCX_RNDV_THRESH") == nullptr && !rdma) set("RNDV_THRESH", "inf");
  // More local ranks than cores: a sender fills the receiver's shared-memory FIFO and then waits
  // for it to be scheduled. 1024 entries (8 MiB) instead of 64 let a 16 MiB allreduce of 4 ranks
  // on 2 cores run at 1.0 GB/s busbw instead of 0.12. With a core per rank it changes nothing.
  const bool fifo_set = std::getenv("UCX_MM_FIFO_SIZE") != nullptr ||
                        std::getenv("UCX_POSIX_FIFO_SIZE") != nullptr ||
                        std::getenv("UCX_SYSV_FIFO_SIZE") != nullptr;
  if (!core_per_local_rank_ && !fifo_set) set("MM_FIFO_SIZE", "1024");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h ctx = nullptr;
  if (auto st = ucp_init(&params, config.get(), &ctx); st != UCS_OK)
    throw ucx_error("ucp_init", st);
  context_.reset(ctx);

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_FLAGS;
  // One thread at a time: the engine thread, or a caller driving it (ProgressEngine::drive).
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  // A receive whose sender stopped or died halfway through its message (over shared memory,
  // where peers have no failure handling) can never complete, and UCX cannot cancel a receive it
  // has matched: the destructor frees such requests, UCX releases them with the worker's pool,
  // and this flag keeps UCX from reporting each as a leak ("not returned to mpool ucp_requests").
  wparams.flags = UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK;
  ucp_worker_h worker = nullptr;
  if (auto st = ucp_worker_create(context_.get(), &wparams, &worker); st != UCS_OK) {
    throw ucx_error("ucp_worker_create", st);
  }
  worker_.reset(worker);

  int worker_fd = -1;
  if (auto st = ucp_worker_get_efd(worker_.get(), &worker_fd); st != UCS_OK) {
    throw ucx_error("ucp_worker_get_efd", st);
  }
  epoll_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (!epoll_fd_ || ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, worker_fd, &ev) != 0) {
    throw Error(ErrorCode::Internal,
                fmt::format("UcxTransport: epoll setup: {}", std::strerror(errno)));
  }
}

// Publishes this rank's record, reads every peer's and connects to it; returns the peers' probe
// addresses (single copy).
std::vector<std::uint64_t> UcxTransport::connect_peers(Store& store, const std::string& prefix,
                                                       const std::string& host,
                                                       bool force_peer_mode,
                                                       std::chrono::milliseconds timeout) {
  // Publish this rank's record.
  ucp_address_t* address = nullptr;
  std::size_t address_len = 0;
  if (auto st = ucp_worker_get_address(worker_.get(), &address, &address_len); st != UCS_OK) {
    throw ucx_error("ucp_worker_get_address", st);
  }
  const Bytes mine = encode_record(host, ::getpid(), reinterpret_cast<std::uintptr_t>(&probe_word_),
                                   address, address_len);
  ucp_worker_release_address(worker_.get(), address);
  store.set(fmt::format("{}/address/{}", prefix, rank_), mine);

  peers_.reserve(static_cast<std::size_t>(size_));
  std::vector<std::uint64_t> probes(static_cast<std::size_t>(size_), 0);
  for (int p = 0; p < size_; ++p) {
    auto peer = std::make_unique<Peer>();
    peer->self = this;
    peer->rank = p;
    const Record rec =
        p == rank_ ? decode_record(mine, p)
                   : decode_record(peer_key(store, prefix, "address", p, rank_, size_, timeout), p);
    peer->same_host = rec.host == host && !force_peer_mode;
    // Shared memory has no flows to police: one endpoint suffices.
    peer->lanes = peer->same_host || p == rank_ ? 1 : streams_;
    peer->address = rec.address;
    peer->pid = rec.pid;
    probes[static_cast<std::size_t>(p)] = rec.probe;
    if (peer->same_host && p != rank_) {
      peer->pidfd.reset(pidfd_open(rec.pid));
      epoll_event pev{};
      pev.events = EPOLLIN;  // wakes the progress engine the moment the peer dies
      if (peer->pidfd) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, peer->pidfd.get(), &pev);
      if (!peer->pidfd) {
        if (errno == ESRCH) {
          peer->lost =
              fmt::format("rank {} (pid {}) had already exited when we connected", p, rec.pid);
        } else {
          spdlog::warn(
              "strait: cannot watch rank {} (pid {}) with a pidfd ({}); its death will "
              "show as a timeout",
              p, rec.pid, std::strerror(errno));
        }
      }
    }
    try {
      connect(*peer);
    } catch (const Error&) {
      close_endpoints();
      throw;
    }
    peers_.push_back(std::move(peer));
  }
  return probes;
}

void UcxTransport::agree_single_copy(Store& store, const std::string& prefix,
                                     const std::vector<std::uint64_t>& probe_addresses,
                                     std::chrono::milliseconds timeout) {
  // Every rank publishes, whatever its own setting, so that none waits for a key that never
  // comes. Byte p of rank r's record: r takes single-copy messages from p (it may read p's
  // memory, and its own single_copy_min is not 0).
  Bytes readable(static_cast<std::size_t>(size_), 0);
  for (auto& peer : peers_) {
    if (single_copy_min_ == 0 || !peer->pidfd || !peer->lost.empty()) continue;
    std::uint64_t word = 0;
    const PeerRead r = read_peer_memory(
        peer->pid, probe_addresses.at(static_cast<std::size_t>(peer->rank)), &word, sizeof word);
    if (r.error == EPERM) {
      spdlog::warn(
          "strait: rank {} may not read the memory of rank {} on this host (process_vm_readv: "
          "{}; ptrace rules: kernel.yama.ptrace_scope, seccomp or another user), so large "
          "messages from it are copied twice through shared memory",
          rank_, peer->rank, std::strerror(r.error));
      continue;
    }
    // Another error (the peer is gone) or another word (not the process its record names): the
    // ordinary path. The pidfd, checked after the read, says the pid was still the peer's.
    mark_if_exited(*peer, 0);
    peer->single_copy_from = r.error == 0 && word == kProbeValue && peer->lost.empty();
    readable[static_cast<std::size_t>(peer->rank)] = peer->single_copy_from ? 1 : 0;
  }
  store.set(fmt::format("{}/single_copy/{}", prefix, rank_), readable);
  if (single_copy_min_ == 0) return;
  for (auto& peer : peers_) {
    if (!peer->pidfd || peer->rank == rank_) continue;
    Bytes theirs;
    try {
      theirs = store.get(fmt::format("{}/single_copy/{}", prefix, peer->rank), timeout);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout,
                  fmt::format("rank {} of {}: rank {} did not finish connecting within {} ms (it "
                              "published its address but not what it may read): did it fail? "
                              "Raise STRAIT_TIMEOUT_S if it is only slow",
                              rank_, size_, peer->rank, timeout.count()));
    }
    peer->single_copy_to = theirs.size() == static_cast<std::size_t>(size_) &&
                           theirs[static_cast<std::size_t>(rank_)] == 1;
  }
}

void UcxTransport::connect(Peer& peer) {
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(peer.address.data());
  if (peer.same_host) {
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  } else {
    ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = &UcxTransport::on_ep_error;
    ep_params.err_handler.arg = &peer;
  }
  if (auto st = ucp_ep_create(worker_.get(), &ep_params, &peer.ep); st != UCS_OK) {
    peer.ep = nullptr;
    throw ucx_error(fmt::format("ucp_ep_create to rank {}", peer.rank).c_str(), st);
  }
  // Each endpoint to the same worker is a connection of its own (over TCP, a socket).
  peer.extra_lanes.clear();
  for (int lane = 1; lane < peer.lanes; ++lane) {
    ucp_ep_h ep = nullptr;
    if (auto st = ucp_ep_create(worker_.get(), &ep_params, &ep); st != UCS_OK) {
      throw ucx_error(fmt::format("ucp_ep_create (stream {}) to rank {}", lane, peer.rank).c_str(),
                      st);
    }
    peer.extra_lanes.push_back(ep);
  }
}

void UcxTransport::close_endpoint(ucp_ep_h& ep, unsigned flags, std::vector<void*>& closing) {
  if (ep == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = flags;
  void* r = ucp_ep_close_nbx(ep, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
  ep = nullptr;
}

UcxTransport::~UcxTransport() {
  // No peer may read what our single-copy sends announced once we are gone, nor do we read.
  for (auto& slot : slots_) slot.store(0, std::memory_order_seq_cst);
  reads_.clear();
  single_sends_.clear();
  check_peers();  // a dead local peer cannot flush: its endpoint is force-closed
  // Requests still posted (failed or aborted operations) are cancelled so UCX releases them.
  // Cancelling can complete a request at once, which erases it from in_flight_: iterate a copy.
  std::vector<void*> posted;
  for (auto& [req, pending] : in_flight_) posted.push_back(pending->ucx_request);
  for (void* r : posted) ucp_request_cancel(worker_.get(), r);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!in_flight_.empty() && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(worker_.get());
  }
  close_endpoints();
  // Sends that never completed (a dead peer) keep their UCX requests until the worker goes.
  for (auto& [req, pending] : in_flight_) {
    if (pending->ucx_request != nullptr) ucp_request_free(pending->ucx_request);
  }
  in_flight_.clear();
  drain_unexpected(std::chrono::milliseconds(500));
}

void UcxTransport::drain_unexpected(std::chrono::milliseconds budget) {
  // Messages that arrived for operations this rank never posted (its operation failed, or it
  // stops before its peers do) wait in UCX's unexpected queue, and the later fragments of a long
  // eager message in UCX's reassembly table; each holds a receive descriptor of the transport it
  // came by (over shared memory, a slot of the mm_recv_desc pool). ucp_worker_destroy releases
  // the queued ones with a warning each and never the fragments: one "object was not returned to
  // mpool" warning apiece. Receiving every such message into a scratch buffer gives the
  // descriptors back. With the endpoints closed no new data is asked for: a rendezvous request
  // received now completes at once as cancelled, and a message whose sender stopped halfway
  // keeps only its receive request, freed below.
  using Clock = std::chrono::steady_clock;
  struct Drained {
    std::vector<std::byte> buffer;
    void* request = nullptr;  // null once complete
  };
  std::deque<Drained> drained;  // a deque: buffers stay put while receives are in flight
  const auto until = Clock::now() + budget;
  auto last_activity = Clock::now();
  constexpr auto kQuiet = std::chrono::milliseconds(20);
  while (Clock::now() < until) {
    bool active = false;
    for (int i = 0; i < 1024 && ucp_worker_progress(worker_.get()) != 0; ++i) active = true;
    ucp_tag_recv_info_t info{};
    while (ucp_tag_message_h msg = ucp_tag_probe_nb(worker_.get(), 0, 0, 1, &info)) {
      active = true;
      Drained& d = drained.emplace_back();
      d.buffer.resize(info.length);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
      p.datatype = ucp_dt_make_contig(1);
      void* r = ucp_tag_msg_recv_nbx(worker_.get(), d.buffer.data(), d.buffer.size(), msg, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) d.request = r;
    }
    bool all_done = true;
    for (Drained& d : drained) {
      if (d.request == nullptr) continue;
      if (ucp_request_check_status(d.request) == UCS_INPROGRESS) {
        all_done = false;
        continue;
      }
      ucp_request_free(d.request);
      d.request = nullptr;
    }
    const auto now = Clock::now();
    if (active) last_activity = now;
    if (!active && (all_done || now - last_activity > kQuiet)) break;
  }
  for (Drained& d : drained) {
    if (d.request != nullptr) ucp_request_free(d.request);  // released if it ever completes
  }
  if (!drained.empty()) {
    spdlog::debug("strait: rank {} discarded {} message(s) no operation received", rank_,
                  drained.size());
  }
}

void UcxTransport::close_endpoints() {
  // Flush-close the endpoints of other hosts' peers, so that the last messages we sent still reach
  // them. Force-close the rest: a lost peer can never flush, and a completed send to a peer on
  // this host is already in its shared-memory FIFO, while flushing towards a peer that exits at
  // the same moment only makes UCX log "Endpoint timeout" errors. Bounded: a stalled peer is
  // left behind.
  std::vector<void*> closing;
  for (auto& peer : peers_) {
    const unsigned flags = peer->lost.empty() && !peer->same_host ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    close_endpoint(peer->ep, flags, closing);
    for (auto& ep : peer->extra_lanes) close_endpoint(ep, flags, closing);
    peer->extra_lanes.clear();
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (void* r : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker_.get());
    }
    if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
  }
}

void UcxTransport::retire(InFlight* done, ucs_status_t status, std::size_t bytes) {
  auto& req = *done->request;
  if (status == UCS_OK) {
    req.state = TransportRequest::State::Done;
    req.bytes = bytes;
  } else {
    req.state = TransportRequest::State::Failed;
    req.truncated = status == UCS_ERR_MESSAGE_TRUNCATED;
    req.error = req.truncated || status == UCS_ERR_CANCELED ? ucs_status_string(status)
                                                            : failure_cause(done->peer, status);
  }
  in_flight_.erase(done->request.get());  // destroys *done
}

std::string UcxTransport::failure_cause(int peer_rank, ucs_status_t status) {
  Peer& peer = *peers_.at(static_cast<std::size_t>(peer_rank));
  // A transfer with a rank on this host fails when that rank has gone: a send finds its shared
  // memory segment removed ("Shared memory error"). Its pidfd turns readable a moment later
  // (the kernel releases a process's memory before it reports the exit), so wait briefly for the
  // real cause rather than report UCX's symptom.
  // Once per peer: a live peer whose transfers keep failing must not cost this wait each time.
  constexpr int kExitReportMs = 500;
  if (peer.lost.empty()) mark_if_exited(peer, peer.waited_for_exit ? 0 : kExitReportMs);
  peer.waited_for_exit = true;
  if (peer.lost.empty()) return ucs_status_string(status);
  spdlog::debug("strait: rank {}: a transfer with rank {} failed ({}): {}", rank_, peer_rank,
                ucs_status_string(status), peer.lost);
  return peer.lost;
}

bool UcxTransport::mark_if_exited(Peer& peer, int wait_ms) {
  if (!peer.pidfd || !peer.lost.empty()) return false;
  pollfd pfd{peer.pidfd.get(), POLLIN, 0};
  if (::poll(&pfd, 1, wait_ms) <= 0) return false;
  peer.lost = fmt::format("rank {}'s process exited", peer.rank);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, peer.pidfd.get(), nullptr);  // stays readable
  return true;
}

bool UcxTransport::progress() {
  bool any = ucp_worker_progress(worker_.get()) != 0;
  if (!reads_.empty()) any = pump_reads() || any;
  if (!single_sends_.empty()) {
    const auto before = single_sends_.size();
    std::erase_if(single_sends_, [this](SingleCopySend& s) { return settle(s); });
    any = any || single_sends_.size() != before;
  }
  if (!stripes_.empty()) std::erase_if(stripes_, [](Stripe& s) { return settle(s); });
  return any;
}

bool UcxTransport::arm() {
  if (!reads_.empty()) return false;  // reading a peer's message is work no fd announces
  return ucp_worker_arm(worker_.get()) == UCS_OK;
}

void UcxTransport::check_peers() {
  for (auto& peer : peers_) mark_if_exited(*peer, 0);
}

const std::string& UcxTransport::peer_lost(int peer) const {
  return peers_.at(static_cast<std::size_t>(peer))->lost;
}

}  // namespace strait::comm
