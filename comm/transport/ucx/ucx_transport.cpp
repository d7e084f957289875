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

#include "comm/algorithms/partition.h"
#include "comm/transport/peer_memory.h"
#include "comm/transport/ucx/ucx_log.h"
#include "core/error.h"
#include "core/params.h"
#include "kernels/reduce.h"

namespace strait::comm {

struct UcxTransport::InFlight {
  UcxTransport* transport = nullptr;
  RequestPtr request;
  void* ucx_request = nullptr;  // null until the post call returns a handle
  bool is_send = false;
  int peer = 0;  // world rank
  // Receives: where the message lands, so that an announcement (single copy) can be read there.
  std::byte* recv_buf = nullptr;
  std::size_t recv_len = 0;
  Tag tag = 0;
  // Posted to match an announcement too (a collective tag): a point-to-point tag may have the
  // announcement's bit as one of its own.
  bool takes_announcement = false;
  // irecv_reduce(): an announced message is reduced as it is read (see read_piece()).
  std::optional<ReduceOnArrival> reduce;
};

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
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("UcxTransport: rank {} is not in a world of size {}", rank, size));
  }
  if (streams < 1 || streams > kMaxLanes) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("UcxTransport: {} streams per peer; 1 .. {} are possible", streams, kMaxLanes));
  }
  if (single_copy_min != 0 && single_copy_min < sizeof(Announcement)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("UcxTransport: single-copy messages from {} bytes: at least {} (or 0 "
                            "for none)",
                            single_copy_min, sizeof(Announcement)));
  }
  {
    std::random_device random;
    next_token_ = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  }
  const auto peer_key = [&](int p, const char* what) {
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
  };
  // Whether every rank runs on this host decides the transports, before UCX starts.
  const std::string host = host_identity();
  store.set(fmt::format("{}/host/{}", prefix, rank), Bytes(host.begin(), host.end()));
  int local_ranks = 1;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const Bytes theirs = peer_key(p, "host");
    if (std::string(theirs.begin(), theirs.end()) == host) ++local_ranks;
  }
  const bool one_host = local_ranks == size;
  const bool force_peer_mode = force_peer_error_mode();
  cpu_set_t cpus;
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  core_per_local_rank_ = local_ranks <= cores;
  const bool shm_only = one_host && !force_peer_mode;

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

  // Publish this rank's record.
  ucp_address_t* address = nullptr;
  std::size_t address_len = 0;
  if (auto st = ucp_worker_get_address(worker_.get(), &address, &address_len); st != UCS_OK) {
    throw ucx_error("ucp_worker_get_address", st);
  }
  const Bytes mine = encode_record(host, ::getpid(), reinterpret_cast<std::uintptr_t>(&probe_word_),
                                   address, address_len);
  ucp_worker_release_address(worker_.get(), address);
  store.set(fmt::format("{}/address/{}", prefix, rank), mine);

  peers_.reserve(static_cast<std::size_t>(size));
  std::vector<std::uint64_t> probes(static_cast<std::size_t>(size), 0);
  for (int p = 0; p < size; ++p) {
    auto peer = std::make_unique<Peer>();
    peer->self = this;
    peer->rank = p;
    const Record rec =
        p == rank ? decode_record(mine, p) : decode_record(peer_key(p, "address"), p);
    peer->same_host = rec.host == host && !force_peer_mode;
    // Shared memory has no flows to police: one endpoint suffices.
    peer->lanes = peer->same_host || p == rank ? 1 : streams_;
    peer->address = rec.address;
    peer->pid = rec.pid;
    probes[static_cast<std::size_t>(p)] = rec.probe;
    if (peer->same_host && p != rank) {
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
  try {
    agree_single_copy(store, prefix, probes, timeout);
  } catch (const Error&) {
    close_endpoints();
    throw;
  }
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

void UcxTransport::on_send(void* request, ucs_status_t status, void* user_data) {
  auto* pending = static_cast<InFlight*>(user_data);
  ucp_request_free(request);
  pending->transport->retire(pending, status, 0);
}

void UcxTransport::on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                           void* user_data) {
  auto* pending = static_cast<InFlight*>(user_data);
  // `info` lives in the request: read it before the request goes back to UCX's pool (whose free
  // list then overwrites the sender's tag).
  const Tag sender_tag = status == UCS_OK ? info->sender_tag : 0;
  const std::size_t length = status == UCS_OK ? info->length : 0;
  ucp_request_free(request);
  if (pending->takes_announcement && (sender_tag & kSingleCopyAnnounceBit) != 0) {
    pending->transport->accept_announcement(pending, length);
    return;
  }
  pending->transport->retire(pending, status, length);
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->lost.empty()) {
    peer->lost =
        fmt::format("the connection to rank {} failed: {}", peer->rank, ucs_status_string(status));
  }
}

