// defines: save_onebit_lamb, stage_onebit_lamb, commit_onebit_lamb (see ckpt_onebit.h).
#include "ckpt/ckpt_onebit.h"

#include <cstring>

#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"
#include "config/schema.h"
#include "util/log.h"

namespace dsrt {
namespace {

std::string file_name(int rank) { return "onebit_lamb_rank" + std::to_string(rank) + ".bin"; }

bool is_lamb(const PartitionedState &engine) { return engine.config().optimizer.type == OptimizerType::OneBitLamb; }

}  // namespace

Status save_onebit_lamb(const PartitionedState &engine, const std::string &dir) {
  if (!is_lamb(engine)) return Status::Ok();
  std::vector<uint8_t> bytes;
  DSRT_RETURN_IF_ERROR(engine.onebit_lamb_serialize(&bytes).with_context("saving this rank's OneBitLamb state"));
  const uint32_t crc = crc32c(0, bytes.data(), bytes.size());
  bytes.resize(bytes.size() + sizeof crc);
  std::memcpy(bytes.data() + bytes.size() - sizeof crc, &crc, sizeof crc);
  return write_file_synced(join_file_path(dir, file_name(engine.rank())), bytes.data(), bytes.size())
      .with_context("saving this rank's OneBitLamb state");
}

Status stage_onebit_lamb(const PartitionedState &engine, const Manifest &m, const std::string &tag_dir, std::vector<uint8_t> *out) {
  out->clear();
  if (!is_lamb(engine)) return Status::Ok();
  std::string path = join_file_path(tag_dir, file_name(engine.rank()));
  if (!path_exists(path)) path = join_file_path(tag_dir, file_name(0));
  if (!path_exists(path)) {
    if (m.optimizer == kOptimizerTypes[static_cast<int>(OptimizerType::OneBitLamb)])
      return Error(DSRT_ERR_CHECKPOINT, "'%s' was saved by OneBitLamb but holds no %s or %s (the checkpoint is incomplete)",
                   tag_dir.c_str(), file_name(engine.rank()).c_str(), file_name(0).c_str());
    logf(DSRT_LOG_WARN, "load_checkpoint: '%s' was saved by %s: OneBitLamb's scaling coefficients, trust-ratio "
         "averages and fresh variance keep their current values", tag_dir.c_str(), m.optimizer.c_str());
    return Status::Ok();
  }
  std::string text;
  DSRT_RETURN_IF_ERROR(read_whole_file(path, size_t{1} << 40, &text));
  uint32_t crc = 0;
  if (text.size() < sizeof crc) return Error(DSRT_ERR_CHECKPOINT, "'%s' is truncated", path.c_str());
  std::memcpy(&crc, text.data() + text.size() - sizeof crc, sizeof crc);
  out->assign(text.begin(), text.end() - sizeof crc);
  if (crc32c(0, out->data(), out->size()) != crc)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch (the file is damaged)", path.c_str());
  return Status::Ok();
}

Status commit_onebit_lamb(PartitionedState &engine, const std::vector<uint8_t> &staged) {
  if (staged.empty()) return Status::Ok();
  return engine.onebit_lamb_restore(staged).with_context("restoring OneBitLamb's state");
}

}  // namespace dsrt
