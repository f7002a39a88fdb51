// param_coordinator.h -- ZeRO-3 parameter gathering: acquire all-gathers a tensor's working copy
// from every rank's shard, release frees it, and later micro-steps prefetch along the recorded
// acquire order.
//
// Trace. The acquire sequence of the first micro-step is recorded. In later micro-steps each
// acquire that matches the trace's next entry issues asynchronous all-gathers for the entries
// after it, as long as the elements in flight stay within stage3_prefetch_bucket_size and the
// gathered elements within stage3_max_live_parameters. A released tensor whose next use in the
// trace is within stage3_max_reuse_distance elements is kept. An acquire that departs from the
// trace stops prefetching for the micro-step and the trace is recorded again.
//
// Agreement. Gathers are collectives, so every rank must acquire the same tensors in the same
// order. At each micro-step end the ranks compare a hash of their acquire sequence; a mismatch
// fails with DSRT_ERR_COMM naming the first tensor where the sequences differ (ranks that
// disagree in the middle of a micro-step may also see a collective fail or time out first).
//
// Tensors of at most stage3_param_persistence_threshold elements stay gathered on every rank.
//
// One rank on the CPU device, shards kept in host memory by the shard source (offload_param
// "cpu", or within "nvme"'s max_in_cpu): a gather hands out the kept shard itself, which at one
// rank is the whole tensor, instead of copying it (no buffer, no copy); everything above counts it
// as gathered all the same. As at stages 0-2, the pointer then reads the working copy that the
// step and writes update in place.
//
// hpZ (ZeRO++ zero_hpz_partition_size, set_secondary_group): besides its shard over the world,
// each rank keeps a secondary partition of a tensor over its hpZ group of k ranks (normally the
// ranks of one node): 1/k of the padded tensor, elements [j*s*W/k, (j+1)*s*W/k) for the rank with
// index j in the group (s: the world shard size). It is cut from the full gathered copy when the
// tensor is released for the first time after the shards changed (the release after the forward
// pass), and every later gather of the tensor is an all-gather of the secondary partitions inside
// the group (the backward pass's gathers stay inside the node). The optimizer step, a write and
// new shards invalidate (and free) the secondary partitions; the next gathers go over the world
// again. The gathered bytes are the same either way, so results are bitwise those of plain ZeRO-3.
// Persistent tensors never get one (they stay gathered).
//
// Frozen entries. After the partitioning's trainable tensors (entries 0..N-1) come frozen tensors
// (entries N.., init's `frozen`): no master, no gradient, no optimizer state, each split on its own
// into W shards of ceil(numel/W) elements. They share everything above with the trainable entries
// -- the trace, prefetching, reuse, the live limit, persistence, the agreement check and reads
// from the shard source -- except that the optimizer step never rewrites them, so refresh() skips
// them (regather() re-gathers one after its shards were written). A frozen entry's shard is sent
// from its device buffer, or comes from the shard source when parameter offload moved it there
// (set_frozen_shard(t, nullptr)).
//
// Shards on NVMe (a ShardSource instead of resident shards). Prefetching also reads ahead: after
// issuing its gathers, an acquire that follows the trace starts background reads of the shards of
// the next tensors in the trace, as long as the elements being read stay within
// stage3_prefetch_bucket_size and a read buffer is free (it never waits for one). The gather of a
// tensor whose read was started waits for that read; the read overlaps the host's work between
// the acquire that started it and the one that gathers it. Which gathers are issued, and when,
// depends only on the trace and the sizes (as without NVMe), never on the reads, so the ranks
// issue their collectives in the same order whatever their disks do. A gather that needs a buffer
// when all are taken by reads ahead finishes the oldest of those reads first (into its staging
// buffer). A failed read is reported by the acquire that needs the tensor (a later acquire
// retries it); the shard files are unchanged by it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "offload/shard_source.h"
#include "zero/partition.h"
#include "zero/quantized_gather.h"