RequestPtr UcxTransport::post(bool is_send, int peer, Tag tag, const void* send_buf, void* recv_buf,
                              std::size_t len, int lane, Tag mask, const ReduceOnArrival* reduce) {
  auto req = std::make_shared<TransportRequest>();
  Peer& to = *peers_.at(static_cast<std::size_t>(peer));
  const auto extra = static_cast<std::size_t>(lane - 1);
  ucp_ep_h ep = lane == 0 ? to.ep : extra < to.extra_lanes.size() ? to.extra_lanes[extra] : nullptr;
  if (is_send && ep == nullptr) {
    req->state = TransportRequest::State::Failed;  // closed by withdraw(): peer_lost() says why
    req->error = peers_[static_cast<std::size_t>(peer)]->lost;
    return req;
  }
  auto owned = std::make_unique<InFlight>();
  InFlight* pending = owned.get();
  pending->transport = this;
  pending->request = req;
  // Registered before posting: UCX may run the completion callback inside the post call.
  in_flight_.emplace(req.get(), std::move(owned));
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = pending;
  pending->is_send = is_send;
  pending->peer = peer;
  pending->recv_buf = static_cast<std::byte*>(recv_buf);
  pending->recv_len = len;
  pending->tag = tag;
  pending->takes_announcement = !is_send && (mask & kSingleCopyAnnounceBit) == 0;
  if (reduce != nullptr && pending->takes_announcement) pending->reduce = *reduce;
  void* r = nullptr;
  if (is_send) {
    p.cb.send = &UcxTransport::on_send;
    r = ucp_tag_send_nbx(ep, send_buf, len, tag, &p);
  } else {
    // Receives always complete through the callback, which is where UCX reports the length.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &UcxTransport::on_recv;
    r = ucp_tag_recv_nbx(worker_.get(), recv_buf, len, tag, mask, &p);
  }
  if (!in_flight_.contains(req.get())) return req;  // the callback already ran (and freed r)
  if (r == nullptr) {
    req->state = TransportRequest::State::Done;
    in_flight_.erase(req.get());
  } else if (UCS_PTR_IS_ERR(r)) {
    req->state = TransportRequest::State::Failed;
    req->error = failure_cause(peer, UCS_PTR_STATUS(r));
    in_flight_.erase(req.get());
  } else {
    pending->ucx_request = r;
  }
  return req;
}

RequestPtr UcxTransport::isend(int peer, Tag tag, const void* buf, std::size_t len) {
  const Peer& to = *peers_.at(static_cast<std::size_t>(peer));
  if (to.lanes > 1 && to.ep != nullptr && len >= kStripeMin && is_collective_tag(tag)) {
    return post_striped(true, peer, tag, buf, nullptr, len);
  }
  if (to.single_copy_to && single_copy_min_ != 0 && len >= single_copy_min_ && to.ep != nullptr &&
      is_collective_tag(tag)) {
    return post_single_copy(peer, tag, buf, len);
  }
  return post(true, peer, tag, buf, nullptr, len);
}

