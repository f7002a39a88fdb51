// param_shards.h -- where the 16-bit parameter shards of ZeRO-3's parameter offload live
// (offload_param at stage 3), owned by the StateStore (state_store.h):
//   "nvme": the shard of every non-persistent tensor lives either in host memory -- the first such
//           tensors in registration order while their shards add up to at most
//           offload_param.max_in_cpu elements (DeepSpeed's "parameter elements to maintain in CPU
//           memory") -- or in its own SwapStore array ("p<t>"; frozen tensors "f<i>");
//   "cpu":  every such shard lives in host memory (the same machinery with no swap store).
// "cpu" on the CPU device, where host memory is the device's memory, keeps the trainable shards in
// place: laid out as the working shards (entry t at its working offset), so that the engine's
// working shards can be a view of them (in_place_data()). With fp32 working shards that layout is
// the fp32 masters' own (this rank's partition), so the engine may hand over the masters' memory
// (ParamShardsOptions::in_place_memory): the trainable shards then are the masters, and the
// optimizer's pass writes one array less.
// ParamShards is the stage-3 coordinator's ShardSource: it hands over the shards kept in host
// memory (resident()) and starts swap-ins into pool buffers that the aio engine fills in the
// background. It is also the frozen tensors' FrozenShardStore. Entries are the coordinator's: the
// trainable tensors, then the frozen ones. Host thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "device/device.h"
#include "dsrt.h"
#include "offload/nvme_swapper.h"
#include "offload/shard_source.h"
#include "util/status.h"

namespace dsrt {

struct ParamShardEntry {
  std::string name;       // for messages
  int64_t numel = 0;      // the tensor's elements (messages)
  int64_t shard_elems = 0;
  bool persistent = false;      // gathered on every rank, on the device: no shard here
  int64_t working_offset = -1;  // trainable: byte offset of its shard in the working shards; frozen: -1
};

struct ParamShardsOptions {
  std::vector<ParamShardEntry> entries;
  size_t trainable = 0;        // entries [0, trainable) are the trainable tensors
  size_t working_elem_bytes = 0;
  OffloadConfig offload;       // zero_optimization.offload_param
  int part_size = 1;           // ranks the shards are cut over (messages)
  // "cpu" on the CPU device: the trainable shards kept in place, in kept bytes [0, in_place_bytes).
  bool in_place = false;
  uint64_t in_place_bytes = 0;
  // In place in the caller's memory (in_place_bytes of it, outliving the ParamShards: the engine's
  // fp32 masters): the trainable shards live there, not in host memory of this object's own;
  // kept_bytes() then counts only the other shards.
  void *in_place_memory = nullptr;
  NvmeSwapperOptions swapper;  // "nvme": aio, rank, allocator (buffer_bytes: computed)
};

class ParamShards final : public ShardSource, public FrozenShardStore {
 public:
  // The layout, the swap store ("nvme") and the host memory of the kept shards. The shards hold no
  // values until the engine stores its working shards (store_working) and moves the frozen ones.
  // CONFIG for a shard on NVMe larger than offload_param.buffer_size.
  static Status create(const ParamShardsOptions &options, Device *device, std::unique_ptr<ParamShards> *out);
  ~ParamShards() override;

  // ShardSource.
  const void *resident(size_t t) const override;
  size_t free_buffers() const override;
  Status start_read(size_t t, bool *started) override;
  Status finish_read(size_t t, void *dst) override;
  void cancel_read(size_t t) override;
  // FrozenShardStore (i: the frozen index).
  Status read_frozen_shard(size_t i, void *host_dst) override;
  Status write_frozen_shard(size_t i, const void *host_src) override;

  NvmeSwapper *swapper() const { return swapper_.get(); }  // "nvme" only
  // In place: where the trainable shards are laid out as the working shards.
  void *in_place_data() const { return options_.in_place_memory ? options_.in_place_memory : kept_.data(); }
  uint64_t kept_bytes() const { return kept_.bytes(); }  // shards in host memory of this object's own
  uint64_t nvme_bytes() const;                           // shards on NVMe
  size_t shard_bytes(size_t t) const { return shards_[t].bytes; }
  // Whether t has a shard here (false: persistent, gathered on the device).
  bool has_shard(size_t t) const { return !shards_[t].array.empty(); }

  // Stores the trainable tensors' working shards (working: host-addressable or device memory, the
  // layout of ParamShardEntry::working_offset): into host memory through the device, and onto NVMe
  // with one swap-out per pool buffer in flight. A swap-out commits only once all of its bytes are
  // written, so after a failure every array holds either its new or its previous value on disk.
  Status store_working(const void *working);
  // Reads t's shard from NVMe into host memory (shard_bytes(t)); the caller frees the read buffers.
  Status read_shard(size_t t, void *dst);
  // Sets count elements of t's shard from element `at` on to fp32 values, in the working dtype.
  Status write_owned(size_t t, int64_t at, const float *src, size_t count, dsrt_dtype working_dtype);

 private:
  struct Shard {
    std::string array;         // SwapStore name ("p<t>", "f<i>"); empty for persistent tensors
    size_t bytes = 0;          // shard bytes (working dtype)
    int64_t kept_offset = -1;  // byte offset in kept_ (or in in_place_memory); -1: on NVMe
    bool in_caller_memory = false;  // kept_offset is in options_.in_place_memory
  };
  struct InFlight {
    PinnedLease lease;
    SwapTicket ticket;
  };
  ParamShards(Device *device, const ParamShardsOptions &options) : device_(device), options_(options) {}
  void *kept_shard(size_t t) { return const_cast<void *>(resident(t)); }

  Device *device_;
  ParamShardsOptions options_;
  std::unique_ptr<NvmeSwapper> swapper_;  // first: outlives the reads and the kept shards
  std::vector<Shard> shards_;  // per entry
  DeviceBuffer kept_;          // the shards kept in host memory
  std::map<size_t, InFlight> reads_;
};

}  // namespace dsrt
