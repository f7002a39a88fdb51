// defines: save_checkpoint -- every rank streams its partition into a shard inside a temporary
// folder; after all ranks agree, the leader writes the manifest and swaps the folder into place,
// then updates latest. Any crash before the swap leaves the previous tag and latest untouched.
// States not exposed as host memory (NVMe swap files, GPU memory) are streamed out through
// PartitionedState::read_partition_state in bounded chunks.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <cerrno>
#include <vector>

#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_collective.h"
#include "ckpt/ckpt_frozen.h"
#include "ckpt/ckpt_onebit.h"
#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "config/schema.h"
#include "util/aligned_buffer.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

std::vector<std::string> state_names(const TrainConfig &config, int count) {
  std::vector<std::string> names;
  switch (config.optimizer.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW:
    case OptimizerType::Lamb:
    case OptimizerType::OneBitAdam:
    case OptimizerType::ZeroOneAdam:
    case OptimizerType::OneBitLamb: names = {"exp_avg", "exp_avg_sq"}; break;
    case OptimizerType::Lion: names = {"exp_avg"}; break;
    case OptimizerType::SGD: names = {"momentum_buffer"}; break;
    case OptimizerType::Adagrad: names = {"sum"}; break;
  }
  names.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i)
    if (names[static_cast<size_t>(i)].empty()) names[static_cast<size_t>(i)] = "state" + std::to_string(i);
  return names;
}

uint64_t new_save_id() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string hex_id(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, id);
  return buf;
}

// Every rank holds every element at stage 0, so only rank 0's shard exists; otherwise each rank
// writes its own.
bool rank_writes(const Partitioning &part, int rank) { return part.stage() == 0 ? rank == 0 : true; }

// as_rank: the shard this rank writes (its own, or rank 0's replicated one at stage 0).
Status write_shard(PartitionedState &engine, const std::string &path, int as_rank, uint64_t save_id, uint64_t block_bytes,
                   uint64_t *file_bytes, uint32_t *table_crc) {
  const Partitioning &part = engine.partitioning();
  const std::vector<OwnedSegment> segments = part.owned_segments(as_rank);
  ShardHeader header;
  header.rank = as_rank;
  header.world_size = engine.part_size();
  header.num_streams = 1 + static_cast<uint32_t>(engine.num_optimizer_states());
  for (const OwnedSegment &s : segments) header.elems_per_stream += static_cast<uint64_t>(s.count);
  header.block_bytes = block_bytes;
  header.save_id = save_id;
  Device &device = const_cast<Device &>(engine.device());
  const CopyToHost copy = [&device](void *dst, const void *src, size_t bytes) {
    DSRT_RETURN_IF_ERROR(device.copy(dst, src, bytes, nullptr));
    return device.synchronize(nullptr);
  };
  const CopyToHost plain = [](void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  };
  // A state the engine exposes as a host pointer (master_partition(), optimizer_state(i)) is
  // appended straight from it. Otherwise (NVMe swap files, or GPU memory) it is read through
  // PartitionedState::read_partition_state one block-sized chunk at a time, so a save never holds more than
  // a chunk and the writer's block in memory.
  auto resident = [&engine](int state) -> const float * {
    if (checkpoint_test_hooks().states_without_host_pointer) return nullptr;
    return state < 0 ? engine.master_partition() : engine.optimizer_state(state);
  };
  bool any_streamed = false;
  for (int state = -1; state < engine.num_optimizer_states(); ++state) any_streamed |= resident(state) == nullptr;
  AlignedBuffer chunk;
  const size_t chunk_elems = std::max<size_t>(1, static_cast<size_t>(block_bytes / sizeof(float)));
  if (any_streamed && !chunk.allocate(chunk_elems * sizeof(float), false))
    return Error(DSRT_ERR_OUT_OF_MEMORY, "save_checkpoint: cannot allocate a %zu-byte staging chunk",
                 chunk_elems * sizeof(float));
  ShardWriter writer;
  DSRT_RETURN_IF_ERROR(writer.open(path, header));
  for (uint32_t stream = 0; stream < header.num_streams; ++stream) {
    const int state = static_cast<int>(stream) - 1;
    if (const float *base = resident(state)) {
      for (const OwnedSegment &s : segments)
        DSRT_RETURN_IF_ERROR(writer.append(base + s.part_offset, static_cast<size_t>(s.count) * sizeof(float), copy));
      continue;
    }
    for (const OwnedSegment &s : segments) {
      for (size_t done = 0; done < static_cast<size_t>(s.count);) {
        const size_t n = std::min(chunk_elems, static_cast<size_t>(s.count) - done);
        DSRT_RETURN_IF_ERROR(
            engine.read_partition_state(state, static_cast<size_t>(s.part_offset) + done, n, chunk.as<float>()));
        DSRT_RETURN_IF_ERROR(writer.append(chunk.as<float>(), n * sizeof(float), plain));
        done += n;
      }
    }
  }
  DSRT_RETURN_IF_ERROR(writer.finish(file_bytes, table_crc));
  checkpoint_hook("shard-synced", static_cast<uint64_t>(engine.rank()));
  return Status::Ok();
}

