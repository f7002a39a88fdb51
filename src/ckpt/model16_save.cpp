// defines: save_16bit_model -- the working weights of every tensor (frozen ones included) (16-bit under fp16/bf16, fp32
// otherwise), gathered one tensor at a time and streamed into one safetensors file.
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_collective.h"
#include "ckpt/safetensors_writer.h"
#include "util/half.h"

namespace dsrt {
namespace {

// The full working copy of tensor t into out (numel * dtype bytes). Collective at stage 3.
Status gather_working_tensor(PartitionedState &engine, size_t t, std::vector<uint8_t> *out) {
  const Partitioning &part = engine.partitioning();
  const dsrt_dtype dtype = engine.working_dtype();
  const size_t wsize = dtype_size(dtype);
  const int64_t numel = engine.tensor_numel(t);
  out->assign(static_cast<size_t>(numel) * wsize, 0);
  Device &device = const_cast<Device &>(engine.device());
  const char *working = static_cast<const char *>(engine.working_copy());
  if (part.flat()) {
    DSRT_RETURN_IF_ERROR(device.copy(out->data(), working + part.flat_layout().tensor_offset(t) * static_cast<int64_t>(wsize),
                                     out->size(), nullptr));
    return device.synchronize(nullptr);
  }
  const int world = engine.part_size();  // MiCS: the shard group holds the whole tensor
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = static_cast<size_t>(part.shard_layout().owned_range(t, r).size());
  const OwnedSegment mine = part.owned_piece(t, engine.part_rank());
  std::vector<uint8_t> send(static_cast<size_t>(mine.count) * wsize + 1);
  if (mine.count > 0 && working == nullptr) {
    // offload_param between steps: the shard is copied from host memory ("cpu", or "nvme" under
    // max_in_cpu) or streamed from its swap file, one tensor at a time.
    std::vector<uint8_t> shard(static_cast<size_t>(part.shard_layout().shard_size(t)) * wsize);
    DSRT_RETURN_IF_ERROR(engine.read_working_shard(t, shard.data()));
    const int64_t at = mine.part_offset - part.shard_layout().shard_offset(t);
    std::copy(shard.begin() + at * static_cast<int64_t>(wsize),
              shard.begin() + (at + mine.count) * static_cast<int64_t>(wsize), send.begin());
  } else if (mine.count > 0) {
    DSRT_RETURN_IF_ERROR(device.copy(send.data(), working + mine.part_offset * static_cast<int64_t>(wsize),
                                     static_cast<size_t>(mine.count) * wsize, nullptr));
    DSRT_RETURN_IF_ERROR(device.synchronize(nullptr));
  }
  if (world == 1) {
    std::copy(send.begin(), send.begin() + static_cast<std::ptrdiff_t>(out->size()), out->begin());
    return Status::Ok();
  }
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(engine.partition_comm().all_gather_v(send.data(), out->data(), counts.data(), dtype, &handle));
  return handle->wait();
}

}  // namespace

Status save_16bit_model(PartitionedState &engine, const std::string &path, bool write_here) {
  if (!engine.built())
    return Error(DSRT_ERR_STATE, "save_16bit_model: the engine is not built; call dsrt_engine_build first");
  if (path.empty()) return Error(DSRT_ERR_INVALID_ARGUMENT, "save_16bit_model: the path is empty");
  DSRT_RETURN_IF_ERROR(check_same_text(engine.comm(), path, "16-bit model paths"));
  if (engine.num_tensors() == 0)
    return Error(DSRT_ERR_STATE, "save_16bit_model: the engine has no tensors; refusing to write an empty model");
  std::vector<SafetensorsEntry> entries;
  for (size_t t = 0; t < engine.num_tensors(); ++t)
    entries.push_back({engine.tensor_name(t), engine.tensor_shape(t), engine.working_dtype()});
  for (size_t i = 0; i < engine.num_frozen(); ++i)  // frozen tensors after the trainable ones
    entries.push_back({engine.frozen_name(i), engine.frozen_shape(i), engine.working_dtype()});
  SafetensorsWriter writer;
  Status local;
  if (write_here)
    local = writer.open(path, entries,
                        {{"format", "pt"},
                         {"producer", "dsrt"},
                         {"global_step", std::to_string(static_cast<long long>(engine.counters().global_step))}});
  std::vector<uint8_t> buffer;
  for (size_t t = 0; t < engine.num_tensors(); ++t) {
    DSRT_RETURN_IF_ERROR(gather_working_tensor(engine, t, &buffer)
                             .with_context("save_16bit_model: gathering '" + engine.tensor_name(t) + "'"));
    if (write_here && local.ok()) local = writer.append(buffer.data(), buffer.size());
  }
  for (size_t i = 0; i < engine.num_frozen(); ++i) {
    DSRT_RETURN_IF_ERROR(engine.read_frozen_working(i, &buffer)
                             .with_context("save_16bit_model: gathering frozen tensor '" + engine.frozen_name(i) + "'"));
    if (write_here && local.ok()) local = writer.append(buffer.data(), buffer.size());
  }
  if (write_here && local.ok()) local = writer.finish();
  return agree_on_status(engine.comm(), local).with_context("save_16bit_model '" + path + "'");
}

}  // namespace dsrt
