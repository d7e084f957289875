// The training loop of `strait train`: one process per (stage, replica) pair trains the reference
// transformer (model/transformer.h, run by scheduler/executor.h through
// model/transformer_stage.h, its gradients averaged by train/data_parallel_sync.h) on a byte
// corpus, with pipeline parallelism across `stages` and data parallelism across `replicas`, AdamW
// moments in pinned RAM or on NVMe (offload/optimizer_offload.h).
//
// Ranks: world rank = replica * stages + stage, so a replica's stages are neighbours. Groups: the
// pipeline (same replica), the data-parallel group (same stage) and the tied-embedding group
// (the ranks holding the first and the last model stage of a replica, when they differ). With
// several chunks per rank (interleaved, zbv) a rank holds stages x chunks / stages model stages,
// and everything per rank (optimizer, gradient sync, checkpoint shard) covers all its chunks.
// Batches: each step draws microbatches x microbatch_size sequences per replica from ByteDataset;
// replica r takes the global sequences [r M B, (r + 1) M B), so the global batch (and thus the loss
// trajectory) does not depend on how it is split between replicas and microbatches. Learning rate:
// linear warm-up over warmup_steps, then cosine decay to min_lr_ratio * lr (as nanoGPT). Gradients
// are clipped to grad_clip in global norm. DiLoCo (outer_steps > 0; train/outer_sync.h): the
// replicas average no gradients; the inner AdamW (its schedule and moments unchanged) runs on each
// replica's own batch share, and after every outer_steps-th step (and the last) each stage's
// replicas average their pseudo-gradients and take the outer step; rank 0 prints a line per round
// (the replicas in, the bytes the average sent, the outer updates applied so far). Between rounds
// the replicas hold different weights, so an
// --eval-every evaluation there scores each replica's own weights on its share of the held-out
// set; the final evaluation and the sample come after the last round, on common weights.
// End of a run (rank 0 prints it): the held-out loss in nats and bits per byte next to byte n-gram
// baselines of the same corpus (baselines.h), then a sample from each replica's pipeline
// (sampling.h: top-k at a temperature from its own seed, or greedy).
// The job is a small loop over library parts: its settings (train_config.h, one sub-struct per
// concern, each validating itself), the pieces of a rank (rank_state.h), who is in the job
// (membership.h: the world, and --elastic's leaving and joining replicas), what it reports
// (train_report.h: lines and --metrics), and a step as a short sequence of calls (the batch, the
// pipeline's step with the optimizer, DiLoCo's outer step, the job-wide figures).
// Errors: strait::Error with a message naming the wrong setting and the fix (world size not
// stages x replicas, more stages than layers, a missing data path, an unknown --offload-optimizer,
// a missing offload directory for nvme, ...).
#pragma once

#include "train/train_config.h"

namespace strait::train {

// Runs this process's rank of the job (torchrun-style environment: RANK, WORLD_SIZE, ...; or,
// with config.join, a joiner of a running elastic job). Returns normally when training finished
// on every rank.
void run_training_rank(const TrainConfig& config);

}  // namespace strait::train