RequestPtr UcxTransport::irecv(int peer, Tag tag, void* buf, std::size_t len) {
  // The sender stripes by the same rule (its lanes to us equal ours to it), so a receive of the
  // size it sends expects the same parts.
  const Peer& from = *peers_.at(static_cast<std::size_t>(peer));
  if (from.lanes > 1 && len >= kStripeMin && is_collective_tag(tag)) {
    return post_striped(false, peer, tag, nullptr, buf, len);
  }
  // The sender decides whether a message is announced (its own threshold): take either.
  const Tag mask =
      from.single_copy_from && is_collective_tag(tag) ? ~kSingleCopyAnnounceBit : ~Tag{0};
  return post(false, peer, tag, nullptr, buf, len, 0, mask);
}

RequestPtr UcxTransport::irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                                      const ReduceOnArrival& how) {
  const Peer& from = *peers_.at(static_cast<std::size_t>(peer));
  if (!from.single_copy_from || from.lanes > 1 || !is_collective_tag(tag)) {
    return irecv(peer, tag, buf, len);
  }
  return post(false, peer, tag, nullptr, buf, len, 0, ~kSingleCopyAnnounceBit, &how);
}

RequestPtr UcxTransport::post_striped(bool is_send, int peer, Tag tag, const void* send_buf,
                                      void* recv_buf, std::size_t len) {
  const int lanes = peers_.at(static_cast<std::size_t>(peer))->lanes;
  Stripe s{std::make_shared<TransportRequest>(), {}};
  for (int lane = 0; lane < lanes; ++lane) {
    const Part c = part(len, static_cast<std::size_t>(lanes), static_cast<std::size_t>(lane));
    s.parts.push_back(post(is_send, peer, with_lane(tag, lane),
                           is_send ? static_cast<const std::byte*>(send_buf) + c.offset : nullptr,
                           is_send ? nullptr : static_cast<std::byte*>(recv_buf) + c.offset,
                           c.count, lane));
  }
  RequestPtr whole = s.whole;
  if (!settle(s)) stripes_.push_back(std::move(s));
  return whole;
}

bool UcxTransport::settle(Stripe& s) {
  for (const auto& p : s.parts) {
    if (p->pending()) return false;
  }
  auto& w = *s.whole;
  w.state = TransportRequest::State::Done;
  for (const auto& p : s.parts) {
    w.bytes += p->bytes;
    if (p->state == TransportRequest::State::Failed && w.state != TransportRequest::State::Failed) {
      w.state = TransportRequest::State::Failed;
      w.error = p->error;
    }
    w.truncated = w.truncated || p->truncated;
  }
  return true;
}

