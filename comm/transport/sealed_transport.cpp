#include "comm/transport/sealed_transport.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/transport/link_keys.h"
#include "core/error.h"
#include "core/params.h"

namespace strait::comm {
namespace {

// The staging buffer of a sealed send or receive; kept alive by the inner request, so that the
// inner transport may finish with it even after the caller has given up.
using Staging = std::vector<std::uint8_t>;

// Staging buffers are reused: a fresh large allocation is a fresh mmap, whose page faults and
// (for UCX) memory registration cost more than sealing the bytes.
constexpr std::size_t kPoolSize = 32;

}  // namespace

SealedTransport::SealedTransport(std::unique_ptr<Transport> inner, const SharedSecret& secret,
                                 Store& store, const std::string& prefix,
                                 std::vector<bool> sealed_peers, std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), sealed_(std::move(sealed_peers)) {
  const int me = inner_->rank();
  const int n = inner_->size();
  if (static_cast<int>(sealed_.size()) != n) {
    throw Error(
        ErrorCode::InvalidArgument,
        fmt::format("SealedTransport: {} sealed-peer flags for a world of {}", sealed_.size(), n));
  }
  SessionNonce mine{};
  random_fill(mine);
  store.set(fmt::format("{}/session/{}", prefix, me), Bytes(mine.begin(), mine.end()));
  links_.resize(static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (!sealed_[static_cast<std::size_t>(p)]) continue;
    const Bytes theirs_bytes = store.get(fmt::format("{}/session/{}", prefix, p), timeout);
    if (theirs_bytes.size() != mine.size()) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("rank {}'s link session in the store has {} bytes, not {}: is every "
                              "rank running the same strait build?",
                              p, theirs_bytes.size(), mine.size()));
    }
    SessionNonce theirs{};
    std::copy(theirs_bytes.begin(), theirs_bytes.end(), theirs.begin());
    auto link = std::make_unique<Link>();
    link->send_key = link_key(secret, mine, theirs, me, p);
    link->recv_key = link_key(secret, theirs, mine, p, me);
    links_[static_cast<std::size_t>(p)] = std::move(link);
  }
}

SealedTransport::~SealedTransport() = default;

RequestPtr SealedTransport::isend(int peer, Tag tag, const void* buf, std::size_t len) {
  Link* link = links_.at(static_cast<std::size_t>(peer)).get();
  if (link == nullptr) return inner_->isend(peer, tag, buf, len);
  auto staging = acquire(len + sealed::kOverhead);
  const sealed::Header h{.sender = static_cast<std::uint32_t>(rank()),
                         .receiver = static_cast<std::uint32_t>(peer),
                         .tag = tag,
                         .seq = link->next_seq++};
  sealed::seal(link->send_key, h, {static_cast<const std::uint8_t*>(buf), len}, *staging);
  RequestPtr inner = inner_->isend(peer, tag, staging->data(), staging->size());
  inner->keep_alive = staging;
  auto outer = std::make_shared<TransportRequest>();
  ops_.push_back(Op{.outer = outer, .inner = std::move(inner), .peer = peer});
  finish(ops_.back());  // a send may complete at once
  if (!outer->pending()) ops_.pop_back();
  return outer;
}

RequestPtr SealedTransport::irecv(int peer, Tag tag, void* buf, std::size_t len) {
  if (links_.at(static_cast<std::size_t>(peer)) == nullptr) {
    return inner_->irecv(peer, tag, buf, len);
  }
  auto staging = acquire(len + sealed::kOverhead);
  RequestPtr inner = inner_->irecv(peer, tag, staging->data(), staging->size());
  inner->keep_alive = staging;
  auto outer = std::make_shared<TransportRequest>();
  ops_.push_back(Op{.outer = outer,
                    .inner = std::move(inner),
                    .peer = peer,
                    .recv = true,
                    .dest = buf,
                    .capacity = len});
  finish(ops_.back());
  if (!outer->pending()) ops_.pop_back();
  return outer;
}

