// ckpt_frozen.h -- frozen tensors in checkpoints: their full fp32 values in kFrozenFile (one
// tensor after another, each with its CRC-32C in the manifest), the frozen-flag check on load,
// and loading each rank's part of them.
#pragma once

#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "zero/partitioned_state.h"
#include "util/status.h"

namespace dsrt {

// Collective (gathers each frozen tensor at stage 3); writers write dir/kFrozenFile (fsynced).
// out: the manifest entries (filled on every rank).
Status save_frozen(PartitionedState &engine, const std::string &dir, bool write_here, std::vector<ManifestFrozen> *out);
// CHECKPOINT naming the tensor when a tensor is frozen on one side and trainable on the other,
// or the frozen tensors differ (names, shapes, count); a checkpoint without any frozen tensor is
// accepted (the engine's frozen tensors keep their values). Local.
Status check_frozen(const PartitionedState &engine, const Manifest &m, const std::string &path);
// This rank's part of every frozen tensor (frozen_owned), read from tag_dir and checked
// against the manifest's checksums. Local.
Status stage_frozen(const PartitionedState &engine, const Manifest &m, const std::string &tag_dir,
                    std::vector<std::vector<float>> *out);
// Writes staged parts into the engine's frozen tensors.
Status commit_frozen(PartitionedState &engine, const std::vector<std::vector<float>> &staged);

}  // namespace dsrt
