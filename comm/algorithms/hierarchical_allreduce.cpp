#include "comm/algorithms/hierarchical_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "comm/algorithms/compressed_allgather_allreduce.h"
#include "comm/algorithms/compressed_ring_allreduce.h"
#include "comm/algorithms/ring_allreduce.h"
#include "comm/algorithms/ring_phases.h"
#include "comm/transport/partition.h"
#include "core/error.h"

namespace strait::comm {

std::vector<std::size_t> Hierarchy::site_block_counts(std::size_t count) const {
  const int size = site->size();
  std::vector<std::size_t> out;
  out.reserve(static_cast<std::size_t>(size));
  for (int l = 0; l < size; ++l) {
    const auto begin = static_cast<std::size_t>(shard_begin(l, size, shards));
    const auto end = static_cast<std::size_t>(shard_begin(l + 1, size, shards));
    out.push_back(parts(count, static_cast<std::size_t>(shards), begin, end).count);
  }
  return out;
}

std::shared_ptr<const Hierarchy> Hierarchy::build(Sites sites, int world_rank, int site_comm_id,
                                                  int shard_comm_base) {
  auto h = std::make_shared<Hierarchy>();
  const auto members = sites.members();
  h->sites = std::move(sites);
  for (const auto& m : members) h->shards = std::max(h->shards, static_cast<int>(m.size()));
  h->my_site = h->sites.site_of.at(static_cast<std::size_t>(world_rank));
  const auto& mine = members[static_cast<std::size_t>(h->my_site)];
  const auto site_size = static_cast<int>(mine.size());
  h->site_rank = static_cast<int>(std::find(mine.begin(), mine.end(), world_rank) - mine.begin());
  auto site = std::make_shared<Group>();
  site->comm_id = site_comm_id;
  site->rank = h->site_rank;
  site->world_ranks = mine;
  h->site = std::move(site);
  h->first_shard = shard_begin(h->site_rank, site_size, h->shards);
  h->end_shard = shard_begin(h->site_rank + 1, site_size, h->shards);
  for (int j = h->first_shard; j < h->end_shard && members.size() > 1; ++j) {
    auto g = std::make_shared<Group>();
    g->comm_id = shard_comm_base + j;
    g->rank = h->my_site;
    for (const auto& m : members) {
      // The owner of shard j in a site of L ranks: the l with shard_begin(l) <= j <
      // shard_begin(l+1).
      const auto size = static_cast<int>(m.size());
      int l = 0;
      while (shard_begin(l + 1, size, h->shards) <= j) ++l;
      g->world_ranks.push_back(m[static_cast<std::size_t>(l)]);
    }
    h->shard_groups.push_back(std::move(g));
  }
  return h;
}

// The site's ring: its reduce-scatter and, after the inter-site stage, its allgather, as one
// operation so that the fingerprint is exchanged once with each neighbour.
class HierarchicalAllreduce::SiteRing final : public RingOp {
 public:
  // `site`: the site's group; b.count: the site's blocks, `counts`.
  SiteRing(OpContext site, const ReduceBuffers& b, const std::vector<std::size_t>& counts)
      : RingOp(std::move(site)) {
    const std::size_t elem = kernels::dtype_size(b.dtype);
    auto* out = static_cast<std::byte*>(b.recv);
    rs_.blocks = Blocks::packed(counts);
    const auto r = static_cast<std::size_t>(group().rank);
    rs_.send = static_cast<const std::byte*>(b.send);
    rs_.own = out + rs_.blocks.offset[r] * elem;
    rs_.dtype = b.dtype;
    // Avg: summed here and between sites, scaled once by the shard's owner.
    rs_.op = b.op == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : b.op;
    std::vector<std::size_t> bytes(counts);
    for (auto& n : bytes) n *= elem;
    ag_.blocks = Blocks::packed(bytes);
    ag_.out = out;
    ag_.own_send = rs_.own;
    ag_.first_step = std::max(group().size() - 1, 0);
  }
  bool reduce_scatter(Transport& t) { return advance_phase(t, rs_); }
  bool allgather(Transport& t) { return advance_phase(t, ag_); }
  bool advance(Transport& t) override { return reduce_scatter(t) && allgather(t); }

