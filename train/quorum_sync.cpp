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
    held_.assign(peers, false);
    sum_.assign(n_, 0.0);
    down_.resize(kHeader + n_ * sizeof(float));
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
  std::memcpy(up.data() + sizeof(double), &version_, sizeof(std::int64_t));  // p's base
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

bool QuorumSync::take(std::size_t p) {
  if (held_[p] || lost_[p] || !receives_[p].test()) return false;
  if (receives_[p].error()) {  // the peer is gone: it is in no round from now on
    lost_[p] = true;
    pending_lost_.push_back(static_cast<int>(p));
    return false;
  }
  double t = 0;
  std::int64_t base = 0;
  std::memcpy(&t, up_[p].data(), sizeof(double));
  std::memcpy(&base, up_[p].data() + sizeof(double), sizeof(std::int64_t));
  // Staleness-aware: a p computed from weights `stale` closes older than the newest counts
  // 1 / (1 + stale) of its tokens (it was answered early, or it is late again).
  const auto stale = static_cast<double>(std::max<std::int64_t>(0, version_ - base));
  const double w = t / (1.0 + stale);
  const auto* x = reinterpret_cast<const float*>(up_[p].data() + kHeader);
  for (std::size_t i = 0; i < n_; ++i) sum_[i] += w * static_cast<double>(x[i]);
  pending_tokens_ += w;
  tokens_in_ += t;
  pending_in_.push_back(static_cast<int>(p));
  held_[p] = true;
  return true;
}

void QuorumSync::reply(std::size_t p, bool stop, std::vector<comm::Work>& sends) {
  const std::int64_t header[2] = {version_, stop ? 1 : 0};
  std::memcpy(down_.data(), header, kHeader);
  std::memcpy(down_.data() + kHeader, global_.data(), n_ * sizeof(float));
  sends.push_back(data_.isend(down_.data(), down_.size(), static_cast<int>(p), kDownTag));
  held_[p] = false;
  if (!stop) post_receive(static_cast<int>(p));
}

void QuorumSync::poll(int steps_left, int steps_per_round) {
  if (data_.rank() != 0) return;
  std::vector<comm::Work> sends;
  for (std::size_t p = 1; p < held_.size(); ++p) {
    if (take(p) && 2 * steps_left > steps_per_round) reply(p, false, sends);
    for (const auto& w : sends) w.wait();  // down_ is reused
    sends.clear();
  }
}

QuorumSync::Round QuorumSync::lead(std::span<float> params, double tokens, bool stop) {
  const auto peers = static_cast<std::size_t>(data_.size());
  std::vector<float> own(n_);
  for (std::size_t i = 0; i < n_; ++i) own[i] = start_[i] - params[i];
  for (std::size_t i = 0; i < n_; ++i) sum_[i] += tokens * static_cast<double>(own[i]);
  pending_tokens_ += tokens;
  pending_in_.push_back(0);
  const auto begin = Clock::now();
  const auto grace = std::chrono::duration<double>(options_.grace_s);
  const auto timeout = data_.timeout();
  // Replicas whose message is in this round (held) or that were answered early since the last
  // close count towards the quorum; at stop, every live replica must be held.
  const auto count = [&] {
    std::vector<bool> seen(peers, false);
    for (const int p : pending_in_) seen[static_cast<std::size_t>(p)] = true;
    return static_cast<int>(std::count(seen.begin(), seen.end(), true));
  };
  for (;;) {
    bool progress = false;
    for (std::size_t p = 1; p < peers; ++p) progress = take(p) || progress;
    const auto waited = Clock::now() - begin;
    int held = 1;
    int live = 1;
    for (std::size_t p = 1; p < peers; ++p) {
      held += held_[p] ? 1 : 0;
      live += lost_[p] ? 0 : 1;
    }
    const bool enough = stop ? held == live : count() >= options_.quorum && waited >= grace;
    if (enough) break;
    // The stop round gives a silent replica half the timeout: the others wait for this round's
    // reply within the communicator's timeout, counted from before this rank began waiting, so
    // declaring the silent one lost only at the full timeout raced their deadlines (a Timeout
    // on a live replica, about one run in six of the dying-replica test).
    if (waited > (stop ? timeout / 2 : timeout)) {
      std::vector<int> missing;
      for (std::size_t p = 1; p < peers; ++p) {
        if (!held_[p] && !lost_[p]) missing.push_back(static_cast<int>(p));
      }
      if (!stop) {
        throw Error(ErrorCode::Timeout,
                    fmt::format("quorum round {}: {} of --quorum {} replicas sent within {} ms; "
                                "waiting for replicas {}",
                                version_ + 1, count(), options_.quorum, timeout.count(),
                                fmt::join(missing, ",")));
      }
      for (const int p : missing) {  // the last round: silent replicas are declared lost
        lost_[static_cast<std::size_t>(p)] = true;
        pending_lost_.push_back(p);
      }
      break;
    }
    if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Token-weighted average and the outer Nesterov step.
  const auto mu = static_cast<float>(options_.momentum);
  const auto lr = static_cast<float>(options_.lr);
  for (std::size_t i = 0; i < n_; ++i) {
    const auto d = pending_tokens_ > 0 ? static_cast<float>(sum_[i] / pending_tokens_) : 0.0f;
    momentum_[i] = mu * momentum_[i] + d;
    global_[i] -= lr * (d + mu * momentum_[i]);
  }
  Round r;
  r.version = ++version_;
  r.stop = stop;
  r.tokens = tokens_in_ + tokens;
  r.included = pending_in_;
  r.lost = pending_lost_;
  std::sort(r.included.begin(), r.included.end());
  std::vector<comm::Work> sends;
  for (std::size_t p = 1; p < peers; ++p) {
    if (held_[p]) reply(p, stop, sends);
    for (const auto& w : sends) w.wait();
    sends.clear();
  }
  std::fill(sum_.begin(), sum_.end(), 0.0);
  pending_tokens_ = 0;
  tokens_in_ = 0;
  pending_in_.clear();
  pending_lost_.clear();
  std::copy(global_.begin(), global_.end(), params.begin());
  std::copy(global_.begin(), global_.end(), start_.begin());
  return r;
}

}  // namespace strait::train
