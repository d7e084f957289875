#include "train/quorum_sync.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace strait::train {

namespace {

constexpr std::uint64_t kUpTag = 25001;    // replica -> leader: header + p
constexpr std::uint64_t kDownTag = 25002;  // leader -> replica: header + g
constexpr std::size_t kHeader = 2 * sizeof(std::int64_t);

using Clock = std::chrono::steady_clock;

}  // namespace

QuorumSync::QuorumSync(comm::Communicator& data, std::span<const float> initial,
                       QuorumOptions options)
    : data_(data),
      options_(options),
      n_(initial.size()),
      start_(initial.begin(), initial.end()),
      global_(initial.begin(), initial.end()),
      momentum_(initial.size(), 0.0f) {
  if (options_.quorum < 1 || options_.quorum > data_.size()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--quorum {} must be between 1 and the {} replicas", options_.quorum,
                            data_.size()));
  }
  if (!(options_.grace_s >= 0)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("--grace {} must be >= 0 seconds", options_.grace_s));
  }
  if (data_.rank() == 0) {
    const auto peers = static_cast<std::size_t>(data_.size());
    up_.assign(peers, std::vector<std::byte>(kHeader + n_ * sizeof(float)));
    receives_.resize(peers);
    lost_.assign(peers, false);
    for (int p = 1; p < data_.size(); ++p) post_receive(p);
  }
}

QuorumSync::~QuorumSync() {
  // Receives still posted may complete into up_ while it goes: cancel them by aborting nothing;
  // the communicator outlives this only in tests, where every peer has stopped (stop round).
  for (auto& w : receives_) {
    if (w.valid() && !w.test()) data_.abort();
  }
}

void QuorumSync::post_receive(int peer) {
  auto& buf = up_[static_cast<std::size_t>(peer)];
  receives_[static_cast<std::size_t>(peer)] =
      data_.irecv(buf.data(), buf.size(), peer, kUpTag, comm::DeadlineStart::AtWait);
}

QuorumSync::Round QuorumSync::end_round(std::span<float> params, double tokens, bool stop) {
  if (params.size() != n_) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("quorum sync: {} parameters given for {}", params.size(), n_));
  }
  if (data_.rank() == 0) return lead(params, tokens, stop);
  std::vector<std::byte> up(kHeader + n_ * sizeof(float));
  std::memcpy(up.data(), &tokens, sizeof(double));
  auto* p = reinterpret_cast<float*>(up.data() + kHeader);
  for (std::size_t i = 0; i < n_; ++i) p[i] = start_[i] - params[i];
  const comm::Work sent = data_.isend(up.data(), up.size(), 0, kUpTag);
  std::vector<std::byte> down(kHeader + n_ * sizeof(float));
  data_.recv(down.data(), down.size(), 0, kDownTag);  // within the communicator's timeout
  sent.wait();
  Round r;
  std::int64_t header[2];
  std::memcpy(header, down.data(), kHeader);
  r.version = version_ = header[0];
  r.stop = header[1] != 0;
  std::memcpy(params.data(), down.data() + kHeader, n_ * sizeof(float));
  std::copy(params.begin(), params.end(), start_.begin());
  return r;
}

QuorumSync::Round QuorumSync::lead(std::span<float> params, double tokens, bool stop) {
  const auto peers = static_cast<std::size_t>(data_.size());
  std::vector<double> sum(n_, 0.0);
  Round r;
  const auto take = [&](int who, double t, const float* p) {
    for (std::size_t i = 0; i < n_; ++i) sum[i] += t * static_cast<double>(p[i]);
    r.tokens += t;
    r.included.push_back(who);
  };
  std::vector<float> own(n_);
  for (std::size_t i = 0; i < n_; ++i) own[i] = start_[i] - params[i];
  take(0, tokens, own.data());
  const auto begin = Clock::now();
  const auto grace = std::chrono::duration<double>(options_.grace_s);
  const auto timeout = data_.timeout();
  std::vector<bool> in(peers, false);
  in[0] = true;
  for (;;) {
    bool progress = false;
    for (std::size_t p = 1; p < peers; ++p) {
      if (in[p] || lost_[p] || !receives_[p].test()) continue;
      if (receives_[p].error()) {  // the peer is gone: it is in no round from now on
        lost_[p] = true;
        r.lost.push_back(static_cast<int>(p));
        continue;
      }
      double t = 0;
      std::memcpy(&t, up_[p].data(), sizeof(double));
      take(static_cast<int>(p), t, reinterpret_cast<const float*>(up_[p].data() + kHeader));
      in[p] = true;
      progress = true;
    }
    const auto waited = Clock::now() - begin;
    const auto count = static_cast<int>(std::count(in.begin(), in.end(), true));
    const auto live = static_cast<int>(peers - std::count(lost_.begin(), lost_.end(), true));
    const bool enough = stop ? count == live : count >= options_.quorum && waited >= grace;
    if (enough) break;
    if (waited > timeout) {
      std::vector<int> missing;
      for (std::size_t p = 1; p < peers; ++p) {
        if (!in[p] && !lost_[p]) missing.push_back(static_cast<int>(p));
      }
      if (!stop) {
        throw Error(ErrorCode::Timeout,
                    fmt::format("quorum round {}: {} of --quorum {} replicas sent within {} ms; "
                                "waiting for replicas {}",
                                version_, count, options_.quorum, timeout.count(),
                                fmt::join(missing, ",")));
      }
      for (const int p : missing) {  // the last round: silent replicas are declared lost
        lost_[static_cast<std::size_t>(p)] = true;
        r.lost.push_back(p);
      }
      break;
    }
    if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Token-weighted average and the outer Nesterov step, in the order the leader took them.
  const auto mu = static_cast<float>(options_.momentum);
  const auto lr = static_cast<float>(options_.lr);
  for (std::size_t i = 0; i < n_; ++i) {
    const auto d = r.tokens > 0 ? static_cast<float>(sum[i] / r.tokens) : 0.0f;
    momentum_[i] = mu * momentum_[i] + d;
    global_[i] -= lr * (d + mu * momentum_[i]);
  }
  r.version = ++version_;
  r.stop = stop;
  std::vector<std::byte> down(kHeader + n_ * sizeof(float));
  const std::int64_t header[2] = {version_, stop ? 1 : 0};
  std::memcpy(down.data(), header, kHeader);
  std::memcpy(down.data() + kHeader, global_.data(), n_ * sizeof(float));
  std::vector<comm::Work> replies;
  for (std::size_t p = 1; p < peers; ++p) {
    if (!in[p]) continue;
    replies.push_back(data_.isend(down.data(), down.size(), static_cast<int>(p), kDownTag));
    if (!stop) post_receive(static_cast<int>(p));
  }
  for (const auto& w : replies) w.wait();
  std::copy(global_.begin(), global_.end(), params.begin());
  std::copy(global_.begin(), global_.end(), start_.begin());
  std::sort(r.included.begin(), r.included.end());
  return r;
}

}  // namespace strait::train
