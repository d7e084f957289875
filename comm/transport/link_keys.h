// Link keys: the per-pair key schedule of sealed links (comm/transport/sealed_transport.h).
//
// Each rank draws a fresh 32-byte session nonce when its transport is created and publishes it in
// the job's (authenticated) store; the key that seals messages from rank s to rank d is
//   BLAKE2b-256(keyed with the shared secret's master key,
//               "strait link v1" | session_s | session_d | u32 s | u32 d)
// (SharedSecret::derive). One key per direction, so each key has one sender, whose message counter
// is the nonce: nonces never repeat under a key. Fresh sessions on both sides make every
// (re)created transport's keys new, even when the store or the secret is reused, so a message
// captured from another job or an earlier incarnation does not open.
// Thread-safety: pure function.
#pragma once

#include <array>
#include <cstdint>

#include "comm/security/secret.h"

namespace strait::comm {

using SessionNonce = std::array<std::uint8_t, 32>;

Key link_key(const SharedSecret& secret, const SessionNonce& sender_session,
             const SessionNonce& receiver_session, int sender, int receiver);

}  // namespace strait::comm
