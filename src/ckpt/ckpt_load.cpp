// defines: load_checkpoint -- each rank reads, for every piece of the new layout it owns, the
// ranges of whichever saved shards hold them (resharding by the manifest's layout), into staging
// buffers, verifying every block it touches. Only when every rank has succeeded do the ranks
// copy the staging buffers into the engine (states in NVMe swap files or GPU memory through
// write_partition_state, host-resident ones through their pointers) and restore counters, scaler,
// scheduler and client state.
#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_collective.h"
#include "ckpt/ckpt_frozen.h"
#include "ckpt/ckpt_onebit.h"
#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_cache.h"
#include "ckpt/shard_file.h"
#include "config/schema.h"
#include "util/aligned_buffer.h"
#include "util/log.h"

namespace dsrt {
namespace {

std::string shape_text(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(static_cast<long long>(shape[i]));
  return s + "]";
}

std::vector<GroupValues> saved_group_values(const Manifest &m) {
  std::vector<GroupValues> groups;
  for (const ManifestGroup &g : m.groups) groups.push_back(g.values);
  return groups;
}

Status check_same_model(const PartitionedState &engine, const Manifest &m, const std::string &path) {
  DSRT_RETURN_IF_ERROR(check_frozen(engine, m, path));
  if (m.tensors.size() != engine.num_tensors())
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: it holds %zu tensors, the engine has %zu", path.c_str(),
                 m.tensors.size(), engine.num_tensors());
  for (size_t t = 0; t < m.tensors.size(); ++t)
    if (m.tensors[t].name != engine.tensor_name(t) || m.tensors[t].shape != engine.tensor_shape(t))
      return Error(DSRT_ERR_CHECKPOINT, "'%s' is from another model: tensor %zu is '%s' %s there but '%s' %s here",
                   path.c_str(), t, m.tensors[t].name.c_str(), shape_text(m.tensors[t].shape).c_str(),
                   engine.tensor_name(t).c_str(), shape_text(engine.tensor_shape(t)).c_str());
  if (!m.groups.empty()) {
    // Checkpoints saved before parameter groups existed hold no group information (all group 0).
    if (m.groups.size() != engine.num_param_groups())
      return Error(DSRT_ERR_CHECKPOINT,
                   "'%s' holds %zu parameter group(s) but this engine has %zu; add the same groups (and put the "
                   "same tensors in them) before build",
                   path.c_str(), m.groups.size(), engine.num_param_groups());
    for (size_t t = 0; t < m.tensors.size(); ++t)
      if (m.tensors[t].group != engine.tensor_group(t))
        return Error(DSRT_ERR_CHECKPOINT,
                     "'%s': tensor '%s' is in parameter group %d there but in group %d here; put it in group %d "
                     "before build",
                     path.c_str(), m.tensors[t].name.c_str(), m.tensors[t].group, engine.tensor_group(t),
                     m.tensors[t].group);
    // The values are applied to a copy first, so that restoring them later cannot fail halfway.
    const Status s = engine.check_group_values(saved_group_values(m));
    if (!s.ok()) return Error(s.code(), "'%s': %s", path.c_str(), s.message().c_str());
  }
  if (m.num_streams() != 1 + static_cast<uint32_t>(engine.num_optimizer_states()))
    return Error(DSRT_ERR_CHECKPOINT, "'%s' holds %zu optimizer state(s) (%s) but this engine's optimizer keeps %d",
                 path.c_str(), m.state_names.size(), m.optimizer.c_str(), engine.num_optimizer_states());
  return Status::Ok();
}

// Ranges of the partition buffers that no owned segment covers (alignment padding).
struct Gap {
  size_t begin = 0, count = 0;
};

std::vector<Gap> gaps_between(std::vector<OwnedSegment> segments, size_t elems) {
  std::sort(segments.begin(), segments.end(),
            [](const OwnedSegment &a, const OwnedSegment &b) { return a.part_offset < b.part_offset; });
  std::vector<Gap> gaps;
  size_t at = 0;
  for (const OwnedSegment &s : segments) {
    const size_t begin = static_cast<size_t>(s.part_offset);
    if (begin > at) gaps.push_back({at, begin - at});
    at = std::max(at, begin + static_cast<size_t>(s.count));
  }
  if (at < elems) gaps.push_back({at, elems - at});
  return gaps;
}

// Everything a load changes in the engine, read and checked before anything is touched.
struct Staged {
  Manifest manifest;
  std::vector<AlignedBuffer> streams;  // partition_elems floats each, in this rank's layout (segments filled)
  std::vector<uint8_t> client_state;
  std::vector<std::vector<float>> frozen;  // this rank's part of each frozen tensor
  std::vector<uint8_t> onebit_lamb;        // OneBitLamb's state for this rank (ckpt_onebit.h)
};

Status stage(PartitionedState &engine, const std::string &tag_dir, Staged *out) {
  const std::string manifest_path = join_file_path(tag_dir, kManifestFile);
  DSRT_RETURN_IF_ERROR(read_manifest(tag_dir, &out->manifest));
  const Manifest &m = out->manifest;
  DSRT_RETURN_IF_ERROR(check_same_model(engine, m, manifest_path));

  const Partitioning &part = engine.partitioning();
  const uint32_t streams = m.num_streams();
  const size_t elems = static_cast<size_t>(part.partition_elems());
  out->streams.resize(streams);
  for (AlignedBuffer &b : out->streams)
    if (!b.allocate(elems * sizeof(float), false))  // only the segments are read and committed
      return Error(DSRT_ERR_OUT_OF_MEMORY, "load_checkpoint: cannot allocate %zu bytes of staging", elems * sizeof(float));

  ShardCache shards(m, tag_dir);
  auto reader_for = [&](int shard, ShardReader **reader) -> Status {
    Status st = shards.get(shard, reader);
    const std::string file = join_file_path(tag_dir, m.shards[static_cast<size_t>(shard)].file);
    if (!st.ok() && m.node_local && !path_exists(file))
      st = st.with_context("checkpoint saved with node-local storage: this node lacks a shard the new layout needs "
                           "(load on the same ranks per node, or copy the shards onto one filesystem)");
    return st;
  };

  const std::vector<OwnedSegment> segments = part.owned_segments(engine.part_rank());
  // NVMe: commit() writes the whole partition in one call per stream (one pass over each swap
  // array instead of one per segment), so the elements no segment covers keep their values.
  const std::vector<Gap> gaps = engine.nvme_offload() ? gaps_between(segments, elems) : std::vector<Gap>();
  for (uint32_t stream = 0; stream < streams; ++stream) {
    float *dst = out->streams[stream].as<float>();
    for (const Gap &g : gaps)
      DSRT_RETURN_IF_ERROR(engine.read_partition_state(static_cast<int>(stream) - 1, g.begin, g.count, dst + g.begin));
    for (const OwnedSegment &seg : segments) {
      for (const SavedPiece &p : m.locate(seg.tensor, seg.tensor_begin, seg.tensor_begin + seg.count)) {
        ShardReader *reader = nullptr;
        DSRT_RETURN_IF_ERROR(reader_for(p.shard, &reader));
        DSRT_RETURN_IF_ERROR(reader->read(stream, p.stream_elem, static_cast<uint64_t>(p.count),
                                          dst + seg.part_offset + (p.tensor_begin - seg.tensor_begin)));
      }
    }
  }

  DSRT_RETURN_IF_ERROR(stage_frozen(engine, m, tag_dir, &out->frozen));
  DSRT_RETURN_IF_ERROR(stage_onebit_lamb(engine, m, tag_dir, &out->onebit_lamb));
  if (m.client_state_bytes > 0) {
    const std::string path = join_file_path(tag_dir, kClientStateFile);
    std::string bytes;
    DSRT_RETURN_IF_ERROR(read_whole_file(path, static_cast<size_t>(m.client_state_bytes), &bytes));
    if (bytes.size() != m.client_state_bytes)
      return Error(DSRT_ERR_CHECKPOINT, "'%s' is %zu bytes but the manifest says %llu (truncated)", path.c_str(),
                   bytes.size(), static_cast<unsigned long long>(m.client_state_bytes));
    if (crc32c(0, bytes.data(), bytes.size()) != m.client_state_crc)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch (the client state is damaged)", path.c_str());
    out->client_state.assign(bytes.begin(), bytes.end());
  }
  return Status::Ok();
}

Status commit(PartitionedState &engine, const Staged &staged) {
  if (engine.nvme_offload()) {
    // Into the swap files; a failure here (full disk) leaves some states replaced: load_checkpoint
    // then marks the engine unusable until a load succeeds.
    const size_t elems = static_cast<size_t>(engine.partitioning().partition_elems());
    for (size_t s = 0; s < staged.streams.size(); ++s)
      DSRT_RETURN_IF_ERROR(
          engine.write_partition_state(static_cast<int>(s) - 1, 0, elems, staged.streams[s].as<float>()));
  } else {
    // Host-resident states are written through their pointers; states in GPU memory (no host
    // pointer) through write_partition_state, one segment at a time from the host staging.
    Device &device = const_cast<Device &>(engine.device());
    const std::vector<OwnedSegment> segments = engine.partitioning().owned_segments(engine.part_rank());
    for (size_t s = 0; s < staged.streams.size(); ++s) {
      const int state = static_cast<int>(s) - 1;
      float *dst = state < 0 ? engine.master_partition() : engine.optimizer_state(state);
      if (checkpoint_test_hooks().states_without_host_pointer) dst = nullptr;
      const float *src = staged.streams[s].as<float>();
      for (const OwnedSegment &seg : segments) {
        const size_t count = static_cast<size_t>(seg.count);
        if (dst != nullptr)
          DSRT_RETURN_IF_ERROR(device.copy(dst + seg.part_offset, src + seg.part_offset, count * sizeof(float), nullptr));
        else
          DSRT_RETURN_IF_ERROR(engine.write_partition_state(state, static_cast<size_t>(seg.part_offset), count,
                                                            src + seg.part_offset));
      }
    }
    DSRT_RETURN_IF_ERROR(device.synchronize(nullptr));
  }
  const Manifest &m = staged.manifest;
  engine.set_counters(m.counters);
  // 1-bit Adam's worker and server errors are per rank and not saved: they restart at zero, as
  // DeepSpeed's OnebitAdam.load_state_dict drops them (so a load at any world size works); 0/1
  // Adam's accumulated update, learning-rate sums and interval policy restart with them.
  engine.onebit_reset_errors();
  DSRT_RETURN_IF_ERROR(commit_onebit_lamb(engine, staged.onebit_lamb));  // OneBitLamb keeps them (same world)
  const bool dynamic = engine.scaler_dynamic();
  if (dynamic && m.scaler_dynamic) {
    engine.set_scaler_state(m.scaler);
  } else if (dynamic != m.scaler_dynamic) {
    logf(DSRT_LOG_WARN, "load_checkpoint: the checkpoint was saved %s dynamic fp16 loss scaling and this engine runs "
         "%s it; the loss scale starts from the config", m.scaler_dynamic ? "with" : "without",
         dynamic ? "with" : "without");
  }
  engine.set_scheduler_iteration(m.scheduler_iteration);
  // The groups' hyperparameters as saved (torch's optimizer.load_state_dict restores param_groups too).
  DSRT_RETURN_IF_ERROR(engine.set_group_values(saved_group_values(m)));
  engine.set_client_state(staged.client_state.data(), staged.client_state.size());
  return commit_frozen(engine, staged.frozen);
}

}  // namespace

