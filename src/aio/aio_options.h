// aio_options.h -- the options of the I/O layer, with the meaning of DeepSpeed's "aio" section
// (the config layer parses that section into this struct; the I/O layer knows nothing of the
// config).
#pragma once

#include <cstdint>

namespace dsrt {

struct AioConfig {
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;  // alias thread_count
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

}  // namespace dsrt