RequestPtr SealedTransport::irecv_any(Tag tag, Tag mask, void* buf, std::size_t len) {
  for (const auto& link : links_) {
    if (link != nullptr) {
      auto req = std::make_shared<TransportRequest>();
      req->state = TransportRequest::State::Failed;
      req->error =
          "a receive from any source cannot open sealed messages (STRAIT_ENCRYPT): name the peer";
      return req;
    }
  }
  return inner_->irecv_any(tag, mask, buf, len);
}

RequestPtr SealedTransport::irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                                         const ReduceOnArrival& how) {
  // A clear link reduces as the inner transport can; a sealed message is opened whole first.
  if (links_.at(static_cast<std::size_t>(peer)) == nullptr) {
    return inner_->irecv_reduce(peer, tag, buf, len, how);
  }
  return irecv(peer, tag, buf, len);
}

std::shared_ptr<std::vector<std::uint8_t>> SealedTransport::acquire(std::size_t bytes) {
  std::shared_ptr<Staging>* best = nullptr;
  for (auto& b : pool_) {
    // Free when only the pool holds it (the inner transport has let go of its request).
    if (b.use_count() != 1 || b->capacity() < bytes) continue;
    if (best == nullptr || b->capacity() < (*best)->capacity()) best = &b;
  }
  if (best != nullptr) {
    (*best)->resize(bytes);
    return *best;
  }
  auto fresh = std::make_shared<Staging>(bytes);
  if (pool_.size() < kPoolSize) {
    pool_.push_back(fresh);
  } else {
    // Replace the smallest free buffer, so the pool drifts toward the sizes in use.
    for (auto& b : pool_) {
      if (b.use_count() == 1 && b->capacity() < bytes) {
        b = fresh;
        break;
      }
    }
  }
  return fresh;
}

// Moves a finished inner request's outcome to the outer one; opens received messages.
void SealedTransport::finish(Op& op) {
  const TransportRequest& in = *op.inner;
  TransportRequest& out = *op.outer;
  if (in.pending()) return;
  if (in.state == TransportRequest::State::Failed) {
    out.error = in.error;
    out.truncated = in.truncated;
    out.state = TransportRequest::State::Failed;
    return;
  }
  if (!op.recv) {
    out.state = TransportRequest::State::Done;
    return;
  }
  const auto& staging = *std::static_pointer_cast<const Staging>(in.keep_alive);
  const std::span<const std::uint8_t> message(staging.data(), std::min(in.bytes, staging.size()));
  try {
    Link& link = *links_[static_cast<std::size_t>(op.peer)];
    const sealed::Header h = sealed::open(link.recv_key, op.peer, rank(), message,
                                          {static_cast<std::uint8_t*>(op.dest), op.capacity});
    link.window.accept(op.peer, h.tag, h.seq);
    out.bytes = message.size() - sealed::kOverhead;
    out.state = TransportRequest::State::Done;
  } catch (const sealed::OpenError& e) {
    // The caller's buffer may hold decrypted bytes of a forged message only if open() succeeded,
    // i.e. for a replay or reordering: wipe them, so no unauthenticated data is ever seen.
    std::memset(op.dest, 0, std::min(op.capacity, message.size()));
    out.error = e.what();
    out.state = TransportRequest::State::Failed;
  }
}

bool SealedTransport::progress() {
  bool any = inner_->progress();
  for (Op& op : ops_) {
    finish(op);
    any = any || !op.outer->pending();
  }
  std::erase_if(ops_, [](const Op& op) { return !op.outer->pending(); });
  return any;
}

bool SealedTransport::arm() {
  if (std::any_of(ops_.begin(), ops_.end(), [](const Op& op) { return !op.inner->pending(); })) {
    return false;
  }
  return inner_->arm();
}