namespace dsrt {

// Reads of shards from a ShardSource (NVMe parameter offload), since init.
struct SwapInStats {
  int64_t reads_ahead = 0;         // reads started by prefetching, ahead of the acquire that gathers them
  int64_t read_hits = 0;           // gathers whose shard had been read ahead (started or done)
  int64_t reads_on_demand = 0;     // gathers that had to start their own read and wait for it
  int64_t buffers_reclaimed = 0;   // reads ahead finished early because a gather needed their buffer
  int64_t reads_cancelled = 0;     // reads ahead dropped unused (trace left, shards rewritten)
  uint64_t bytes_read = 0;         // shard bytes read and used
  double read_wait_seconds = 0;    // time the host waited for reads
  size_t peak_reads_in_flight = 0;
};

// A frozen tensor's entry (after the partitioning's tensors): its size and this rank's working shard
// of shard_elems elements on the device (null: from the shard source).
struct FrozenEntry {
  std::string name;
  int64_t numel = 0;
  int64_t shard_elems = 0;
  const void *shard = nullptr;
};

// The engine fills these from the config (zero_optimization.stage3_*; the defaults are the
// schema's, src/config/schema_table.cpp). Left as they are: no prefetch, no bound on live
// elements or on reuse distance, no persistent tensors.
struct CoordinatorOptions {
  dsrt_dtype working_dtype = DSRT_F32;
  int64_t prefetch_bucket_elems = 0;
  int64_t max_live_elems = INT64_MAX;
  int64_t max_reuse_distance = INT64_MAX;
  int64_t persistence_threshold = 0;
  // ZeRO++ qwZ (zero_quantized_weights): every gather of a trainable tensor sends int8 blocks with
  // fp32 scales (quantized_gather.h) and dequantizes into the gathered copy; the shards are
  // unchanged. With hpZ, the gathers of the secondary partitions inside the group are quantized
  // the same way. quantized_nontrainable (zero_quantized_nontrainable_weights) does the same for
  // the frozen entries. The kernels follow the device (quant_device.h: CPU, or CUDA on the default
  // stream).
  bool quantized_weights = false;
  bool quantized_nontrainable = false;
};

class ParamCoordinator {
 public:
  ParamCoordinator() = default;
  ParamCoordinator(const ParamCoordinator &) = delete;
  ParamCoordinator &operator=(const ParamCoordinator &) = delete;
  // Waits for prefetches still in flight so no buffer is freed under them.
  ~ParamCoordinator();
  // shards: this rank's resident working shards (partition layout), owned by the engine.
  // frozen: the frozen tensors, entries N.. (N = partitioning->num_tensors()).
  Status init(const Partitioning *partitioning, Comm *comm, Device *device, const CoordinatorOptions &options,
              void *shards, std::vector<std::string> names, std::vector<FrozenEntry> frozen = {});
  // Where frozen entry t's shard is sent from from now on (null: the shard source). Drops reads.
  void set_frozen_shard(size_t t, const void *shard);

  // hpZ: the group secondary partitions are gathered over (null: off). Borrowed; it must outlive
  // the coordinator. Every rank of the world calls it alike, before the first acquire.
  Status set_secondary_group(Comm *group);

  // NVMe parameter offload: while shards is null, a tensor's shard comes from source (borrowed; it
  // must outlive the coordinator) instead of the resident shards. Setting resident shards drops
  // the reads ahead (the shards are about to be rewritten).
  void set_shard_source(void *shards, ShardSource *source);
  // Waits for every read ahead and forgets it (before the shards change). Local to this rank.
  void drop_reads();
  // Starts the reads ahead for the beginning of the next micro-step (after the shards were written).
  void read_ahead();

  Status acquire(size_t t, void **data);
  Status release(size_t t);
  // Called by the engine at every dsrt_engine_step, before gradients are reduced.
  Status end_micro_step();
  // After the shards changed (optimizer step, write): re-gather every tensor that stays gathered
  // (persistent, still acquired, or kept for reuse). Collective.
  Status refresh();
  // After t's shards were written (a frozen tensor's checkpoint load): re-gather it if it is
  // gathered. Collective (every rank has the same gathered set: it follows the agreed sequence).
  Status regather(size_t t);
  // Write a full fp32 value (host memory) into the gathered copy of t, if one is live (write_fp32).
  // Waits for a gather in flight into it first; the copy goes through the device.
  Status overwrite(size_t t, const float *full);

