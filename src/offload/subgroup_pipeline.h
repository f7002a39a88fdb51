// subgroup_pipeline.h -- the NVMe optimizer step (ZeRO-Infinity): sub-group by sub-group, read
// its arrays (fp32 master weights and optimizer states) from the SwapStore into a pooled buffer,
// step them, write them back. With pipeline_read the next sub-group is read while this one is
// stepped; with pipeline_write a sub-group's write-back goes on while the next ones are read and
// stepped (DeepSpeed's offload_optimizer.pipeline_read / pipeline_write). Resident memory is bounded
// by the pool: at most buffer_count sub-groups are in memory at once; with fewer buffers the
// pipeline overlaps less but never needs more.
//
// Failures: the first error (a read, the step function, a write) stops the pipeline after
// everything in flight has finished. A sub-group's arrays are committed together
// (SwapStore::wait_group): sub-groups whose write-back completed have their new values, the others
// keep their previous values on disk (SwapStore never overwrites in place). The stats say how many
// were committed, in order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "offload/pinned_pool.h"
#include "offload/swap_store.h"
#include "util/status.h"

namespace dsrt {

struct SubGroupArray {
  std::string name;  // the array's name in the SwapStore
  uint64_t bytes = 0;
  bool write_back = true;  // false: read for the step only (its gradient), never written back
};

struct SubGroup {
  std::vector<SubGroupArray> arrays;
};

// One sub-group in memory: the arrays in the order given, each 4096-aligned inside the buffer.
struct SubGroupView {
  size_t index = 0;
  std::vector<void *> data;
  std::vector<uint64_t> bytes;
  float *f32(size_t array) const { return static_cast<float *>(data[array]); }
  uint64_t count_f32(size_t array) const { return bytes[array] / sizeof(float); }
};

using SubGroupStepFn = std::function<Status(const SubGroupView &)>;

struct SubGroupPipelineOptions {
  bool pipeline_read = false;
  bool pipeline_write = false;
};

struct SubGroupPipelineStats {
  size_t sub_groups = 0;
  size_t committed = 0;       // sub-groups 0..committed-1 were stepped and written back
  size_t peak_buffers = 0;    // most pool buffers held at once
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double read_wait_seconds = 0;   // time blocked on reads
  double write_wait_seconds = 0;  // time blocked on writes
  double step_seconds = 0;
  double total_seconds = 0;
};

class SubGroupPipeline {
 public:
  SubGroupPipeline(SwapStore &store, PinnedPool &pool, const SubGroupPipelineOptions &options)
      : store_(store), pool_(pool), options_(options) {}

  // Bytes one sub-group needs in a buffer (each array rounded up to 4096).
  static uint64_t buffer_bytes(const SubGroup &group);

  // Steps every sub-group in order. DSRT_ERR_CONFIG (before any I/O) if a sub-group does not fit
  // in one buffer, naming it and the sizes.
  Status run(const std::vector<SubGroup> &groups, const SubGroupStepFn &step, SubGroupPipelineStats *stats = nullptr);

 private:
  SwapStore &store_;
  PinnedPool &pool_;
  SubGroupPipelineOptions options_;
};

}  // namespace dsrt
