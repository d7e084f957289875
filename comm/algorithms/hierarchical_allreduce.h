// Hierarchical allreduce for ranks grouped into sites (comm/sites.h) that are joined by slow links:
// reduce-scatter inside each site (uncompressed, the site's fast network), an allreduce of each
// shard between sites (over the slow links: the only bytes that cross them, compressed with a
// codec or not), then an allgather inside each site. As in the two-level allreduces of
// Horovod's hierarchical mode and NCCL's tree/ring across nodes (Sergeev & Del Balso 2018), and
// BlueConnect (Cho et al. 2019), with the inter-site stage made lossy as in the compressed
// allreduce (compressed_ring_allreduce.h).
//
// Shards. The vector is cut into M shards (comm/transport/partition.h), M = the largest site's
// size. Rank l of a site of L ranks owns the contiguous shards [l*M/L, (l+1)*M/L) (every shard has
// exactly one owner per site; in the largest sites every rank owns one shard, in smaller ones
// some own several), so sites of unequal sizes line up shard by shard.
// 1. Reduce-scatter (ring_phases.h) inside the site, blocks = each rank's owned shards: rank l
//    ends with its shards reduced over the site, in the recv buffer (fp32 / the dtype's op; Avg
//    is summed and scaled once at the end).
// 2. For each owned shard j, an allreduce among its owners (one per site, in site order):
//    RingAllreduce (uncompressed, optionally pipelined) or CompressedRingAllreduce /
//    CompressedAllgatherAllreduce (codec spec; topk gathers). Shards run concurrently, each on
//    its own communicator id so their tags never meet. The compressed algorithms leave every
//    owner of a shard with the same bytes. Skipped when there is one site.
// 3. Avg: the owner scales its shards by 1/world. Allgather (ring) inside the site: every rank of
//    a site copies the same bytes, so all ranks of the job end bit-identical.
// Bytes per rank: inside a site 2 (L-1)/L of the vector (the ring's bound); between sites,
// 2 (S-1)/S of its owned shards (encoded when compressed) for S sites: the vector crosses the slow
// links L times less per rank than in a flat ring over all ranks, and every link of a site carries
// traffic at once. Latency terms: 2 (L-1) + 2 (S-1).
// Fingerprints: every stage exchanges the operation's fingerprint with its peers, and the world
// ring exchanges it too, so a rank that chose a flat algorithm fails with Mismatch, not a hang.
// Sizes: any count (0 included), any site sizes; buffers caller-owned, send may equal recv.
// Errors: as the stages' (PeerLost, Mismatch, Timeout; InvalidArgument for a NaN in a codec).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/collective_op.h"
#include "comm/compress/compression_state.h"
#include "comm/sites.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

// The groups a hierarchical allreduce runs over, as seen by one rank; built once per communicator.
struct Hierarchy {
  Sites sites;
  int shards = 1;       // M: the largest site's size
  int my_site = 0;      // this rank's site
  int site_rank = 0;    // its index within the site (the site's members in world-rank order)
  int first_shard = 0;  // the shards it owns: [first_shard, end_shard)
  int end_shard = 1;
  std::shared_ptr<const Group> site;  // this rank's site (comm id: site_comm_id)
  // Per owned shard (index j - first_shard): its owners in every site, in site order; this rank
  // is rank my_site. Comm id shard_comm_base + j. Empty with one site (nothing crosses sites).
  std::vector<std::shared_ptr<const Group>> shard_groups;
  // Elements of shard range [first, end) of every site rank, for a vector of `count` elements.
  [[nodiscard]] std::vector<std::size_t> site_block_counts(std::size_t count) const;
  [[nodiscard]] bool multi_site() const { return sites.count() > 1; }

  // Shards [l*M/L, (l+1)*M/L) of site rank l in a site of L ranks.
  static int shard_begin(int site_rank, int site_size, int shards) {
    return site_rank * shards / site_size;
  }
  // `world_rank`'s view. Ids: the site groups share site_comm_id (sites are disjoint), shard j's
  // group has shard_comm_base + j; all must be unused job-wide.
  static std::shared_ptr<const Hierarchy> build(Sites sites, int world_rank, int site_comm_id,
                                                int shard_comm_base);
};

// The inter-site stage: uncompressed (codec_spec empty; RingAllreduce, `segment_bytes` as its
// pipeline segment) or compressed (f32 Sum/Avg only) with error feedback under `key` (per shard).
struct InterSite {
  std::string codec_spec{};
  std::string key{};
  std::shared_ptr<CompressionState> state{};
  std::size_t segment_bytes = 0;
};

class HierarchicalAllreduce final : public CollectiveOp {
 public:
  // `world` is the communicator's group (its fingerprint exchange around the ring); `count`
  // elements of `dtype`; compressed stages require F32 and Sum or Avg. `fingerprint` goes to
  // every stage.
  HierarchicalAllreduce(OpContext world, std::shared_ptr<const Hierarchy> hierarchy,
                        const ReduceBuffers& b, InterSite inter, const Fingerprint& fingerprint);
  ~HierarchicalAllreduce() override;
  HierarchicalAllreduce(const HierarchicalAllreduce&) = delete;
  HierarchicalAllreduce& operator=(const HierarchicalAllreduce&) = delete;

  bool advance(Transport& t) override;
  void cancel(Transport& t) override;
  [[nodiscard]] std::string waiting_for() const override;

 private:
  class SiteRing;
  void start_inter();

  std::shared_ptr<const Hierarchy> h_;
  std::byte* out_;
  std::size_t count_;
  kernels::DType dtype_;
  kernels::ReduceOp op_;
  InterSite inter_;
  Fingerprint fingerprint_;
  std::unique_ptr<SiteRing> site_;
  std::vector<std::unique_ptr<CollectiveOp>> shard_ops_;  // one per owned shard (multi-site)
  std::vector<bool> shard_done_;
  enum class Stage : std::uint8_t { Start, ReduceScatter, Inter, Allgather, Done };
  Stage stage_ = Stage::Start;
};

}  // namespace strait::comm