// Removes leftovers of saves that died: temporary folders and latest.tmp always, displaced old folders only
// when their tag exists again (otherwise they are the only copy, see resolve_tag_dir).
void remove_stale_folders(const std::string &dir) {
  std::vector<std::string> names;
  if (!list_directory(dir, &names).ok()) return;
  for (const std::string &name : names) {
    bool stale = name.compare(0, 5, ".tmp-") == 0 || name == std::string(kLatestFile) + ".tmp";
    if (name.compare(0, 5, ".old-") == 0) {
      const size_t dash = name.find_last_of('-');
      if (dash != std::string::npos && dash > 5 && is_directory(join_file_path(dir, name.substr(5, dash - 5)))) stale = true;
    }
    if (!stale) continue;
    Status s = remove_tree(join_file_path(dir, name));
    if (!s.ok()) logf(DSRT_LOG_WARN, "checkpoint: cannot remove leftover '%s': %s", name.c_str(), s.message().c_str());
  }
}

Manifest build_manifest(const PartitionedState &engine, const std::string &tag, uint64_t save_id, uint64_t block_bytes,
                        const std::vector<uint64_t> &bytes, const std::vector<uint64_t> &crcs) {
  const TrainConfig &config = engine.config();
  const Partitioning &part = engine.partitioning();
  Manifest m;
  m.tag = tag;
  m.save_id = save_id;
  m.world_size = engine.part_size();  // MiCS: the shard group; replicas hold the same state
  m.zero_stage = part.stage();
  m.working_dtype = dtype_name(engine.working_dtype());
  m.optimizer = kOptimizerTypes[static_cast<int>(config.optimizer.type)];
  m.state_names = state_names(config, engine.num_optimizer_states());
  m.block_bytes = block_bytes;
  m.node_local = config.checkpoint.use_node_local_storage;
  m.counters = engine.counters();
  m.scaler = engine.scaler_state();
  m.scaler_dynamic = engine.scaler_dynamic();
  m.scheduler_iteration = engine.scheduler_iteration();
  m.client_state_bytes = engine.client_state().size();
  m.client_state_crc = crc32c(0, engine.client_state().data(), engine.client_state().size());
  if (config.zero.stage3_gather_16bit_weights_on_model_save) m.model_16bit = kModel16File;
  m.config_json = config.effective_json.empty() ? "{}" : config.effective_json;
  for (size_t t = 0; t < engine.num_tensors(); ++t)
    m.tensors.push_back({engine.tensor_name(t), engine.tensor_shape(t), engine.tensor_numel(t), engine.tensor_group(t)});
  for (GroupValues &values : engine.group_values()) {
    ManifestGroup group;
    group.values = std::move(values);
    m.groups.push_back(std::move(group));
  }
  for (int r = 0; r < engine.part_size(); ++r) {
    if (!rank_writes(part, r)) continue;
    ManifestShard shard;
    shard.rank = r;
    shard.file = shard_file_name(r);
    shard.bytes = bytes[static_cast<size_t>(r)];
    shard.table_crc = static_cast<uint32_t>(crcs[static_cast<size_t>(r)]);
    for (const OwnedSegment &s : part.owned_segments(r))
      shard.segments.push_back({static_cast<int64_t>(s.tensor), s.tensor_begin, s.count});
    m.shards.push_back(std::move(shard));
  }
  return m;
}

