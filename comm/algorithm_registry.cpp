#include "comm/algorithm_registry.h"

#include <fmt/format.h>

#include <array>
#include <vector>

#include "comm/algorithms/binomial_broadcast.h"
#include "comm/algorithms/binomial_gather.h"
#include "comm/algorithms/binomial_reduce.h"
#include "comm/algorithms/binomial_scatter.h"
#include "comm/algorithms/compressed_allgather_allreduce.h"
#include "comm/algorithms/compressed_ring_allreduce.h"
#include "comm/algorithms/direct_allreduce.h"
#include "comm/algorithms/dissemination_barrier.h"
#include "comm/algorithms/hierarchical_allreduce.h"
#include "comm/algorithms/local_copy.h"
#include "comm/algorithms/mailbox_allreduce.h"
#include "comm/algorithms/pairwise_alltoall.h"
#include "comm/algorithms/point_to_point.h"
#include "comm/algorithms/powersgd_allreduce.h"
#include "comm/algorithms/rabenseifner_allreduce.h"
#include "comm/algorithms/recursive_doubling_allreduce.h"
#include "comm/algorithms/ring_allgather.h"
#include "comm/algorithms/ring_allreduce.h"
#include "comm/algorithms/ring_reduce_scatter.h"
#include "core/error.h"

