// grad_swap.h -- ZeRO-Infinity's gradient swapping: a stage-3 rank's fp32 gradient partition kept in
// SwapStore arrays, one per optimizer sub-group (the same cut and the same store and pinned pool as
// the sub-group's master and optimizer states), instead of a partition-sized buffer in memory.
//
// During backward the gradient reducer asks for host memory holding a range of the partition
// (map) and accumulates the range's reduced values into it. The sub-group holding the range is
// brought into a pool buffer: read back from its swap file when it already holds gradients of this
// accumulation window (a later micro-step, or a range of the same micro-step after it was written
// out), else zero-filled. Moving to another sub-group starts the write-back of the current one
// (asynchronous, on the store's aio rings) and brings in the next; write-backs are waited for when
// a buffer is needed again and at the end of every micro-step (flush). Resident memory: the one
// sub-group being filled plus the write-backs in flight, at most the pool's buffer_count buffers
// (ranges arrive sub-group by sub-group in order, so each is usually brought in once per micro-step).
//
// At the boundary the optimizer's SubGroupPipeline reads each sub-group's gradient array with its
// master and states (a read-only array: never written back). finish_window() first gives every
// sub-group that received no range in the window a zero array, so every array holds the window's
// sum; begin_window() (after the step, applied or skipped) starts the next window.
//
// Failures: a failed write-back or read returns the store's DSRT_ERR_IO status (naming the array
// and the file). The window's sums in that sub-group are then lost, so the failure sticks: every
// later map, flush and finish_window of the window returns it (the step cannot be taken on partial
// gradients); begin_window clears it. A caller that must keep in step with other ranks whatever
// happens here (the engine's reducer, whose collectives go on) uses map_or_discard and
// flush_or_defer instead: a failure is recorded (window_failure), the write-backs in flight are
// drained, and the rest of the window's ranges are summed into scratch memory and dropped, so
// backward runs on to the boundary, where the ranks agree on the failure (engine_nvme_grads.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "offload/pinned_pool.h"
#include "offload/swap_store.h"
#include "util/status.h"

namespace dsrt {

struct GradSwapStats {
  uint64_t bytes_read = 0;     // swap-ins of partial sums (accumulation)
  uint64_t bytes_written = 0;
  uint64_t reads = 0, writes = 0;
};

class GradSwap {
 public:
  // group_begin: the sub-group cut in partition elements (one more entry than sub-groups; the last
  // is the partition's end). name(g): the store array of sub-group g's gradient. Store and pool
  // are borrowed; the pool's buffers must hold a sub-group's fp32 gradient.
  GradSwap(SwapStore &store, PinnedPool &pool, std::vector<int64_t> group_begin,
           std::function<std::string(size_t)> name);
  ~GradSwap();  // waits for write-backs in flight (their failures are logged)
  GradSwap(const GradSwap &) = delete;
  GradSwap &operator=(const GradSwap &) = delete;

  // Writes a zero gradient array for every sub-group (at build: the arrays exist from the start).
  Status initialize();
  // Host memory for partition elements [offset, offset + *mapped), *mapped in [1, count]: the
  // window's values so far (zeros where nothing was accumulated yet). Valid until the next map or
  // flush. INVALID_ARGUMENT for a range outside the partition.
  Status map(int64_t offset, int64_t count, float **dst, int64_t *mapped);
  // Writes back the sub-group in memory and waits for every write-back: after it, the swap files
  // hold everything accumulated so far and no pool buffer is held.
  Status flush();
  // Gives the sub-groups that received nothing in this window zero arrays (before the boundary
  // reads them); flushes first.
  Status finish_window();
  // A new accumulation window: every sub-group's gradient counts as zero.
  void begin_window();

  // As map and flush, but never failing: after the window's first failure *dst is scratch memory
  // (its values are dropped) and flush_or_defer does nothing; window_failure() holds the failure.
  void map_or_discard(int64_t offset, int64_t count, float **dst, int64_t *mapped);
  void flush_or_defer();
  // Records a failure of this window found outside this object (the staged route's copies into the
  // swap buffers); an OK status records nothing. The first failure is kept.
  void defer(const Status &status);
  // The window's first failure (OK while none), kept until begin_window.
  const Status &window_failure() const { return lost_; }

  size_t sub_groups() const { return holds_.size(); }
  std::string array_name(size_t g) const { return name_(g); }
  uint64_t array_bytes(size_t g) const;
  uint64_t bytes_on_disk() const;  // every sub-group's array (the gradient partition), fp32
  const GradSwapStats &stats() const { return stats_; }
  void reset_stats() { stats_ = GradSwapStats(); }

 private:
  struct WriteBack {
    PinnedLease lease;
    SwapTicket ticket;
    size_t group = 0;
  };
  Status finish_oldest();
  Status evict();  // starts the write-back of the sub-group in memory
  Status acquire(PinnedLease *lease);
  Status lose(Status status);  // records the window's first failure; returns status
  Status check_lost() const;
  void drain();  // after a failure: drops the sub-group in memory and waits for the write-backs

  SwapStore &store_;
  PinnedPool &pool_;
  std::vector<int64_t> begin_;
  std::function<std::string(size_t)> name_;
  std::vector<char> holds_;  // per sub-group: its array holds values of this window
  size_t current_ = SIZE_MAX;  // the sub-group in memory
  PinnedLease lease_;
  std::deque<WriteBack> writing_;
  GradSwapStats stats_;
  Status lost_;  // the window's first failure (sticky until begin_window)
  std::vector<float> discard_;  // map_or_discard's scratch after a failure (allocated then)
};

}  // namespace dsrt
