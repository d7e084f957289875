// Store authentication: the challenge-response by which a TcpStore client and server prove to each
// other that they hold the job's shared secret (comm/security/secret.h) before any key is read or
// written. Mutual, with fresh 32-byte nonces from both sides (libsodium's CSPRNG):
//
//   client -> server   Hello   magic, version, Nc
//   server -> client   HelloOk auth=1, Ns, server proof = HMAC(K, "strait store server" | v | Nc |
//   Ns) client -> server   Auth    client proof = HMAC(K, "strait store client" | v | Nc | Ns)
//   server -> client   AuthOk  (or Fatal "authentication failed", then close)
//
// K is derive("strait store auth v2") of the secret; HMAC is HMAC-SHA256 (crypto_auth_hmacsha256).
// A replayed transcript fails because the server's nonce differs on every connection; a reflected
// one (the server's proof, or a proof the server made on a second connection, sent back as the
// client's) fails because the two directions use different labels. The client checks the server's
// proof first, so a rank with the wrong secret learns it at once, from the server's proof, without
// telling an impostor anything it could use. Verification is constant-time.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "comm/security/secret.h"

namespace strait::comm::store_auth {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Proof = std::array<std::uint8_t, kProofBytes>;

Nonce fresh_nonce();
Key auth_key(const SharedSecret& secret);
Proof server_proof(const Key& key, std::uint16_t version, const Nonce& client, const Nonce& server);
Proof client_proof(const Key& key, std::uint16_t version, const Nonce& client, const Nonce& server);
// Constant-time comparison.
bool equal(const Proof& a, const Proof& b);

}  // namespace strait::comm::store_auth
