#include "offload/numa.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "offload/errno_text.h"

namespace strait::offload::numa {
namespace {

struct TopologyFree {
  void operator()(hwloc_topology_t t) const noexcept { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyFree>;

struct BitmapFree {
  void operator()(hwloc_bitmap_t b) const noexcept { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapFree>;

Bitmap make_bitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  if (!b) throw Error(ErrorCode::Io, "offload: no memory for an hwloc bitmap");
  return b;
}

struct Topology {
  TopologyPtr topo;
  std::string error;  // why the topology could not be read; empty when topo is set
};

Topology load() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    return {nullptr, fmt::format("hwloc_topology_init: {}", errno_text(errno))};
  }
  TopologyPtr topo(raw);
  // PCI devices (all of them, so any bus id resolves) for Placement::pci; bridges and OS devices
  // only where hwloc finds them useful.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(raw) != 0) {
    return {nullptr, fmt::format("hwloc_topology_load: {}", errno_text(errno))};
  }
  return {std::move(topo), {}};
}

// The process's topology, loaded on first use. hwloc allows concurrent read-only queries.
hwloc_topology_t topology() {
  static const Topology t = load();
  if (!t.topo) {
    throw Error(ErrorCode::Unavailable,
                fmt::format("offload: cannot read this machine's NUMA topology ({}); use "
                            "Placement::any() for unbound buffers",
                            t.error));
  }
  return t.topo.get();
}

std::optional<unsigned> first_node(hwloc_const_nodeset_t nodeset) {
  const int first = hwloc_bitmap_first(nodeset);
  if (first < 0) return std::nullopt;
  return static_cast<unsigned>(first);
}

}  // namespace

std::vector<unsigned> nodes() {
  hwloc_topology_t topo = topology();
  std::vector<unsigned> out;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    out.push_back(n->os_index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_node(unsigned node) {
  if (hwloc_get_numanode_obj_by_os_index(topology(), node) != nullptr) return;
  throw Error(ErrorCode::InvalidArgument,
              fmt::format("offload: NUMA node {} does not exist; this machine has node(s) {} "
                          "(hwloc): pick one of them, or use Placement::any()",
                          node, fmt::join(nodes(), ", ")));
}

std::optional<unsigned> calling_thread_node() {
  hwloc_topology_t topo = topology();
  const Bitmap cpus = make_bitmap();
  if (hwloc_get_last_cpu_location(topo, cpus.get(), HWLOC_CPUBIND_THREAD) != 0 ||
      hwloc_bitmap_iszero(cpus.get())) {
    if (hwloc_get_cpubind(topo, cpus.get(), HWLOC_CPUBIND_THREAD) != 0) return std::nullopt;
  }
  const Bitmap nodeset = make_bitmap();
  hwloc_cpuset_to_nodeset(topo, cpus.get(), nodeset.get());
  return first_node(nodeset.get());
}

unsigned pci_node(std::string_view bus_id) {
  hwloc_topology_t topo = topology();
  const std::string id(bus_id);
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, id.c_str());
  if (dev == nullptr) {
    int count = 0;
    for (hwloc_obj_t d = hwloc_get_next_pcidev(topo, nullptr); d != nullptr;
         d = hwloc_get_next_pcidev(topo, d)) {
      ++count;
    }
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("offload: no PCI device with bus id '{}' (hwloc sees {} PCI "
                            "device(s)); give it as lspci -D or nvidia-smi prints it, e.g. "
                            "0000:3b:00.0",
                            bus_id, count));
  }
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, dev);
  if (local != nullptr && local->nodeset != nullptr) {
    if (const auto node = first_node(local->nodeset)) return *node;
  }
  throw Error(ErrorCode::Unavailable,
              fmt::format("offload: hwloc knows no NUMA node for PCI device {}; use "
                          "Placement::node() or Placement::any()",
                          bus_id));
}

bool bind_area(void* p, std::size_t bytes, unsigned node, std::string* why) {
  hwloc_topology_t topo = topology();
  const Bitmap nodeset = make_bitmap();
  hwloc_bitmap_only(nodeset.get(), node);
  if (hwloc_set_area_membind(topo, p, bytes, nodeset.get(), HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET) == 0) {
    return true;
  }
  if (why != nullptr) *why = errno_text(errno);
  return false;
}

}  // namespace strait::offload::numa
