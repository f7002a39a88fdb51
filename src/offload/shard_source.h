// shard_source.h -- where ZeRO-3's ParamCoordinator finds this rank's working shard of a tensor when
// the shards are not all resident in one device buffer (parameter offload, offload_param "cpu" or
// "nvme"). The coordinator decides when to read (ahead along the recorded order, within the
// prefetch budget) and when to gather; the source owns the storage: shards kept in pinned host
// memory (all of them under "cpu"; offload_param.max_in_cpu's under "nvme") and shards in swap
// files read through a fixed set of buffers. Reads run in the background: start_read never
// blocks, finish_read waits. Everything is driven from the host's thread.
//
// Host shards are handed over as host pointers (resident()); the coordinator decides by its
// device whether a gather can send one as it is (the CPU device) or copies it into device
// staging first (a GPU, whose collectives take device pointers).
//
// FrozenShardStore: where the offloaded shards of frozen tensors live (engine/frozen_params.h).
// The parameter offload's ParamShards (param_shards.h) is both.
#pragma once

#include <cstddef>

#include "util/status.h"

namespace dsrt {

class ShardSource {
 public:
  virtual ~ShardSource() = default;
  // t's shard when it is kept in host memory (pinned; valid until the shards are rewritten); null
  // when it must be read.
  virtual const void *resident(size_t t) const = 0;
  // Read buffers not taken by started reads: a read can start only when this is > 0.
  virtual size_t free_buffers() const = 0;
  // Starts reading t's shard into a free buffer. *started is false (and the status Ok) when no buffer
  // is free; the call never waits for one.
  virtual Status start_read(size_t t, bool *started) = 0;
  // Waits for t's started read and copies the shard (shard bytes) into dst, a device buffer. The read
  // buffer is free again whatever the outcome; a failure names the file and the array.
  virtual Status finish_read(size_t t, void *dst) = 0;
  // Waits for t's started read and forgets it (the shard is about to change, or nobody needs it).
  virtual void cancel_read(size_t t) = 0;
};

// Where offloaded frozen shards live (the engine's parameter offload). i is the frozen index; host
// buffers hold the shard's bytes (shard_elems * working dtype size). Host thread only.
class FrozenShardStore {
 public:
  virtual ~FrozenShardStore() = default;
  virtual Status read_frozen_shard(size_t i, void *host_dst) = 0;
  virtual Status write_frozen_shard(size_t i, const void *host_src) = 0;
};

}  // namespace dsrt