// The leader's part after every shard is durable: manifest, client state, then publication as
// one step. Everything that can fail for lack of space (the files inside the temporary folder and
// latest.tmp) is written and fsynced first; then the folder swap and the rename of latest.tmp over
// latest. If either of those fails, the swap is undone: the save fails with the previous tag and
// latest as they were, and no temporary file left (the caller removes the temporary folder).
Status publish(const PartitionedState &engine, const std::string &dir, const std::string &temp_dir, const std::string &tag,
               const Manifest &manifest) {
  const std::vector<uint8_t> &client = engine.client_state();
  DSRT_RETURN_IF_ERROR(write_file_synced(join_file_path(temp_dir, kClientStateFile), client.data(), client.size()));
  DSRT_RETURN_IF_ERROR(write_manifest(temp_dir, manifest));
  DSRT_RETURN_IF_ERROR(sync_directory(temp_dir));
  const std::string latest = join_file_path(dir, kLatestFile);
  const std::string latest_temp = latest + ".tmp";
  const std::string latest_text = tag + "\n";
  DSRT_RETURN_IF_ERROR(write_file_synced(latest_temp, latest_text.data(), latest_text.size()));
  checkpoint_hook("manifest", 0);
  DirectorySwap swap;
  Status status = swap.swap(temp_dir, join_file_path(dir, tag),
                            join_file_path(dir, ".old-" + tag + "-" + hex_id(manifest.save_id)));
  if (status.ok()) {
    checkpoint_hook("published", 0);
    if (::rename(latest_temp.c_str(), latest.c_str()) != 0) {
      status = Error(DSRT_ERR_IO, "cannot rename '%s' into place: %s", latest_temp.c_str(), std::strerror(errno));
      Status undone = swap.undo();  // latest still names the previous tag: put its folder back
      if (!undone.ok()) status = status.with_context("and then " + undone.message());
    }
  }
  if (!status.ok()) {
    ::unlink(latest_temp.c_str());
    return status;
  }
  // Both renames are done: the save is published. A folder fsync that fails now cannot be undone
  // without unpublishing what readers may already see, so it is reported as a warning.
  Status synced = sync_directory(dir);
  if (!synced.ok())
    logf(DSRT_LOG_WARN, "checkpoint '%s' is saved, but its folder could not be fsynced: %s", tag.c_str(),
         synced.message().c_str());
  checkpoint_hook("latest", 0);
  Status cleaned = swap.commit();
  if (!cleaned.ok())
    logf(DSRT_LOG_WARN, "checkpoint '%s' is saved, but the folder it replaced was not removed (the next save "
         "removes it): %s", tag.c_str(), cleaned.message().c_str());
  return Status::Ok();
}

}  // namespace

