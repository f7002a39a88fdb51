// flat_all_gather.h -- stages 1-2: after the optimizer wrote this rank's partition of the flat
// working copy, an all-gather over the partitioning group gives every rank the whole copy.
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "device/device.h"
#include "zero/partition.h"

namespace dsrt {

// working: the flat working copy (flat.total() elements of wdt, on device); rank r's partition is
// flat.partition(r). bucket_elems (zero_optimization.allgather_bucket_size) bounds one
// all-gather's elements per rank; 0: the whole partition at once (DeepSpeed's
// all_gather_into_tensor). Larger partitions travel in chunks through *staging (grown on demand).
// A no-op on one rank.
Status all_gather_flat_partitions(const FlatLayout &flat, Comm &partition, Device &device, void *working,
                                  dsrt_dtype wdt, int64_t bucket_elems, DeviceBuffer *staging);

}  // namespace dsrt