void SealedTransport::withdraw(std::span<const RequestPtr> requests,
                               std::chrono::milliseconds budget) {
  std::vector<RequestPtr> inner;
  inner.reserve(requests.size());
  for (const RequestPtr& r : requests) {
    const auto it =
        std::find_if(ops_.begin(), ops_.end(), [&](const Op& op) { return op.outer == r; });
    if (it == ops_.end()) {
      inner.push_back(r);  // a request in the clear, or one already finished
    } else {
      inner.push_back(it->inner);
      if (it->outer->pending()) {
        it->outer->error = "withdrawn";
        it->outer->state = TransportRequest::State::Failed;
      }
      ops_.erase(it);
    }
  }
  inner_->withdraw(inner, budget);
}

EncryptMode parse_encrypt_mode(const std::string& text, const std::string& source) {
  if (text == "off") return EncryptMode::Off;
  if (text == "sites") return EncryptMode::Sites;
  if (text == "all") return EncryptMode::All;
  throw Error(
      ErrorCode::InvalidArgument,
      fmt::format("{}={:?}: use sites (seal traffic between sites), all or off", source, text));
}

std::unique_ptr<Transport> seal_links(std::unique_ptr<Transport> inner,
                                      const std::optional<std::string>& secret_file,
                                      const std::string& encrypt, const std::vector<int>& site_of,
                                      Store& store, const std::string& prefix,
                                      std::chrono::milliseconds timeout) {
  std::optional<SharedSecret> secret;
  if (!secret_file || !secret_file->empty()) {
    secret = SharedSecret::resolve(secret_file.value_or(std::string()));
  }
  std::string text = encrypt;
  std::string source = "CommOptions::encrypt";
  if (text.empty()) {
    text = params::text("STRAIT_ENCRYPT").value_or(secret ? "sites" : "off");
    source = "STRAIT_ENCRYPT";
  }
  const EncryptMode mode = parse_encrypt_mode(text, source);
  const int me = inner->rank();
  const int n = inner->size();
  // Every rank must seal the same links: one that does not would read envelopes as data.
  // Each rank compares with rank 0, and a sealing rank with every peer it seals (below), so that a
  // sealing rank fails with Mismatch too instead of waiting for a session that never comes.
  store.set(fmt::format("{}/mode/{}", prefix, me), text);
  const auto check_mode = [&](int peer) {
    const Bytes theirs = store.get(fmt::format("{}/mode/{}", prefix, peer), timeout);
    const std::string their_text(theirs.begin(), theirs.end());
    if (their_text != text) {
      throw Error(ErrorCode::Mismatch,
                  fmt::format("STRAIT_ENCRYPT differs between ranks: rank {} has {:?}, rank {} "
                              "{:?} (a secret on some ranks only changes the default too): set "
                              "the same STRAIT_ENCRYPT and STRAIT_SECRET_FILE on every rank",
                              me, text, peer, their_text));
    }
  };
  if (me != 0) check_mode(0);
  if (mode == EncryptMode::Off) return inner;
  if (!secret) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}={} asks for sealed links, which are keyed from the job's shared "
                            "secret: set STRAIT_SECRET_FILE on every rank (or STRAIT_ENCRYPT=off)",
                            source, text));
  }
  std::vector<bool> sealed(static_cast<std::size_t>(n), false);
  bool any = false;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const bool remote =
        mode == EncryptMode::All || site_of.empty() ||
        site_of.at(static_cast<std::size_t>(p)) != site_of.at(static_cast<std::size_t>(me));
    sealed[static_cast<std::size_t>(p)] = remote;
    any = any || remote;
  }
  if (!any) return inner;
  for (int p = 0; p < n; ++p) {
    if (sealed[static_cast<std::size_t>(p)] && p != 0) check_mode(p);
  }
  return std::make_unique<SealedTransport>(std::move(inner), *secret, store, prefix,
                                           std::move(sealed), timeout);
}

}  // namespace strait::comm
