// ckpt.h -- checkpoints of a built engine, through its partitioned-state view (zero/partitioned_state.h): save, load (with resharding), and the gathered 16-bit
// model. docs/checkpoints.md describes the format, the atomicity argument and the resharding.
//
// Layout under dir:
//   dir/latest                      the newest complete tag (written last, durably)
//   dir/<tag>/manifest.json         see manifest.h; manifest.crc32c beside it
//   dir/<tag>/zero_rank_NNNNN.shard one per rank that holds distinct state (shard_file.h)
//   dir/<tag>/client_state.bin      the host's bytes (dsrt_engine_set_client_state)
//   dir/<tag>/model_16bit.safetensors  with zero_optimization.stage3_gather_16bit_weights_on_model_save
// A save builds dir/.tmp-<tag>-<id>/, and only when every rank's shard is on disk does one rank
// (one per node with checkpoint.use_node_local_storage) swap it into dir/<tag> and update latest.
#pragma once

#include <string>

#include "zero/partitioned_state.h"
#include "util/status.h"

namespace dsrt {

// Collective. tag "" gives "global_step<N>". STATE between accumulation boundaries.
Status save_checkpoint(PartitionedState &engine, const std::string &dir, const std::string &tag);
// Collective. tag "" reads dir/latest. On failure nothing in the engine has changed.
Status load_checkpoint(PartitionedState &engine, const std::string &dir, const std::string &tag);
// Collective: gathers the working weights; only writers write path (rank 0 unless node-local).
Status save_16bit_model(PartitionedState &engine, const std::string &path, bool write_here);

// The checkpoint folder of tag under dir (following a save interrupted between its two renames
// on filesystems without RENAME_EXCHANGE); tag "" reads dir/latest.
Status resolve_tag_dir(const std::string &dir, const std::string &tag, std::string *resolved_tag,
                       std::string *tag_dir);
// INVALID_ARGUMENT unless tag is a plain folder name.
Status validate_tag(const std::string &tag);

}  // namespace dsrt
