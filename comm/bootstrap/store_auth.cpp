#include "comm/bootstrap/store_auth.h"

#include <sodium.h>

#include <string_view>

namespace strait::comm::store_auth {
namespace {

// Both labels have the same length, so no input of one direction parses as one of the other.
constexpr std::string_view kServerLabel = "strait store server";
constexpr std::string_view kClientLabel = "strait store client";
static_assert(kServerLabel.size() == kClientLabel.size());

Proof mac(const Key& key, std::string_view label, std::uint16_t version, const Nonce& client,
          const Nonce& server) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label.data()),
                                label.size());
  const std::array<std::uint8_t, 2> v{static_cast<std::uint8_t>(version >> 8U),
                                      static_cast<std::uint8_t>(version)};
  crypto_auth_hmacsha256_update(&st, v.data(), v.size());
  crypto_auth_hmacsha256_update(&st, client.data(), client.size());
  crypto_auth_hmacsha256_update(&st, server.data(), server.size());
  Proof out{};
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof st);
  return out;
}

}  // namespace

Nonce fresh_nonce() {
  Nonce n{};
  random_fill(n);
  return n;
}

Key auth_key(const SharedSecret& secret) {
  return secret.derive("strait store auth v2");
}

Proof server_proof(const Key& key, std::uint16_t version, const Nonce& client,
                   const Nonce& server) {
  return mac(key, kServerLabel, version, client, server);
}

Proof client_proof(const Key& key, std::uint16_t version, const Nonce& client,
                   const Nonce& server) {
  return mac(key, kClientLabel, version, client, server);
}

bool equal(const Proof& a, const Proof& b) {
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace strait::comm::store_auth
