// ckpt_onebit.h -- 1-bit LAMB's state beside the shards: each rank writes onebit_lamb_rank<r>.bin
// (PartitionedState::onebit_lamb_serialize: the per-tensor scalars, the fresh variance, this rank's worker
// and server errors) followed by its CRC-32C. A load reads this rank's file, or rank 0's when this
// rank did not save one (another world size); the engine keeps the errors only at the same world
// size and rank, and restarts them at zero otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "zero/partitioned_state.h"
#include "util/status.h"

namespace dsrt {

// Local; nothing for other optimizers.
Status save_onebit_lamb(const PartitionedState &engine, const std::string &dir);
// Local; out is left empty for other optimizers, and for a checkpoint of another optimizer (a
// warning: the engine's OneBitLamb state is left as it is).
Status stage_onebit_lamb(const PartitionedState &engine, const Manifest &m, const std::string &tag_dir, std::vector<uint8_t> *out);
Status commit_onebit_lamb(PartitionedState &engine, const std::vector<uint8_t> &staged);

}  // namespace dsrt
