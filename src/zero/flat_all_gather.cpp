// defines: all_gather_flat_partitions -- the stage 1-2 all-gather of the updated working copies.
#include "zero/flat_all_gather.h"

#include <algorithm>

#include "util/half.h"

namespace dsrt {

Status all_gather_flat_partitions(const FlatLayout &flat, Comm &partition, Device &device, void *working_copy,
                                  dsrt_dtype wdt, int64_t bucket_elems, DeviceBuffer *staging_buffer) {
  if (partition.size() == 1) return Status::Ok();
  const size_t wsize = dtype_size(wdt);
  char *working = static_cast<char *>(working_copy);
  const int64_t p = flat.partition_size();
  const int world = partition.size();
  const int rank = partition.rank();
  // allgather_bucket_size 0: the whole partition in one all-gather (DeepSpeed's all_gather_into_tensor).
  const int64_t chunk = bucket_elems > 0 ? bucket_elems : std::max<int64_t>(p, 1);
  if (p <= chunk) {
    return partition.all_gather_sync(working + rank * p * static_cast<int64_t>(wsize), working, static_cast<size_t>(p), wdt)
        .with_context("all-gathering updated working copies");
  }
  // Chunks of each partition travel through a staging buffer (the partitions are not adjacent).
  const size_t staging_bytes = static_cast<size_t>(chunk * world) * wsize;
  if (staging_buffer->bytes() < staging_bytes) {
    staging_buffer->reset();
    DSRT_RETURN_IF_ERROR(device.allocate(staging_bytes, staging_buffer).with_context("allocating all-gather staging"));
  }
  char *staging = static_cast<char *>(staging_buffer->data());
  for (int64_t off = 0; off < p; off += chunk) {
    const int64_t c = std::min(chunk, p - off);
    DSRT_RETURN_IF_ERROR(partition.all_gather_sync(working + (rank * p + off) * static_cast<int64_t>(wsize), staging,
                                                   static_cast<size_t>(c), wdt)
                             .with_context("all-gathering updated working copies"));
    for (int r = 0; r < world; ++r)
      DSRT_RETURN_IF_ERROR(device.copy(working + (r * p + off) * static_cast<int64_t>(wsize),
                                       staging + r * c * static_cast<int64_t>(wsize), static_cast<size_t>(c) * wsize,
                                       nullptr));
  }
  return device.synchronize(nullptr);
}

}  // namespace dsrt
