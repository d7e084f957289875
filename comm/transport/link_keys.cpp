#include "comm/transport/link_keys.h"

#include <string>
#include <string_view>

namespace strait::comm {

Key link_key(const SharedSecret& secret, const SessionNonce& sender_session,
             const SessionNonce& receiver_session, int sender, int receiver) {
  std::string label = "strait link v1";
  label.append(reinterpret_cast<const char*>(sender_session.data()), sender_session.size());
  label.append(reinterpret_cast<const char*>(receiver_session.data()), receiver_session.size());
  for (const int r : {sender, receiver}) {
    const auto u = static_cast<std::uint32_t>(r);
    for (int shift = 24; shift >= 0; shift -= 8) label.push_back(static_cast<char>(u >> shift));
  }
  return secret.derive(label);
}

}  // namespace strait::comm
