// Gradient synchronisation: what a pipeline rank does with its gradients between the step's last
// backward and the optimizer, behind one interface the executor calls at ALLREDUCE_GRAD and OPTIM
// (as torch.distributed.pipelining's runtime delegates perform_reduce_grad to the stage), so the
// executor runs the schedule IR and holds no averaging, compression or clipping policy: that is
// the trainer's (train/data_parallel_sync.h's DataParallelSync for `strait train`).
// Thread-safety: one thread (the executor's) drives a sync. Errors: an implementation's own.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "scheduler/interface.h"

namespace strait::sched {

// The communicators a pipeline rank talks through (null where the group has one rank).
struct PipelineComms {
  comm::Communicator* pipeline = nullptr;  // the stages of this replica, rank = stage
  comm::Communicator* data = nullptr;      // the replicas of this stage, rank = replica
  comm::Communicator* tied = nullptr;      // first and last stage of this replica (P > 1)
};

class GradientSync : public Interface {
 public:
  // ALLREDUCE_GRAD: every backward of step `step` is done and its sends have left; leaves in grads
  // what the optimizer should see, before clipping.
  virtual void reduce_grads(std::int64_t step, std::span<float> grads) = 0;
  // OPTIM, just before the optimizer: clips grads in place; returns the global norm before.
  virtual double clip_grads(std::span<float> grads) = 0;
  // Bytes this rank's last reduce_grads sent.
  [[nodiscard]] virtual std::uint64_t bytes_sent() const = 0;
};

}  // namespace strait::sched