 private:
  ReduceScatterPhase rs_;
  AllgatherPhase ag_;
};

HierarchicalAllreduce::HierarchicalAllreduce(OpContext world,
                                             std::shared_ptr<const Hierarchy> hierarchy,
                                             const ReduceBuffers& b, InterSite inter,
                                             const Fingerprint& fingerprint)
    : CollectiveOp(std::move(world)),
      h_(std::move(hierarchy)),
      out_(static_cast<std::byte*>(b.recv)),
      count_(b.count),
      dtype_(b.dtype),
      op_(b.op),
      inter_(std::move(inter)),
      fingerprint_(fingerprint) {
  if (!inter_.codec_spec.empty() && dtype_ != kernels::DType::F32) {
    throw Error(ErrorCode::Internal, "hierarchical allreduce: a codec needs f32");
  }
  set_fingerprint(fingerprint_);
  site_ = std::make_unique<SiteRing>(context().on(h_->site), b, h_->site_block_counts(count_));
  site_->set_fingerprint(fingerprint_);
}

HierarchicalAllreduce::~HierarchicalAllreduce() = default;

void HierarchicalAllreduce::start_inter() {
  if (!h_->multi_site()) return;
  const std::size_t elem = kernels::dtype_size(dtype_);
  const auto m = static_cast<std::size_t>(h_->shards);
  const bool sum = op_ == kernels::ReduceOp::Avg || op_ == kernels::ReduceOp::Sum;
  for (int j = h_->first_shard; j < h_->end_shard; ++j) {
    const Part p = part(count_, m, static_cast<std::size_t>(j));
    const auto& group = h_->shard_groups[static_cast<std::size_t>(j - h_->first_shard)];
    std::byte* at = out_ + p.offset * elem;
    std::unique_ptr<CollectiveOp> op;
    if (inter_.codec_spec.empty()) {
      op = std::make_unique<RingAllreduce>(
          context().on(group),
          ReduceBuffers{at, at, p.count, dtype_, sum ? kernels::ReduceOp::Sum : op_},
          inter_.segment_bytes);
    } else {
      auto* f = reinterpret_cast<float*>(at);
      // Error feedback per shard: each has its own residual of its own length.
      std::string key =
          inter_.key.empty() ? std::string() : fmt::format("{}#shard{}", inter_.key, j);
      CompressedBuffers shard{.send = f,
                              .recv = f,
                              .count = p.count,
                              .average = false,
                              .state = inter_.state,
                              .codec_spec = inter_.codec_spec,
                              .key = std::move(key)};
      if (inter_.codec_spec.starts_with("topk")) {
        op = std::make_unique<CompressedAllgatherAllreduce>(context().on(group), std::move(shard));
      } else {
        op = std::make_unique<CompressedRingAllreduce>(context().on(group), std::move(shard));
      }
    }
    op->set_fingerprint(fingerprint_);
    shard_ops_.push_back(std::move(op));
  }
  shard_done_.assign(shard_ops_.size(), false);
}

bool HierarchicalAllreduce::advance(Transport& t) {
  if (stage_ == Stage::Start) {
    // Ranks that chose a flat algorithm send their fingerprint to rank + 1 on this communicator:
    // answer it, so that they and this rank fail with Mismatch instead of waiting on each other.
    exchange_fingerprints_around_ring(t);
    stage_ = Stage::ReduceScatter;
  }
  const bool headers = all_done(t);
  if (stage_ == Stage::ReduceScatter) {
    if (!site_->reduce_scatter(t)) return false;
    start_inter();
    stage_ = Stage::Inter;
  }
  if (stage_ == Stage::Inter) {
    bool all = true;
    for (std::size_t i = 0; i < shard_ops_.size(); ++i) {
      if (!shard_done_[i]) shard_done_[i] = shard_ops_[i]->advance(t);
      all = all && shard_done_[i];
    }
    if (!all) return false;
    if (op_ == kernels::ReduceOp::Avg) {
      // The owner scales its shards once; the allgather copies the scaled bytes.
      const auto m = static_cast<std::size_t>(h_->shards);
      const Part p = parts(count_, m, static_cast<std::size_t>(h_->first_shard),
                           static_cast<std::size_t>(h_->end_shard));
      const int world = group().size();
      if (p.count != 0) {
        kernels::scale(dtype_, out_ + p.offset * kernels::dtype_size(dtype_), p.count, 1.0 / world);
      }
    }
    stage_ = Stage::Allgather;
  }
  if (stage_ == Stage::Allgather) {
    if (!site_->allgather(t)) return false;
    stage_ = Stage::Done;
  }
  return headers || all_done(t);
}

void HierarchicalAllreduce::cancel(Transport& t) {
  CollectiveOp::cancel(t);
  site_->cancel(t);
  for (auto& op : shard_ops_) op->cancel(t);
}

std::string HierarchicalAllreduce::waiting_for() const {
  switch (stage_) {
    case Stage::Start:
    case Stage::ReduceScatter: return "the reduce-scatter inside the site: " + site_->waiting_for();
    case Stage::Inter: {
      std::string out;
      for (std::size_t i = 0; i < shard_ops_.size(); ++i) {
        if (shard_done_[i]) continue;
        out += fmt::format("{}the inter-site allreduce of shard {}: {}", out.empty() ? "" : "; ",
                           static_cast<std::size_t>(h_->first_shard) + i,
                           shard_ops_[i]->waiting_for());
      }
      return out;
    }
    case Stage::Allgather: return "the allgather inside the site: " + site_->waiting_for();
    case Stage::Done: break;
  }
  return CollectiveOp::waiting_for();
}

}  // namespace strait::comm
