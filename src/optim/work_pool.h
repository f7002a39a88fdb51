// work_pool.h -- the CPU kernels' helper threads: run(count, threads, body) calls body(i) for every
// i in [0, count), on the calling thread and up to threads - 1 helpers, and returns when all calls
// are done. Why not an OpenMP parallel region: in a host process that runs its own OpenMP pool
// (PyTorch, which also lends dsrt that pool when its libgomp is loaded first), OpenMP workers
// busy-wait after every region and the region's end waits for every worker to arrive. On a
// loaded machine with few cores that turns each of dsrt's many short regions (one per gradient
// accumulated, per working copy converted) into a scheduler time slice for the host's next
// operator, and the host's spinning workers into one for dsrt's. Here helpers sleep on a
// condition variable when idle, the caller takes items itself from the start, and the end waits
// only for the items a helper has already taken: a helper that wakes late finds nothing left and
// goes back to sleep without delaying anyone.
//
// Which thread runs which item never changes a result: callers that reduce write one partial
// result per item and add them in item order (cpu_dispatch.h).
#pragma once

#include <cstddef>
#include <functional>

namespace dsrt {
namespace optim_kernels {

// True on a pool helper while it runs items (nested run calls then stay on the calling thread).
bool in_work_pool();

// body(i) for i in [0, count), on the caller and at most threads - 1 helpers; threads <= 1 or a
// call from inside a helper runs everything on the caller. Concurrent callers from different
// threads are served one at a time; one that finds the pool busy runs its items alone.
void work_pool_run(size_t count, int threads, const std::function<void(size_t)> &body);

}  // namespace optim_kernels
}  // namespace dsrt