void UcxTransport::withdraw(std::span<const RequestPtr> whole_requests,
                            std::chrono::milliseconds budget) {
  // A striped message is withdrawn through its parts, a single-copy send through its
  // announcement (its "done" receive is its own business, below).
  std::vector<RequestPtr> expanded(whole_requests.begin(), whole_requests.end());
  for (const auto& r : whole_requests) {
    for (const auto& s : stripes_) {
      if (s.whole == r) expanded.insert(expanded.end(), s.parts.begin(), s.parts.end());
    }
    for (const auto& s : single_sends_) {
      if (s.whole == r) expanded.push_back(s.announce);
    }
  }
  const std::span<const RequestPtr> requests(expanded);
  const auto find = [this](const RequestPtr& r) {
    return r && r->pending() ? in_flight_.find(r.get()) : in_flight_.end();
  };
  // Unmatched receives go at once (cancelling may complete them inside the call).
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it != in_flight_.end() && !it->second->is_send && it->second->ucx_request != nullptr) {
      ucp_request_cancel(worker_.get(), it->second->ucx_request);
    }
  }
  const auto any_pending = [&] {
    return std::any_of(requests.begin(), requests.end(),
                       [](const RequestPtr& r) { return r && r->pending(); });
  };
  const auto until = std::chrono::steady_clock::now() + budget;
  while (any_pending() && std::chrono::steady_clock::now() < until) {
    if (!progress()) check_peers();
  }
  const auto withdrawn = [&](const RequestPtr& r) {
    return r->pending() && std::find(requests.begin(), requests.end(), r) != requests.end();
  };
  // Single-copy messages: a receive no longer reads (the sender is told it is done), and a
  // send's slot is cleared, so a peer still reading it fails rather than lands what the caller
  // writes there next.
  std::erase_if(reads_, [&](PeerReadJob& job) {
    if (!withdrawn(job.request)) return false;
    job.request->state = TransportRequest::State::Failed;
    job.request->error = "withdrawn: its operation failed";
    if (peers_.at(static_cast<std::size_t>(job.peer))->lost.empty()) send_done(job);
    return true;
  });
  std::erase_if(single_sends_, [&](SingleCopySend& s) {
    if (!withdrawn(s.whole)) return false;
    s.whole->state = TransportRequest::State::Failed;
    s.whole->error = "withdrawn: its operation failed";
    return settle(s);
  });
  // Sends the peer has not taken: UCX would read their buffers whenever it gets to them (a
  // rendezvous the peer matches later, a queue that drains later). Closing the endpoint by force
  // fails them; UCX 1.13 cannot cancel a single send.
  std::vector<int> stuck_peers;
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it == in_flight_.end()) continue;
    if (it->second->is_send) {
      if (std::find(stuck_peers.begin(), stuck_peers.end(), it->second->peer) == stuck_peers.end())
        stuck_peers.push_back(it->second->peer);
    }
  }
  for (const int p : stuck_peers) {
    reset_endpoint(*peers_.at(static_cast<std::size_t>(p)),
                   fmt::format("a send to it was still pending {} ms after its operation failed",
                               budget.count()));
  }
  for (const auto& r : requests) {
    const auto it = find(r);
    if (it == in_flight_.end() || it->second->is_send) continue;
    spdlog::warn(
        "strait: a receive of a failed operation was still arriving {} ms after the failure; "
        "UCX cannot stop it, so its buffer may still be written. Keep the buffers of failed "
        "operations until the communicator is destroyed if a peer may still be sending",
        budget.count());
    break;
  }
}

void UcxTransport::reset_endpoint(Peer& peer, const std::string& why) {
  spdlog::debug("strait: rank {} force-closes its endpoint to rank {}: {}", rank_, peer.rank, why);
  {
    std::vector<void*> closing;
    close_endpoint(peer.ep, UCP_EP_CLOSE_FLAG_FORCE, closing);
    for (auto& ep : peer.extra_lanes) close_endpoint(ep, UCP_EP_CLOSE_FLAG_FORCE, closing);
    peer.extra_lanes.clear();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (void* r : closing) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < until) {
        ucp_worker_progress(worker_.get());
      }
      if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
    }
  }
  // Another host's peer sees its side of the connection fail; it is gone for this transport.
  // A peer on this host (no peer-failure handling, shared memory) does not notice: reconnect.
  if (peer.same_host && peer.lost.empty()) {
    try {
      connect(peer);
      return;
    } catch (const Error& e) {
      peer.lost = fmt::format("rank {}: reconnecting failed: {}", peer.rank, e.message());
      return;
    }
  }
  if (peer.lost.empty()) {
    peer.lost = fmt::format("this rank closed its connection to rank {}: {}", peer.rank, why);
  }
}

