// The one place where a collective's arguments are checked (the role of NCCL's argcheck.cc), and
// where the memory its buffers live in is resolved.
//
// memory_of(args, rank): Device when the buffers this rank uses are GPU memory
// (kernels::pointer_device) of one device, stored in *device; Host when they are all host memory
// or null. InvalidArgument when some are device memory and others host memory (naming which is
// which), when they live on different devices, or when a host-only kind (barrier, the v-forms,
// the compressed allreduce) is given device memory. Never makes a CUDA call in a build without
// CUDA.
//
// check_host(args, rank, size): InvalidArgument, naming the operation and what was wrong, for a
// root or peer outside 0..size-1, a tag above 2^37 - 1, avg of an integer dtype, a compressed
// allreduce with another op than sum or avg, a span of counts without one entry per rank, an
// alltoall_v whose own block differs in size between send and recv, a null buffer that must hold
// data, and send and recv buffers that overlap other than in the kind's in-place layout
// (comm/communicator.h names each).
//
// validate_device(args, rank, size): InvalidArgument, naming the operation, for what NCCL cannot
// do: a root or peer outside 0..size-1, a send or receive to this rank itself (NCCL would wait for
// itself forever outside a group: copy instead), a non-zero tag, a null buffer with count > 0,
// avg of an integer dtype, or an alltoall in place. Makes no CUDA call.
// Thread-safety: pure functions.
#pragma once

#include <optional>

#include "comm/collective_args.h"

namespace strait::comm {

[[nodiscard]] MemoryKind memory_of(const CollectiveArgs& args, int rank, int* device);

void check_host(const CollectiveArgs& args, int rank, int size);

void validate_device(const CollectiveArgs& args, int rank, int size);

// memory_of for the device-capable kinds, as the device path's tests use it: the device, or
// nullopt for host memory.
[[nodiscard]] std::optional<int> device_of(const CollectiveArgs& args, int rank);

}  // namespace strait::comm
