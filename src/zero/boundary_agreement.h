// boundary_agreement.h -- the collectives by which the ranks agree at an accumulation boundary:
// the gradient norm and overflow flag (every stage), Lamb's whole-tensor sums (stages 1-3), and
// a rank-local failure that every rank must learn of.
// The ZeRO stage strategies (zero_stage.h) call these over their groups.
#pragma once

#include <cstddef>

#include "comm/comm.h"
#include "util/status.h"

namespace dsrt {

// Stage 0: every rank holds the same reduced gradients (in 1-bit Adam's compression stage its own
// local ones, clipped by their own norm as in DeepSpeed); the ranks still agree on the skip (a
// maximum of the overflow flag over world), so a rank-local fault never splits them into stepping
// and skipping. The norm stays this rank's.
Status agree_replicated_overflow(Comm &world, double *norm_sq, bool *nonfinite);

// Stages 1-3: the partitions tile the partitioning group, so the squared norm and the overflow
// flag are summed over partition (MiCS: the shard group, whose replicas hold the same reduced
// gradients, so summing over the world would count them again). With MiCS replicas (non-null)
// the world then agrees on the replicas' equal values (a maximum).
Status agree_partitioned_norm(Comm &world, Comm &partition, const Comm *replicas, double *norm_sq, bool *nonfinite);

// A failure of this rank's own part of the boundary (say its gradient swap files) made known to
// every rank, so that none of them goes on to a collective the failed rank will not join: OK when
// no rank failed; else this rank's own failure, or, on a rank that did not fail, an error with the
// failing rank's status code naming the lowest failing rank and quoting its message (up to about
// 1000 bytes). One all-reduce; a broadcast more when a rank failed.
Status agree_local_failure(Comm &world, const Status &local);

// Lamb's per-tensor sums of squares, summed over the partitioning group (each tensor has at most
// one piece per rank).
Status agree_partitioned_sums(Comm &partition, double *sums, size_t n);

}  // namespace dsrt