Status load_checkpoint(PartitionedState &engine, const std::string &dir, const std::string &tag_in) {
  if (!engine.built())
    return Error(DSRT_ERR_STATE, "load_checkpoint: the engine is not built; add every tensor and call dsrt_engine_build first");
  if (dir.empty()) return Error(DSRT_ERR_INVALID_ARGUMENT, "load_checkpoint: the folder is empty");
  if (engine.counters().micro_step != 0)
    return Error(DSRT_ERR_STATE, "load_checkpoint: called in the middle of a gradient accumulation (micro-step %lld); "
                 "load before the first micro-step or after a boundary",
                 static_cast<long long>(engine.counters().micro_step));
  Comm &comm = engine.comm();
  DSRT_RETURN_IF_ERROR(check_same_text(comm, dir + "\n" + tag_in, "checkpoint folders or tags"));
  std::string tag, tag_dir;
  DSRT_RETURN_IF_ERROR(agree_on_status(comm, resolve_tag_dir(dir, tag_in, &tag, &tag_dir))
                           .with_context("load_checkpoint (nothing was changed)"));
  DSRT_RETURN_IF_ERROR(check_same_text(comm, tag, "latest tags (ranks see different checkpoint folders)"));
  // An engine left unusable by a load that failed half-way may be loaded again: staging reads
  // only the gaps between segments from it, and a successful commit replaces everything else.
  const std::string earlier_failure = engine.load_failure();
  engine.set_load_failure("");
  Staged staged;
  Status status = agree_on_status(comm, stage(engine, tag_dir, &staged));
  if (!status.ok()) {
    engine.set_load_failure(earlier_failure);
    return status.with_context("load_checkpoint (nothing was changed)");
  }
  if (staged.manifest.optimizer != kOptimizerTypes[static_cast<int>(engine.config().optimizer.type)])
    logf(DSRT_LOG_WARN, "load_checkpoint: '%s' was saved with optimizer %s; this engine runs %s", tag_dir.c_str(),
         staged.manifest.optimizer.c_str(), kOptimizerTypes[static_cast<int>(engine.config().optimizer.type)]);
  // Every rank commits, and a rank whose commit failed (a full swap disk) holds part old, part
  // new state: all ranks agree, and every one marks its engine unusable until a load succeeds.
  status = agree_on_status(comm, commit(engine, staged));
  if (status.ok()) status = engine.refresh_working_copies();  // collective: only after every rank committed
  status = status.with_context("load_checkpoint '" + tag_dir + "': restoring the engine");
  if (!status.ok()) engine.set_load_failure(status.message());
  return status;
}

}  // namespace dsrt