namespace strait::comm {
namespace {

using Op = std::unique_ptr<CollectiveOp>;
using Ctx = BuildContext;

// A rank's blocks in elements: `counts` for the v-forms, else `count` for every rank.
std::vector<std::size_t> blocks(const Ctx& c) {
  if (!c.args.counts.empty()) return {c.args.counts.begin(), c.args.counts.end()};
  return std::vector<std::size_t>(static_cast<std::size_t>(c.context.group->size()), c.args.count);
}

std::vector<std::size_t> in_bytes(std::vector<std::size_t> counts, kernels::DType dtype) {
  for (auto& n : counts) n *= kernels::dtype_size(dtype);
  return counts;
}

bool is_root(const Ctx& c) {
  return c.context.group->rank == c.args.root;
}

std::size_t bytes_of(const CollectiveArgs& a) {
  return a.count * kernels::dtype_size(a.dtype);
}

ReduceBuffers reduction(const Ctx& c) {
  const auto& a = c.args;
  return {.send = a.send, .recv = a.recv, .count = a.count, .dtype = a.dtype, .op = a.op};
}

CompressedBuffers compressed(const Ctx& c) {
  return {.send = static_cast<const float*>(c.args.send),
          .recv = static_cast<float*>(c.args.recv),
          .count = c.args.count,
          .average = c.args.op == kernels::ReduceOp::Avg,
          .state = c.compression,
          .codec_spec = c.codec->spec,
          .key = c.codec->key};
}

// The allreduces built from their context and buffers alone.
template <class Algorithm>
Op allreduce(const Ctx& c) {
  return std::make_unique<Algorithm>(c.context, reduction(c));
}
template <class Algorithm>
Op compressed_allreduce(const Ctx& c) {
  return std::make_unique<Algorithm>(c.context, compressed(c));
}

Op point_to_point(const Ctx& c) {
  const auto& a = c.args;
  const bool send = a.kind == CollectiveArgs::Kind::Send;
  auto op = std::make_unique<PointToPoint>(
      OpContext{c.context.group, 0, send ? c.context.bytes_sent : nullptr},
      send ? PointToPoint::Kind::Send : PointToPoint::Kind::Recv, a.root, a.tag,
      send ? const_cast<void*>(a.send) : a.recv, a.count);
  if (!send && a.root == CollectiveArgs::kAnySource) op->report_source_to(a.source);
  return op;
}

Op hierarchical_allreduce(const Ctx& c, InterSite inter) {
  return std::make_unique<HierarchicalAllreduce>(c.context, c.hierarchy, reduction(c),
                                                 std::move(inter), c.fingerprint);
}

// Broadcast has one buffer (recv); the others count elements per block. A buffer the
// communicator ignores on this rank (a non-root's recv of reduce and gather, send of scatter) is
// passed as null, so that nothing looks it up.
template <LocalCopy::Kind kind>
Op local_copy(const Ctx& c) {
  using K = LocalCopy::Kind;
  const auto& a = c.args;
  const bool root = is_root(c);
  const void* send = kind == K::Broadcast ? a.recv : a.send;
  if (kind == K::Scatter && !root) send = nullptr;
  void* recv = (kind == K::Reduce || kind == K::Gather) && !root ? nullptr : a.recv;
  return std::make_unique<LocalCopy>(c.context, kind,
                                     LocalCopy::Buffers{.send = send,
                                                        .recv = recv,
                                                        .count = a.count,
                                                        .dtype = a.dtype,
                                                        .op = a.op,
                                                        .root = a.root,
                                                        .counts = a.counts,
                                                        .recv_counts = a.recv_counts});
}

// The constructor of each row of selection.cpp's table, in the same order (build_algorithm checks
// the names).
struct Builder {
  std::string_view collective;
  std::string_view name;
  Op (*build)(const Ctx&);
};
constexpr std::array kBuilders = {
    Builder{"allreduce", "ring",
            [](const Ctx& c) -> Op {
              return std::make_unique<RingAllreduce>(c.context, reduction(c),
                                                     c.params.segment_bytes);
            }},
    Builder{"allreduce", "recursive_doubling", allreduce<RecursiveDoublingAllreduce>},
    Builder{"allreduce", "rabenseifner", allreduce<RabenseifnerAllreduce>},
    // comm/algorithms/hierarchical_allreduce.h; seg= pipelines its inter-site ring.
    Builder{"allreduce", "hierarchical",
            [](const Ctx& c) -> Op {
              return hierarchical_allreduce(c, InterSite{.segment_bytes = c.params.segment_bytes});
            }},
    Builder{"allreduce", "direct", allreduce<DirectAllreduce>},
    Builder{"allreduce", "mailbox", allreduce<MailboxAllreduce>},
    Builder{"allreduce_compressed", "ring", compressed_allreduce<CompressedRingAllreduce>},
    Builder{"allreduce_compressed", "allgather",
            compressed_allreduce<CompressedAllgatherAllreduce>},
    Builder{"allreduce_compressed", "powersgd",
            [](const Ctx& c) -> Op {
              return std::make_unique<PowerSgdAllreduce>(c.context, compressed(c),
                                                         *c.codec->powersgd, c.codec->plan);
            }},
    // Compressed only between sites; which ranks share a site is not in the spec.
    Builder{"allreduce_compressed", "hierarchical",
            [](const Ctx& c) -> Op {
              return hierarchical_allreduce(
                  c, InterSite{
                         .codec_spec = c.codec->spec, .key = c.codec->key, .state = c.compression});
            }},
    Builder{"broadcast", "binomial",
            [](const Ctx& c) -> Op {
              return std::make_unique<BinomialBroadcast>(c.context, c.args.recv, bytes_of(c.args),
                                                         c.args.root);
            }},
    Builder{"reduce", "binomial",
            [](const Ctx& c) -> Op {
              ReduceBuffers b = reduction(c);
              if (!is_root(c)) b.recv = nullptr;
              return std::make_unique<BinomialReduce>(c.context, b, c.args.root);
            }},
    Builder{"gather", "binomial",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              return std::make_unique<BinomialGather>(
                  c.context, a.send, is_root(c) ? a.recv : nullptr, bytes_of(a), a.root);
            }},
    Builder{"scatter", "binomial",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              return std::make_unique<BinomialScatter>(c.context, is_root(c) ? a.send : nullptr,
                                                       a.recv, bytes_of(a), a.root);
            }},
    Builder{"allgather", "ring",
            [](const Ctx& c) -> Op {
              return std::make_unique<RingAllgather>(c.context, c.args.send, c.args.recv,
                                                     bytes_of(c.args));
            }},
    Builder{"allgather_v", "ring",
            [](const Ctx& c) -> Op {
              const auto bytes = in_bytes(blocks(c), c.args.dtype);
              return std::make_unique<RingAllgather>(c.context, c.args.send, c.args.recv,
                                                     std::span<const std::size_t>(bytes));
            }},
    Builder{"reduce_scatter", "ring",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              const auto counts = blocks(c);
              return std::make_unique<RingReduceScatter>(c.context, a.send, a.recv, counts, a.dtype,
                                                         a.op);
            }},
    Builder{"reduce_scatter_v", "ring",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              return std::make_unique<RingReduceScatter>(c.context, a.send, a.recv, a.counts,
                                                         a.dtype, a.op);
            }},
    Builder{"alltoall", "pairwise",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              const auto bytes = in_bytes(blocks(c), a.dtype);
              return std::make_unique<PairwiseAlltoall>(c.context, a.send, bytes, a.recv, bytes);
            }},
    Builder{"alltoall_v", "pairwise",
            [](const Ctx& c) -> Op {
              const auto& a = c.args;
              const auto sb = in_bytes({a.counts.begin(), a.counts.end()}, a.dtype);
              const auto rb = in_bytes({a.recv_counts.begin(), a.recv_counts.end()}, a.dtype);
              return std::make_unique<PairwiseAlltoall>(c.context, a.send, sb, a.recv, rb);
            }},
    Builder{"barrier", "dissemination",
            [](const Ctx& c) -> Op { return std::make_unique<DisseminationBarrier>(c.context); }},
    Builder{"send", "point_to_point", point_to_point},
    Builder{"recv", "point_to_point", point_to_point},
    Builder{"broadcast", "single_copy", local_copy<LocalCopy::Kind::Broadcast>},
    Builder{"allgather", "single_copy", local_copy<LocalCopy::Kind::Allgather>},
    Builder{"reduce_scatter", "single_copy", local_copy<LocalCopy::Kind::ReduceScatter>},
    Builder{"alltoall", "single_copy", local_copy<LocalCopy::Kind::Alltoall>},
    Builder{"allreduce", "single_copy", local_copy<LocalCopy::Kind::Allreduce>},
    Builder{"reduce", "single_copy", local_copy<LocalCopy::Kind::Reduce>},
    Builder{"gather", "single_copy", local_copy<LocalCopy::Kind::Gather>},
    Builder{"scatter", "single_copy", local_copy<LocalCopy::Kind::Scatter>},
    Builder{"allgather_v", "single_copy", local_copy<LocalCopy::Kind::AllgatherV>},
    Builder{"reduce_scatter_v", "single_copy", local_copy<LocalCopy::Kind::ReduceScatterV>},
    Builder{"alltoall_v", "single_copy", local_copy<LocalCopy::Kind::AlltoallV>},
};