  size_t num_entries() const { return tensors_.size(); }
  bool frozen(size_t t) const { return tensors_[t].frozen; }
  bool persistent(size_t t) const { return tensors_[t].persistent; }
  int acquired(size_t t) const { return tensors_[t].acquired; }
  // t's gathered copy (null when not gathered); persistent tensors always have one.
  const void *gathered_data(size_t t) const { return tensors_[t].gathered.data(); }
  uint64_t gathered_bytes() const;
  // hpZ secondary partitions held now.
  uint64_t secondary_bytes() const;
  bool has_secondary(size_t t) const { return !tensors_[t].secondary.empty(); }
  // Freed gathered buffers kept for reuse (reported as buffers).
  uint64_t cached_bytes() const;
  bool trace_valid() const { return trace_valid_; }
  int64_t prefetch_hits() const { return prefetch_hits_; }
  // Acquires of t that found its gather already issued by a prefetch.
  int64_t prefetch_hits(size_t t) const { return tensors_[t].prefetch_hits; }
  double gather_seconds() const { return gather_seconds_; }
  const SwapInStats &swap_in_stats() const { return swap_stats_; }
  size_t reads_in_flight() const { return reading_.size(); }

 private:
  // The shard's read from the source: started (a read buffer taken), ready (the shard in staged),
  // failed (read_error is returned by the next gather of the tensor).
  enum class Read { None, Started, Ready, Failed };
  struct TensorState {
    DeviceBuffer gathered;  // shard_size * W elements; the first numel are the tensor
    bool view = false;      // gathered is the kept shard itself (kept_view), not owned
    CommHandle pending;     // an in-flight prefetch into gathered
    QuantizedAllGather quantized;  // qwZ: the payloads of the gather in flight
    DeviceBuffer staged;    // the shard read from the source, sent by the gather (NVMe offload)
    DeviceBuffer secondary;  // hpZ: this rank's secondary partition (empty: none valid)
    Read read = Read::None;
    Status read_error;
    int acquired = 0;
    bool persistent = false;
    int64_t numel = 0;
    int64_t shard_elems = 0;
    int64_t prefetch_hits = 0;
    bool frozen = false;             // no master/gradient: never rewritten by a step
    const void *frozen_shard = nullptr;  // frozen: its device shard (null: the shard source)
  };

  Status gather(size_t t, bool async);
  // One rank on the CPU device, a trainable tensor whose shard the shard source keeps in host
  // memory: that shard, which is the whole tensor (W = 1: no padding); else null.
  const char *kept_view(size_t t) const;
  // t's shard in device memory (resident shards or a frozen tensor's buffer); null: from source_.
  const char *device_shard(size_t t) const;
  int64_t shard_size(size_t t) const { return tensors_[t].shard_elems; }
  Status shard_to_send(size_t t, const char **send);
  Status fetch(size_t t);
  Status finish_read(size_t t);
  void make_room();
  void set_read(size_t t, Read read);
  void read_ahead_from(size_t position);
  Status wait_pending(size_t t);
  void prefetch_after(size_t position);
  void maybe_free(size_t t);
  int64_t gathered_elems(size_t t) const;
  void free_gathered(size_t t);
  Status check_agreement();
  Status make_secondary(size_t t);
  // Frees the hpZ secondary partitions: the trainable entries' only, or the frozen ones' too.
  void drop_secondaries(bool frozen_too);
  int64_t secondary_elems(size_t t) const;

  const Partitioning *part_ = nullptr;
  Comm *comm_ = nullptr;
  Comm *secondary_comm_ = nullptr;  // hpZ group (null: off)
  Device *device_ = nullptr;
  CoordinatorOptions options_;
  void *shards_ = nullptr;
  ShardSource *source_ = nullptr;
  std::vector<std::string> names_;
  std::vector<TensorState> tensors_;

  std::multimap<size_t, DeviceBuffer> cache_;  // freed gathered buffers by size
  size_t cache_bytes_ = 0;
  size_t cache_limit_ = 0;
  int64_t live_elems_ = 0;        // elements of all gathered copies
  int64_t in_flight_elems_ = 0;   // elements of gathers not yet waited for
  size_t acquires_ = 0;           // acquires so far in this micro-step
  std::vector<size_t> trace_;     // recorded acquire order
  bool trace_valid_ = false;
  std::vector<size_t> current_;   // this micro-step's acquires, and releases (t | kReleaseBit)
  static constexpr uint64_t kReleaseBit = uint64_t{1} << 63;
  bool following_ = false;        // this micro-step still matches the trace
  int64_t prefetch_hits_ = 0;
  double gather_seconds_ = 0;
  std::deque<size_t> reading_;    // tensors with a started read, oldest first
  int64_t reading_elems_ = 0;     // gathered elements of tensors read ahead (started or ready)
  SwapInStats swap_stats_;
  DeviceStream transfer_stream_ = nullptr;  // host-kept shards' copies to the device (created on first use)
};

}  // namespace dsrt