RequestPtr UcxTransport::post_single_copy(int peer, Tag tag, const void* buf, std::size_t len) {
  std::size_t slot = 0;
  if (free_slots_.empty()) {
    slot = slots_.size();
    slots_.emplace_back(0);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  if (++next_token_ == 0) ++next_token_;  // 0 marks a free slot
  const std::uint64_t token = next_token_;
  slots_[slot].store(token, std::memory_order_release);
  auto msg =
      std::make_shared<Announcement>(Announcement{reinterpret_cast<std::uintptr_t>(buf), len, token,
                                                  reinterpret_cast<std::uintptr_t>(&slots_[slot])});
  auto done = std::make_shared<std::uint64_t>(0);
  SingleCopySend s;
  s.whole = std::make_shared<TransportRequest>();
  s.slot = slot;
  s.token = token;
  s.length = len;
  // The "done" receive first: it is posted before the receiver can answer.
  s.done = post(false, peer, with_source(tag, peer) | kSingleCopyDoneBit, nullptr, done.get(),
                sizeof *done);
  s.done->keep_alive = std::move(done);
  s.announce = post(true, peer, tag | kSingleCopyAnnounceBit, msg.get(), nullptr, sizeof *msg);
  s.announce->keep_alive = std::move(msg);
  RequestPtr whole = s.whole;
  if (!settle(s)) single_sends_.push_back(std::move(s));
  return whole;
}

bool UcxTransport::settle(SingleCopySend& s) {
  auto& w = *s.whole;
  if (w.pending()) {
    const auto failed = [](const RequestPtr& r) {
      return r->state == TransportRequest::State::Failed;
    };
    if (failed(s.announce) || failed(s.done)) {
      w.state = TransportRequest::State::Failed;
      w.error = failed(s.announce) ? s.announce->error : s.done->error;
    } else if (!s.announce->pending() && !s.done->pending()) {
      const auto* got = static_cast<const std::uint64_t*>(s.done->keep_alive.get());
      if (s.done->bytes == sizeof s.token && *got == s.token) {
        w.state = TransportRequest::State::Done;
        single_copy_bytes_.fetch_add(s.length, std::memory_order_relaxed);
      } else {
        w.state = TransportRequest::State::Failed;
        w.error = fmt::format(
            "the receiver's \"done\" for a single-copy message did not name it "
            "({} bytes): are all ranks running the same strait build?",
            s.done->bytes);
      }
    } else {
      return false;
    }
  }
  // The caller may reuse its buffer from now on: a read that has not checked the slot yet fails.
  release_slot(s.slot);
  if (s.done->pending()) {
    if (const auto it = in_flight_.find(s.done.get());
        it != in_flight_.end() && it->second->ucx_request != nullptr) {
      ucp_request_cancel(worker_.get(), it->second->ucx_request);
    }
  }
  return true;
}

void UcxTransport::release_slot(std::size_t slot) {
  slots_[slot].store(0, std::memory_order_seq_cst);
  // The caller's next writes to the buffer come after this store for any reader (peer_memory.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  free_slots_.push_back(slot);
}

void UcxTransport::accept_announcement(InFlight* pending, std::size_t length) {
  PeerReadJob job;
  job.request = pending->request;
  job.peer = pending->peer;
  job.tag = pending->tag;
  job.dst = pending->recv_buf;
  job.capacity = pending->recv_len;
  job.reduce = pending->reduce;
  const bool well_formed = length == sizeof(Announcement);
  if (well_formed) std::memcpy(&job.msg, job.dst, sizeof job.msg);
  in_flight_.erase(job.request.get());  // destroys *pending
  if (!well_formed) {
    job.request->state = TransportRequest::State::Failed;
    job.request->error = fmt::format(
        "rank {} sent a single-copy announcement of {} bytes where {} were expected: are all "
        "ranks running the same strait build?",
        job.peer, length, sizeof(Announcement));
    return;
  }
  reads_.push_back(std::move(job));
}

bool UcxTransport::pump_reads() {
  // One piece of each message in turn, so that none waits for another to be read whole.
  for (std::size_t n = reads_.size(); n > 0; --n) {
    PeerReadJob job = std::move(reads_.front());
    reads_.pop_front();
    if (!read_piece(job)) reads_.push_back(std::move(job));
  }
  return true;
}

bool UcxTransport::read_piece(PeerReadJob& job) {
  auto& req = *job.request;
  if (!req.pending()) return true;
  Peer& peer = *peers_.at(static_cast<std::size_t>(job.peer));
  if (job.msg.length > job.capacity) {
    req.state = TransportRequest::State::Failed;
    req.truncated = true;
    req.error = ucs_status_string(UCS_ERR_MESSAGE_TRUNCATED);
    send_done(job);
    return true;
  }
  if (job.reduce && job.msg.length % kernels::dtype_size(job.reduce->dtype) != 0) {
    job.reduce.reset();  // lands whole instead; the operation then names the wrong size
  }
  const std::size_t n = std::min(kReadPiece, job.msg.length - job.offset);
  if (n > 0 && job.reduce) {
    if (!reduce_piece_) reduce_piece_ = std::make_unique_for_overwrite<std::byte[]>(kReducePiece);
    const ReduceOnArrival& how = *job.reduce;
    const std::size_t elem = kernels::dtype_size(how.dtype);
    for (std::size_t done = 0; done < n;) {
      const std::size_t m = std::min(kReducePiece, n - done);
      const std::size_t at = job.offset + done;
      const PeerRead r = read_peer_memory(peer.pid, job.msg.address + at, reduce_piece_.get(), m);
      if (r.error != 0) {
        fail_read(job,
                  fmt::format("reading its message from its memory failed after {} of {} bytes: {}",
                              at + r.bytes, job.msg.length, std::strerror(r.error)),
                  true);
        return true;
      }
      // The piece is in this core's cache: reduce it at once (one read of each operand).
      if (how.from != how.into) std::memcpy(how.into + at, how.from + at, m);
      kernels::reduce(how.dtype, how.op, how.into + at, reduce_piece_.get(), m / elem);
      done += m;
    }
    job.offset += n;
  } else if (n > 0) {
    const PeerRead r =
        read_peer_memory(peer.pid, job.msg.address + job.offset, job.dst + job.offset, n);
    if (r.error != 0) {
      fail_read(job,
                fmt::format("reading its message from its memory failed after {} of {} bytes: {}",
                            job.offset + r.bytes, job.msg.length, std::strerror(r.error)),
                true);
      return true;
    }
    job.offset += n;
  }
  if (job.offset < job.msg.length) return false;
  // All read. The slot, read after the data, still holds the token: the sender had not given the
  // buffer back by then, so what was read is its message. A readable pidfd: the pid may have
  // been another process's.
  std::uint64_t slot = 0;
  const PeerRead s = read_peer_memory(peer.pid, job.msg.slot, &slot, sizeof slot);
  if (s.error != 0 || slot != job.msg.token || mark_if_exited(peer, 0) || !peer.lost.empty()) {
    fail_read(job,
              fmt::format("rank {} withdrew its message before this rank had read it (its "
                          "operation failed there)",
                          job.peer),
              true);
    return true;
  }
  req.state = TransportRequest::State::Done;
  req.bytes = job.msg.length;
  req.reduced = job.reduce.has_value();
  send_done(job);
  return true;
}

void UcxTransport::fail_read(PeerReadJob& job, std::string why, bool tell_sender) {
  Peer& peer = *peers_.at(static_cast<std::size_t>(job.peer));
  // A read fails when the sender is gone, and its pidfd turns readable a moment after its memory
  // went: wait for it once, as failure_cause() does, to report the cause rather than the symptom.
  constexpr int kExitReportMs = 500;
  if (peer.lost.empty()) mark_if_exited(peer, peer.waited_for_exit ? 0 : kExitReportMs);
  peer.waited_for_exit = true;
  auto& req = *job.request;
  req.state = TransportRequest::State::Failed;
  req.error = peer.lost.empty() ? std::move(why) : peer.lost;
  if (tell_sender && peer.lost.empty()) send_done(job);
}

void UcxTransport::send_done(const PeerReadJob& job) {
  auto token = std::make_shared<std::uint64_t>(job.msg.token);
  RequestPtr r = post(true, job.peer, with_source(job.tag, rank_) | kSingleCopyDoneBit, token.get(),
                      nullptr, sizeof *token);
  r->keep_alive = std::move(token);  // a failed send (a closed endpoint) is the sender's loss
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