const AlgorithmInfo& row(std::string_view collective, std::string_view name) {
  const AlgorithmInfo* info = find_algorithm(collective, name);
  if (info == nullptr) {
    throw Error(ErrorCode::Internal,
                fmt::format("no {} algorithm '{}' is registered", collective, name));
  }
  return *info;
}

}  // namespace

bool has_constructor(const AlgorithmInfo& info) noexcept {
  const auto rows = registered_algorithms();
  const auto i = static_cast<std::size_t>(&info - rows.data());
  return rows.size() == kBuilders.size() && i < rows.size() &&
         kBuilders[i].collective == info.collective && kBuilders[i].name == info.name;
}

std::unique_ptr<CollectiveOp> build_algorithm(const AlgorithmInfo& info, const BuildContext& ctx) {
  if (!has_constructor(info)) {
    throw Error(ErrorCode::Internal,
                fmt::format("the registry has no constructor for {} algorithm '{}' (the tables of "
                            "selection.cpp and registry.cpp differ)",
                            info.collective, info.name));
  }
  return kBuilders[static_cast<std::size_t>(&info - registered_algorithms().data())].build(ctx);
}

const AlgorithmInfo& choose_compressed(const CodecChoice& codec, bool multi_site) {
  static const AlgorithmInfo& kPowerSgd = row("allreduce_compressed", "powersgd");
  static const AlgorithmInfo& kHierarchical = row("allreduce_compressed", "hierarchical");
  static const AlgorithmInfo& kAllgather = row("allreduce_compressed", "allgather");
  static const AlgorithmInfo& kRing = row("allreduce_compressed", "ring");
  if (codec.powersgd) return kPowerSgd;
  if (multi_site) return kHierarchical;
  // Sparse encodings are gathered, not re-encoded at every hop (a sum of top-k vectors is denser).
  if (codec.spec.starts_with("topk") || codec.spec.starts_with("sparseloco")) return kAllgather;
  return kRing;
}

std::uint64_t sequence_numbers(const AlgorithmInfo& info) {
  static const AlgorithmInfo& kPowerSgd = row("allreduce_compressed", "powersgd");
  return &info == &kPowerSgd ? PowerSgdAllreduce::kSeqs : 1;
}

}  // namespace strait::comm
