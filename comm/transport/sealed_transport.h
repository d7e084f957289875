// SealedTransport: a Transport decorator that seals the messages to some peers with an AEAD
// (comm/transport/sealed_message.h: XChaCha20-Poly1305 from libsodium, keyed per direction by
// comm/transport/link_keys.h) and opens them on arrival, for links nobody controls end to end.
//
// Which peers: STRAIT_ENCRYPT (or CommOptions::encrypt) = "sites" seals traffic to ranks of other
// sites (comm/sites.h) and leaves shared memory and the site's own network in the clear; "all"
// seals everything; "off" nothing. Sealed traffic needs the job's shared secret
// (comm/security/secret.h). The compressed inter-site allreduce hands its encoded bytes to the
// transport, so it pays the sealing on its small messages only.
//
// Cost: a send seals into a staging buffer (plaintext + 41 bytes) and a receive lands in one, then
// decrypts into the caller's buffer: one extra pass over the bytes each way, at the AEAD's speed.
// The inner transport is driven from progress() as before; a receive completes once it is opened.
// Errors: a message that fails to open fails its receive (TransportRequest::error) with a sentence
// naming the peer and the cause (altered, replayed, reordered, misdirected); the operation then
// fails as on any transport error. Thread-safety: as Transport (one thread at a time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/security/secret.h"
#include "comm/transport/sealed_message.h"
#include "comm/transport/transport.h"

namespace strait::comm {

class SealedTransport final : public Transport {
 public:
  // sealed_peers[p]: whether messages to and from world rank p are sealed (size() entries).
  // Publishes this rank's session nonce under `prefix` in the store and reads those of the sealed
  // peers (collective over those peers; waits up to timeout).
  SealedTransport(std::unique_ptr<Transport> inner, const SharedSecret& secret, Store& store,
                  const std::string& prefix, std::vector<bool> sealed_peers,
                  std::chrono::milliseconds timeout);
  ~SealedTransport() override;

  [[nodiscard]] int rank() const noexcept override { return inner_->rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_->size(); }
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t len) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t len) override;
  // Over clear links only: a sealed message must be opened with its sender's key.
  RequestPtr irecv_any(Tag tag, Tag mask, void* buf, std::size_t len) override;
  RequestPtr irecv_reduce(int peer, Tag tag, void* buf, std::size_t len,
                          const ReduceOnArrival& how) override;
  void withdraw(std::span<const RequestPtr> requests, std::chrono::milliseconds budget) override;
  bool progress() override;
  [[nodiscard]] int event_fd() const noexcept override { return inner_->event_fd(); }
  bool arm() override;
  [[nodiscard]] bool core_per_local_rank() const noexcept override {
    return inner_->core_per_local_rank();
  }
  [[nodiscard]] std::uint64_t single_copy_bytes() const noexcept override {
    return inner_->single_copy_bytes();
  }
  void check_peers() override { inner_->check_peers(); }
  [[nodiscard]] const std::string& peer_lost(int peer) const override {
    return inner_->peer_lost(peer);
  }

  [[nodiscard]] bool sealed(int peer) const { return sealed_[static_cast<std::size_t>(peer)]; }

 private:
  struct Link {
    Key send_key{};
    Key recv_key{};
    std::uint64_t next_seq = 0;
    sealed::ReplayWindow window;
  };
  // A sealed request: what the caller holds (outer), what the inner transport runs (inner).
  struct Op {
    RequestPtr outer;
    RequestPtr inner;
    int peer = 0;
    bool recv = false;
    void* dest = nullptr;  // receives: the caller's buffer
    std::size_t capacity = 0;
  };

  void finish(Op& op);
  std::shared_ptr<std::vector<std::uint8_t>> acquire(std::size_t bytes);

  std::unique_ptr<Transport> inner_;
  std::vector<bool> sealed_;
  std::vector<std::unique_ptr<Link>> links_;  // null for peers in the clear
  std::vector<Op> ops_;                       // sealed requests whose outer is pending
  std::vector<std::shared_ptr<std::vector<std::uint8_t>>> pool_;  // staging buffers, reused
};

enum class EncryptMode { Off, Sites, All };
// "sites", "all" or "off"; InvalidArgument naming source otherwise.
EncryptMode parse_encrypt_mode(const std::string& text, const std::string& source);

// What Communicator::create does: resolves the secret (secret_file, else STRAIT_SECRET_FILE) and
// the mode (encrypt, else STRAIT_ENCRYPT, else "sites" with a secret and "off" without), checks
// through the store that every rank has rank 0's mode, and a sealing rank that of each peer it
// seals (Mismatch naming both otherwise, on both sides), and wraps inner in a SealedTransport when
// some peer is to be sealed; returns inner unchanged otherwise.
// site_of: each world rank's site; empty when not known yet (every peer then counts as remote).
// InvalidArgument when sealing is asked for without a secret.
std::unique_ptr<Transport> seal_links(std::unique_ptr<Transport> inner,
                                      const std::optional<std::string>& secret_file,
                                      const std::string& encrypt, const std::vector<int>& site_of,
                                      Store& store, const std::string& prefix,
                                      std::chrono::milliseconds timeout);

}  // namespace strait::comm
