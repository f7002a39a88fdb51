// comm_reduce.h -- the local half of the NCCL communicator's reductions: every rank's copy of one
// block, reduced in fp32 and rounded once (NCCL itself adds 16-bit values in 16 bits at every
// hop, and its max/min drop NaN).
#pragma once

#include <cstddef>

#include "dsrt.h"
#include "util/status.h"

namespace dsrt {

// dst[i] = round(op over ranks r = 0..ranks-1 of block_r[i]), accumulated in fp32 in rank order,
// where block_me is own and the other ranks' blocks lie in peers, rank r < me at peers + r*n and
// rank r > me at peers + (r-1)*n (elements of dtype). dst may equal own. op: 0 sum, 1 max, 2 min
// (max and min propagate NaN). Enqueued on stream (a cudaStream_t).
Status cuda_reduce_rank_blocks(void *dst, const void *own, const void *peers, int me, int ranks, size_t n,
                               dsrt_dtype dtype, int op, void *stream);

}  // namespace dsrt
