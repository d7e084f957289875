// NUMA queries and memory binding for offload/ (PinnedBuffer, PinnedPool), through hwloc.
//
// Nodes are named by their operating system index (as in /sys/devices/system/node/nodeN, numactl
// and nvidia-smi topo). The machine's topology, with its PCI devices, is read once per process on
// first use (tens of milliseconds) and only read afterwards.
// Thread-safety: every function is safe from any thread.
// Errors: InvalidArgument for a node or PCI bus id that this machine does not have; Unavailable
// when hwloc cannot read the topology.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strait::offload::numa {

// The OS indexes of the machine's NUMA nodes, ascending (one node, 0, on a machine without NUMA).
std::vector<unsigned> nodes();

// Throws InvalidArgument naming the nodes there are when `node` is not one of them.
void check_node(unsigned node);

// The node of the CPU the calling thread last ran on (hwloc_get_last_cpu_location; the first node
// of its CPU binding when that is unknown); nullopt when neither is known.
std::optional<unsigned> calling_thread_node();

// The node local to the PCI device with this bus id ("0000:3b:00.0" as lspci -D prints it, or
// "00000000:3B:00.0" as nvidia-smi does): the first node of its nearest non-I/O ancestor.
unsigned pci_node(std::string_view bus_id);

// Binds the pages of [p, p + bytes) to `node` (hwloc_set_area_membind, HWLOC_MEMBIND_BIND) so
// they are allocated there at first touch. False, with `why` set, when the kernel refuses (in a
// container mbind may need CAP_SYS_NICE); the memory then follows the default policy.
bool bind_area(void* p, std::size_t bytes, unsigned node, std::string* why);

}  // namespace strait::offload::numa
