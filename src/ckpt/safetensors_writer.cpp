// defines: SafetensorsWriter (header JSON through cJSON, streamed data, atomic publish).
#include "ckpt/safetensors_writer.h"

#include <cjson/cJSON.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/half.h"

namespace dsrt {

const char *safetensors_dtype_name(dsrt_dtype dtype) {
  switch (dtype) {
    case DSRT_F16: return "F16";
    case DSRT_BF16: return "BF16";
    default: return "F32";
  }
}

Status SafetensorsWriter::open(const std::string &path, const std::vector<SafetensorsEntry> &entries,
                               const std::map<std::string, std::string> &metadata) {
  cJSON *root = cJSON_CreateObject();
  if (!metadata.empty()) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    for (const auto &[k, v] : metadata) cJSON_AddStringToObject(meta, k.c_str(), v.c_str());
  }
  uint64_t offset = 0;
  Status status;
  for (const SafetensorsEntry &e : entries) {
    if (e.name.empty() || e.name == "__metadata__" || cJSON_GetObjectItemCaseSensitive(root, e.name.c_str())) {
      status = Error(DSRT_ERR_INVALID_ARGUMENT, "safetensors '%s': tensor name '%s' is empty, reserved or repeated",
                     path.c_str(), e.name.c_str());
      break;
    }
    uint64_t n = 1;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dtype", safetensors_dtype_name(e.dtype));
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    bool overflow = false;
    for (int64_t d : e.shape) {
      cJSON_AddItemToArray(shape, cJSON_CreateNumber(static_cast<double>(d)));
      overflow |= d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
    }
    uint64_t end = 0;
    overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(e.dtype)), &n) ||
                __builtin_add_overflow(offset, n, &end) || end > (uint64_t{1} << 62);
    if (overflow) {
      cJSON_Delete(o);
      status = Error(DSRT_ERR_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' does not fit in a file (its shape or the "
                     "total size overflows)", path.c_str(), e.name.c_str());
      break;
    }
    cJSON *offsets = cJSON_AddArrayToObject(o, "data_offsets");
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber(static_cast<double>(offset)));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber(static_cast<double>(end)));
    cJSON_AddItemToObject(root, e.name.c_str(), o);
    offset = end;
  }
  char *printed = status.ok() ? cJSON_PrintUnformatted(root) : nullptr;
  cJSON_Delete(root);
  DSRT_RETURN_IF_ERROR(status);
  if (printed == nullptr) return Error(DSRT_ERR_OUT_OF_MEMORY, "safetensors '%s': cannot print the header", path.c_str());
  std::string header(printed);
  cJSON_free(printed);
  while (header.size() % 8 != 0) header += ' ';

  path_ = path;
  temp_ = path + ".tmp";
  DSRT_RETURN_IF_ERROR(File::create(temp_, &file_));
  finished_ = false;
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  DSRT_RETURN_IF_ERROR(file_.write_all(length, 8));
  DSRT_RETURN_IF_ERROR(file_.write_all(header.data(), header.size()));
  expected_ = offset;
  written_ = 0;
  return Status::Ok();
}

Status SafetensorsWriter::append(const void *data, size_t bytes) {
  if (written_ + bytes > expected_)
    return Error(DSRT_ERR_INTERNAL, "safetensors '%s': more data than the header announced", path_.c_str());
  DSRT_RETURN_IF_ERROR(file_.write_all(data, bytes));
  written_ += bytes;
  return Status::Ok();
}

Status SafetensorsWriter::finish() {
  if (written_ != expected_)
    return Error(DSRT_ERR_INTERNAL, "safetensors '%s': %llu data bytes written, header announced %llu", path_.c_str(),
                 static_cast<unsigned long long>(written_), static_cast<unsigned long long>(expected_));
  DSRT_RETURN_IF_ERROR(file_.sync());
  DSRT_RETURN_IF_ERROR(file_.close());
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    return Error(DSRT_ERR_IO, "cannot rename '%s' into place: %s", path_.c_str(), std::strerror(errno));
  finished_ = true;
  const size_t slash = path_.find_last_of('/');
  return sync_directory(slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash)));
}

void SafetensorsWriter::abandon() {
  if (finished_) return;
  (void)file_.close();
  ::unlink(temp_.c_str());
  finished_ = true;
}

}  // namespace dsrt