Status save_checkpoint(PartitionedState &engine, const std::string &dir, const std::string &tag_in) {
  if (!engine.built())
    return Error(DSRT_ERR_STATE, "save_checkpoint: the engine is not built; call dsrt_engine_build first");
  if (dir.empty()) return Error(DSRT_ERR_INVALID_ARGUMENT, "save_checkpoint: the folder is empty");
  if (engine.counters().micro_step != 0)
    return Error(DSRT_ERR_STATE,
                 "save_checkpoint: called after micro-step %lld of %lld of an accumulation; accumulated gradients are "
                 "not part of a checkpoint, so save after the step that ends the accumulation",
                 static_cast<long long>(engine.counters().micro_step),
                 static_cast<long long>(engine.config().gradient_accumulation_steps));
  const std::string tag =
      tag_in.empty() ? "global_step" + std::to_string(static_cast<long long>(engine.counters().global_step)) : tag_in;
  DSRT_RETURN_IF_ERROR(validate_tag(tag));
  Comm &comm = engine.comm();
  DSRT_RETURN_IF_ERROR(check_same_text(comm, dir + "\n" + tag, "checkpoint folders or tags"));
  if (engine.nvme_offload()) {
    // After a step that failed writing swap files, some sub-groups hold new values and the rest
    // old ones; such a mix must not be saved. An empty write is the engine's check for that.
    const Status ready = engine.write_partition_state(-1, 0, 0, nullptr);
    DSRT_RETURN_IF_ERROR(agree_on_status(comm, ready).with_context("save_checkpoint (nothing was saved)"));
  }

  const TrainConfig &config = engine.config();
  bool leader = comm.rank() == 0;
  if (config.checkpoint.use_node_local_storage) DSRT_RETURN_IF_ERROR(is_node_leader(comm, &leader));
  uint64_t save_id = comm.rank() == 0 ? new_save_id() : 0;
  DSRT_RETURN_IF_ERROR(comm.broadcast_bytes(&save_id, sizeof save_id, 0));
  const uint64_t block_bytes =
      checkpoint_test_hooks().block_bytes != 0 ? checkpoint_test_hooks().block_bytes : kDefaultBlockBytes;
  const std::string temp_dir = join_file_path(dir, ".tmp-" + tag + "-" + hex_id(save_id));

  Status status;
  if (leader) {
    status = make_directories(dir);
    if (status.ok()) {
      remove_stale_folders(dir);
      status = make_directories(temp_dir);
    }
  }
  DSRT_RETURN_IF_ERROR(agree_on_status(comm, status).with_context("save_checkpoint: preparing '" + dir + "'"));

  // One shard per rank of the partitioning group (MiCS: the shard group; only its first replica,
  // the first shard group, writes, the others hold the same state).
  const size_t world = static_cast<size_t>(engine.part_size());
  const int part_rank = engine.part_rank();
  std::vector<uint64_t> bytes(world, 0), crcs(world, 0);
  // With node-local storage every node needs rank 0's replicated stage-0 shard: each node's
  // leader writes the same bytes (its replica) into its own folder.
  const bool replicated = engine.partitioning().stage() == 0;
  const int as_rank = replicated ? 0 : part_rank;
  if ((!replicated && engine.replica_index() == 0) || comm.rank() == 0 ||
      (config.checkpoint.use_node_local_storage && leader)) {
    uint64_t b = 0;
    uint32_t c = 0;
    status = write_shard(engine, join_file_path(temp_dir, shard_file_name(as_rank)), as_rank, save_id, block_bytes, &b, &c);
    if (as_rank == part_rank) {
      bytes[static_cast<size_t>(part_rank)] = b;
      crcs[static_cast<size_t>(part_rank)] = c;
    }
  }
  status = agree_on_status(comm, status);
  if (status.ok() && config.zero.stage3_gather_16bit_weights_on_model_save)
    status = save_16bit_model(engine, join_file_path(temp_dir, kModel16File), leader);
  std::vector<ManifestFrozen> frozen;
  if (status.ok()) status = agree_on_status(comm, save_frozen(engine, temp_dir, leader, &frozen));
  if (status.ok()) status = agree_on_status(comm, save_onebit_lamb(engine, temp_dir));
  if (status.ok()) status = comm.all_reduce_u64(bytes.data(), world, ReduceOp::Max);
  if (status.ok()) status = comm.all_reduce_u64(crcs.data(), world, ReduceOp::Max);
  if (!status.ok()) {
    if (leader) (void)remove_tree(temp_dir);
    return status.with_context("save_checkpoint '" + join_file_path(dir, tag) + "'");
  }
  status = Status::Ok();
  if (leader) {
    Manifest manifest = build_manifest(engine, tag, save_id, block_bytes, bytes, crcs);
    manifest.frozen = std::move(frozen);
    status = publish(engine, dir, temp_dir, tag, manifest);
  }
  status = agree_on_status(comm, status);
  if (!status.ok() && leader) (void)remove_tree(temp_dir);
  return status.with_context("save_checkpoint '" + join_file_path(dir, tag) + "'");
}

}  // namespace dsrt
