// onebit_host_slice.h -- what the host loops of 1-bit Adam, 0/1 Adam and 1-bit LAMB share: the
// checks of a slice's pointers and scalars, the working-copy cast after an update, and the size
// below which a loop stays on the calling thread.
#pragma once

#include <cstddef>

#include "optim/cpu_optimizer.h"
#include "util/status.h"

namespace dsrt {

// Below this many elements a loop runs on the calling thread (thread start-up costs more).
constexpr size_t kOneBitParallelMin = 1 << 15;

// OK for an empty slice; otherwise master, exp_avg (state0) and exp_avg_sq (state1) must be
// there, with needs_grad an fp32 gradient and a finite grad_scale, and the learning rate finite.
// DSRT_ERR_INVALID_ARGUMENT naming `what` and the missing piece otherwise.
Status check_onebit_slice(const char *what, const OptimizerHyper &hyper, const OptimizerSlice &slice,
                          bool needs_grad, float grad_scale);

// Casts the updated master into the slice's working copy, when it has one.
void write_working_copy(const OptimizerSlice &slice);

}  // namespace dsrt
