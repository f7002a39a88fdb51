// defines: Manifest's JSON form (cJSON), its layout index and checks, and its files.
#include "ckpt/manifest.h"

#include <cjson/cJSON.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cinttypes>
#include <cstring>
#include <memory>
#include <tuple>

#include "ckpt/crc32c.h"
#include "ckpt/file_io.h"

namespace dsrt {
namespace {

struct JsonDeleter {
  void operator()(cJSON *j) const { cJSON_Delete(j); }
};
using JsonPtr = std::unique_ptr<cJSON, JsonDeleter>;

void add_int(cJSON *obj, const char *key, int64_t v) { cJSON_AddNumberToObject(obj, key, static_cast<double>(v)); }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53
constexpr int64_t kMaxCount = 1LL << 53;               // steps, iterations, byte counts

// Field readers that fail with a message naming the file and the key.
struct Reader {
  const std::string &path;
  Status status;

  const cJSON *item(const cJSON *obj, const char *key) {
    const cJSON *j = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : nullptr;
    if (j == nullptr && status.ok())
      status = Error(DSRT_ERR_CHECKPOINT, "'%s': missing field \"%s\"", path.c_str(), key);
    return j;
  }
  int64_t integer(const cJSON *obj, const char *key) { return integer_value(item(obj, key), key); }
  // An integral JSON number inside [-2^53, 2^53] (doubles hold every integer there exactly; the
  // conversion of anything larger to int64_t could overflow).
  int64_t integer_value(const cJSON *j, const char *what) {
    if (j == nullptr) return 0;
    const double v = cJSON_IsNumber(j) ? j->valuedouble : 0.5;
    if (!(v >= -kMaxExactInteger && v <= kMaxExactInteger) || v != std::floor(v)) {
      if (status.ok())
        status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not an integer in -2^53..2^53", path.c_str(), what);
      return 0;
    }
    return static_cast<int64_t>(v);
  }
  // integer() that must lie in [lo, hi].
  int64_t ranged(const cJSON *obj, const char *key, int64_t lo, int64_t hi) {
    const int64_t v = integer(obj, key);
    if (status.ok() && (v < lo || v > hi))
      status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is %lld, outside %lld..%lld (the manifest is not one "
                     "dsrt wrote)", path.c_str(), key, static_cast<long long>(v), static_cast<long long>(lo),
                     static_cast<long long>(hi));
    return v;
  }
  double number(const cJSON *obj, const char *key) {
    const cJSON *j = item(obj, key);
    if (j == nullptr) return 0;
    if (!cJSON_IsNumber(j)) {
      if (status.ok()) status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not a number", path.c_str(), key);
      return 0;
    }
    return j->valuedouble;
  }
  std::string string(const cJSON *obj, const char *key) {
    const cJSON *j = item(obj, key);
    if (j == nullptr) return "";
    if (!cJSON_IsString(j)) {
      if (status.ok()) status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not a string", path.c_str(), key);
      return "";
    }
    return j->valuestring;
  }
  uint64_t hex(const cJSON *obj, const char *key) {
    const std::string s = string(obj, key);
    if (!status.ok()) return 0;
    char *end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 16);
    if (s.empty() || *end != '\0') {
      status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not a hex number", path.c_str(), key);
      return 0;
    }
    return v;
  }
  bool boolean(const cJSON *obj, const char *key) {
    const cJSON *j = item(obj, key);
    if (j == nullptr) return false;
    if (!cJSON_IsBool(j)) {
      if (status.ok()) status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not a boolean", path.c_str(), key);
      return false;
    }
    return cJSON_IsTrue(j);
  }
  const cJSON *array(const cJSON *obj, const char *key) {
    const cJSON *j = item(obj, key);
    if (j != nullptr && !cJSON_IsArray(j)) {
      if (status.ok()) status = Error(DSRT_ERR_CHECKPOINT, "'%s': field \"%s\" is not a list", path.c_str(), key);
      return nullptr;
    }
    return j;
  }
};

}  // namespace

uint64_t ManifestShard::elems() const {
  uint64_t n = 0;
  for (const ManifestSegment &s : segments) n += static_cast<uint64_t>(s.count);
  return n;
}

std::string shard_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "zero_rank_%05d.shard", rank);
  return buf;
}

int Manifest::frozen_index(const std::string &name) const {
  for (size_t t = 0; t < frozen.size(); ++t)
    if (frozen[t].name == name) return static_cast<int>(t);
  return -1;
}

int Manifest::tensor_index(const std::string &name) const {
  for (size_t t = 0; t < tensors.size(); ++t)
    if (tensors[t].name == name) return static_cast<int>(t);
  return -1;
}

std::string Manifest::to_json() const {
  JsonPtr root(cJSON_CreateObject());
  cJSON *r = root.get();
  cJSON_AddStringToObject(r, "format", "dsrt-checkpoint");
  add_int(r, "format_version", format_version);
  cJSON_AddStringToObject(r, "tag", tag.c_str());
  cJSON_AddStringToObject(r, "save_id", hex64(save_id).c_str());
  add_int(r, "world_size", world_size);
  add_int(r, "zero_stage", zero_stage);
  cJSON_AddStringToObject(r, "master_dtype", "f32");
  cJSON_AddStringToObject(r, "working_dtype", working_dtype.c_str());
  cJSON_AddStringToObject(r, "optimizer", optimizer.c_str());
  cJSON *streams = cJSON_AddArrayToObject(r, "streams");
  cJSON_AddItemToArray(streams, cJSON_CreateString("fp32_master"));
  for (const std::string &s : state_names) cJSON_AddItemToArray(streams, cJSON_CreateString(s.c_str()));
  add_int(r, "block_bytes", static_cast<int64_t>(block_bytes));
  cJSON_AddBoolToObject(r, "node_local_storage", node_local);

  cJSON *c = cJSON_AddObjectToObject(r, "counters");
  add_int(c, "global_step", counters.global_step);
  add_int(c, "applied_steps", counters.applied_steps);
  add_int(c, "skipped_steps", counters.skipped_steps);
  add_int(c, "micro_step", counters.micro_step);
  cJSON *ls = cJSON_AddObjectToObject(r, "loss_scaler");
  cJSON_AddBoolToObject(ls, "dynamic", scaler_dynamic);
  cJSON_AddNumberToObject(ls, "cur_scale", scaler.cur_scale);  // cJSON prints doubles that round-trip
  add_int(ls, "cur_iter", scaler.cur_iter);
  add_int(ls, "last_overflow_iter", scaler.last_overflow_iter);
  add_int(ls, "cur_hysteresis", scaler.cur_hysteresis);
  cJSON *sc = cJSON_AddObjectToObject(r, "scheduler");
  add_int(sc, "last_batch_iteration", scheduler_iteration);
  cJSON *cs = cJSON_AddObjectToObject(r, "client_state");
  cJSON_AddStringToObject(cs, "file", kClientStateFile);
  add_int(cs, "bytes", static_cast<int64_t>(client_state_bytes));
  cJSON_AddStringToObject(cs, "crc32c", hex64(client_state_crc).c_str());
  cJSON_AddStringToObject(r, "model_16bit", model_16bit.c_str());

  cJSON *ts = cJSON_AddArrayToObject(r, "tensors");
  for (const ManifestTensor &t : tensors) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t.name.c_str());
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int64_t d : t.shape) cJSON_AddItemToArray(shape, cJSON_CreateNumber(static_cast<double>(d)));
    add_int(o, "numel", t.numel);
    add_int(o, "group", t.group);
    cJSON_AddItemToArray(ts, o);
  }
  if (!frozen.empty()) {
    cJSON_AddStringToObject(r, "frozen_file", kFrozenFile);
    cJSON *fs = cJSON_AddArrayToObject(r, "frozen_tensors");
    for (const ManifestFrozen &t : frozen) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "name", t.name.c_str());
      cJSON *shape = cJSON_AddArrayToObject(o, "shape");
      for (int64_t d : t.shape) cJSON_AddItemToArray(shape, cJSON_CreateNumber(static_cast<double>(d)));
      add_int(o, "numel", t.numel);
      cJSON_AddBoolToObject(o, "frozen", 1);
      add_int(o, "offset", static_cast<int64_t>(t.offset));
      cJSON_AddStringToObject(o, "crc32c", hex64(t.crc).c_str());
      cJSON_AddItemToArray(fs, o);
    }
  }
  cJSON *gs = cJSON_AddArrayToObject(r, "param_groups");
  for (const ManifestGroup &g : groups) {
    cJSON *o = cJSON_CreateObject();
    for (const auto &v : g.values) cJSON_AddNumberToObject(o, v.first.c_str(), v.second);
    cJSON_AddItemToArray(gs, o);
  }
  cJSON *ss = cJSON_AddArrayToObject(r, "shards");
  for (const ManifestShard &s : shards) {
    cJSON *o = cJSON_CreateObject();
    add_int(o, "rank", s.rank);
    cJSON_AddStringToObject(o, "file", s.file.c_str());
    add_int(o, "bytes", static_cast<int64_t>(s.bytes));
    cJSON_AddStringToObject(o, "table_crc32c", hex64(s.table_crc).c_str());
    cJSON *segs = cJSON_AddArrayToObject(o, "segments");  // [tensor, begin, count]
    for (const ManifestSegment &g : s.segments) {
      cJSON *a = cJSON_CreateArray();
      cJSON_AddItemToArray(a, cJSON_CreateNumber(static_cast<double>(g.tensor)));
      cJSON_AddItemToArray(a, cJSON_CreateNumber(static_cast<double>(g.begin)));
      cJSON_AddItemToArray(a, cJSON_CreateNumber(static_cast<double>(g.count)));
      cJSON_AddItemToArray(segs, a);
    }
    cJSON_AddItemToArray(ss, o);
  }
  cJSON *config = cJSON_Parse(config_json.c_str());
  if (config != nullptr) cJSON_AddItemToObject(r, "config", config);
  else cJSON_AddStringToObject(r, "config", config_json.c_str());

  char *text = cJSON_Print(r);
  std::string out = text ? text : "";
  cJSON_free(text);
  out += "\n";
  return out;
}

Status Manifest::parse(const std::string &text, const std::string &path, Manifest *out) {
  const char *end = nullptr;
  JsonPtr root(cJSON_ParseWithLengthOpts(text.data(), text.size(), &end, false));
  if (!root || !cJSON_IsObject(root.get()))
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is not valid JSON", path.c_str());
  for (const char *p = end; p != nullptr && p < text.data() + text.size(); ++p)
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t')
      return Error(DSRT_ERR_CHECKPOINT, "'%s' has bytes after its JSON object (at offset %zu)", path.c_str(),
                   static_cast<size_t>(p - text.data()));
  Reader rd{path, Status::Ok()};
  const cJSON *r = root.get();
  Manifest m;
  if (rd.string(r, "format") != "dsrt-checkpoint" && rd.status.ok())
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is not a dsrt checkpoint manifest", path.c_str());
  m.format_version = static_cast<int>(rd.ranged(r, "format_version", 0, 1 << 30));
  if (rd.status.ok() && m.format_version != kCheckpointFormatVersion)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' has format version %d; this dsrt reads version %d", path.c_str(),
                 m.format_version, kCheckpointFormatVersion);
  m.tag = rd.string(r, "tag");
  m.save_id = rd.hex(r, "save_id");
  m.world_size = static_cast<int>(rd.ranged(r, "world_size", 1, kMaxManifestWorldSize));
  m.zero_stage = static_cast<int>(rd.ranged(r, "zero_stage", 0, 3));
  m.working_dtype = rd.string(r, "working_dtype");
  if (rd.status.ok() && m.working_dtype != "fp32" && m.working_dtype != "fp16" && m.working_dtype != "bf16")
    return Error(DSRT_ERR_CHECKPOINT, "'%s': working_dtype \"%s\" is not fp32, fp16 or bf16", path.c_str(),
                 m.working_dtype.c_str());
  m.optimizer = rd.string(r, "optimizer");
  if (const cJSON *streams = rd.array(r, "streams")) {
    int i = 0;
    for (const cJSON *s = streams->child; s; s = s->next, ++i)
      if (i > 0) m.state_names.push_back(cJSON_IsString(s) ? s->valuestring : "?");
    if (i < 1 || m.state_names.size() > kMaxManifestStates)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': \"streams\" lists %d streams; a checkpoint has 1 to %zu", path.c_str(), i,
                   kMaxManifestStates + 1);
  }
  m.block_bytes = static_cast<uint64_t>(rd.ranged(r, "block_bytes", 4, kMaxManifestBlockBytes));
  if (rd.status.ok() && m.block_bytes % 4 != 0)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': block_bytes %llu is not a multiple of 4", path.c_str(),
                 static_cast<unsigned long long>(m.block_bytes));
  m.node_local = rd.boolean(r, "node_local_storage");
  const cJSON *c = rd.item(r, "counters");
  m.counters.global_step = rd.ranged(c, "global_step", 0, kMaxCount);
  m.counters.applied_steps = rd.ranged(c, "applied_steps", 0, m.counters.global_step);
  m.counters.skipped_steps = rd.ranged(c, "skipped_steps", 0, m.counters.global_step);
  m.counters.micro_step = rd.ranged(c, "micro_step", 0, 0);  // saves happen at boundaries only
  const cJSON *ls = rd.item(r, "loss_scaler");
  m.scaler_dynamic = rd.boolean(ls, "dynamic");
  m.scaler.cur_scale = rd.number(ls, "cur_scale");
  if (rd.status.ok() && !(m.scaler.cur_scale > 0 && m.scaler.cur_scale <= std::numeric_limits<float>::max()))
    return Error(DSRT_ERR_CHECKPOINT, "'%s': loss_scaler.cur_scale %g is not a positive finite fp32 value",
                 path.c_str(), m.scaler.cur_scale);
  m.scaler.cur_iter = rd.ranged(ls, "cur_iter", 0, kMaxCount);
  m.scaler.last_overflow_iter = rd.ranged(ls, "last_overflow_iter", -1, kMaxCount);
  m.scaler.cur_hysteresis = rd.ranged(ls, "cur_hysteresis", 0, 1LL << 31);
  // The schedule steps once per applied step, from -1 (not stepped yet).
  m.scheduler_iteration = rd.ranged(rd.item(r, "scheduler"), "last_batch_iteration", -1, m.counters.global_step);
  const cJSON *cs = rd.item(r, "client_state");
  m.client_state_bytes = static_cast<uint64_t>(rd.ranged(cs, "bytes", 0, kMaxCount));
  m.client_state_crc = static_cast<uint32_t>(rd.hex(cs, "crc32c"));
  m.model_16bit = rd.string(r, "model_16bit");
  if (const cJSON *config = rd.item(r, "config")) {
    char *printed = cJSON_IsString(config) ? nullptr : cJSON_PrintUnformatted(config);
    m.config_json = printed ? printed : (cJSON_IsString(config) ? config->valuestring : "");
    cJSON_free(printed);
  }
  if (const cJSON *ts = rd.array(r, "tensors")) {
    for (const cJSON *o = ts->child; o && rd.status.ok(); o = o->next) {
      ManifestTensor t;
      t.name = rd.string(o, "name");
      if (const cJSON *shape = rd.array(o, "shape")) {
        for (const cJSON *d = shape->child; d && rd.status.ok(); d = d->next)
          t.shape.push_back(rd.integer_value(d, "shape"));
        if (t.shape.size() > kMaxManifestDims)
          rd.status = Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' has %zu dimensions; at most %zu are possible",
                            path.c_str(), t.name.c_str(), t.shape.size(), kMaxManifestDims);
      }
      t.numel = rd.ranged(o, "numel", 0, kMaxManifestElems);
      if (cJSON_GetObjectItemCaseSensitive(o, "group") != nullptr)
        t.group = static_cast<int32_t>(rd.ranged(o, "group", 0, std::numeric_limits<int32_t>::max()));
      m.tensors.push_back(std::move(t));
    }
  }
  if (cJSON_GetObjectItemCaseSensitive(r, "frozen_tensors") != nullptr) {
    if (const cJSON *fs = rd.array(r, "frozen_tensors")) {
      for (const cJSON *o = fs->child; o && rd.status.ok(); o = o->next) {
        ManifestFrozen t;
        t.name = rd.string(o, "name");
        if (const cJSON *shape = rd.array(o, "shape")) {
          for (const cJSON *d = shape->child; d && rd.status.ok(); d = d->next)
            t.shape.push_back(rd.integer_value(d, "shape"));
          if (t.shape.size() > kMaxManifestDims)
            rd.status = Error(DSRT_ERR_CHECKPOINT, "'%s': frozen tensor '%s' has %zu dimensions; at most %zu are possible",
                              path.c_str(), t.name.c_str(), t.shape.size(), kMaxManifestDims);
        }
        t.numel = rd.ranged(o, "numel", 0, kMaxManifestElems);
        t.offset = static_cast<uint64_t>(rd.ranged(o, "offset", 0, kMaxCount));
        t.crc = static_cast<uint32_t>(rd.hex(o, "crc32c"));
        int64_t n = 1;
        for (int64_t d : t.shape) n = d < 0 || (d > 0 && n > kMaxManifestElems / d) ? -1 : n * d;
        if (rd.status.ok() && n != t.numel)
          rd.status = Error(DSRT_ERR_CHECKPOINT, "'%s': frozen tensor '%s' has numel %lld but its shape holds %lld",
                            path.c_str(), t.name.c_str(), static_cast<long long>(t.numel), static_cast<long long>(n));
        m.frozen.push_back(std::move(t));
      }
    }
  }
  if (cJSON_GetObjectItemCaseSensitive(r, "param_groups") != nullptr) {
    if (const cJSON *gs = rd.array(r, "param_groups")) {
      for (const cJSON *o = gs->child; o && rd.status.ok(); o = o->next) {
        ManifestGroup g;
        for (const cJSON *v = o->child; v; v = v->next) {
          if (!cJSON_IsNumber(v) || v->string == nullptr) {
            rd.status = Error(DSRT_ERR_CHECKPOINT, "'%s': a value of \"param_groups\" is not a number", path.c_str());
            break;
          }
          g.values.emplace_back(v->string, v->valuedouble);
        }
        m.groups.push_back(std::move(g));
      }
    }
  }
  if (const cJSON *ss = rd.array(r, "shards")) {
    for (const cJSON *o = ss->child; o && rd.status.ok(); o = o->next) {
      ManifestShard s;
      s.rank = static_cast<int>(rd.ranged(o, "rank", 0, m.world_size - 1));
      s.file = rd.string(o, "file");
      s.bytes = static_cast<uint64_t>(rd.ranged(o, "bytes", 0, kMaxCount));
      s.table_crc = static_cast<uint32_t>(rd.hex(o, "table_crc32c"));
      if (const cJSON *segs = rd.array(o, "segments")) {
        for (const cJSON *a = segs->child; a && rd.status.ok(); a = a->next) {
          if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3) {
            rd.status = Error(DSRT_ERR_CHECKPOINT, "'%s': shard %d has a malformed segment", path.c_str(), s.rank);
            break;
          }
          ManifestSegment g;
          g.tensor = rd.integer_value(a->child, "segments");
          g.begin = rd.integer_value(a->child->next, "segments");
          g.count = rd.integer_value(a->child->next->next, "segments");
          s.segments.push_back(g);
        }
      }
      m.shards.push_back(std::move(s));
    }
  }
  DSRT_RETURN_IF_ERROR(rd.status);
  DSRT_RETURN_IF_ERROR(m.index(path));
  *out = std::move(m);
  return Status::Ok();
}

Status Manifest::index(const std::string &path) {
  pieces.assign(tensors.size(), {});
  for (size_t t = 0; t < tensors.size(); ++t) {
    int64_t n = 1;
    for (int64_t d : tensors[t].shape) {
      if (d < 0) return Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' has a negative dimension", path.c_str(), tensors[t].name.c_str());
      if (d != 0 && n > kMaxManifestElems / d)
        return Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' has a shape of more than 2^48 elements", path.c_str(),
                     tensors[t].name.c_str());
      n *= d;
    }
    if (n != tensors[t].numel)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' has numel %lld but its shape holds %lld", path.c_str(),
                   tensors[t].name.c_str(), static_cast<long long>(tensors[t].numel), static_cast<long long>(n));
  }
  std::vector<bool> rank_seen(static_cast<size_t>(std::max(world_size, 0)), false);
  for (size_t s = 0; s < shards.size(); ++s) {
    const ManifestShard &shard = shards[s];
    if (shard.rank < 0 || shard.rank >= world_size || shard.file.empty() || shard.file.find('/') != std::string::npos ||
        shard.file[0] == '.' || rank_seen[static_cast<size_t>(shard.rank)])
      return Error(DSRT_ERR_CHECKPOINT, "'%s': shard entry %zu (rank %d, file '%s') is invalid or repeated",
                   path.c_str(), s, shard.rank, shard.file.c_str());
    rank_seen[static_cast<size_t>(shard.rank)] = true;
    uint64_t at = 0;
    for (const ManifestSegment &g : shard.segments) {
      if (g.tensor < 0 || static_cast<size_t>(g.tensor) >= tensors.size() || g.begin < 0 || g.count < 0 ||
          g.begin > tensors[static_cast<size_t>(g.tensor)].numel ||
          g.count > tensors[static_cast<size_t>(g.tensor)].numel - g.begin)
        return Error(DSRT_ERR_CHECKPOINT, "'%s': shard of rank %d has a segment outside its tensor", path.c_str(),
                     shard.rank);
      if (g.count > 0) pieces[static_cast<size_t>(g.tensor)].push_back({static_cast<int>(s), g.begin, g.count, at});
      at += static_cast<uint64_t>(g.count);
      if (at > static_cast<uint64_t>(kMaxManifestElems))
        return Error(DSRT_ERR_CHECKPOINT, "'%s': the shard of rank %d holds more than 2^48 elements per stream",
                     path.c_str(), shard.rank);
    }
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    auto &list = pieces[t];
    std::sort(list.begin(), list.end(),
              [](const SavedPiece &a, const SavedPiece &b) { return a.tensor_begin < b.tensor_begin; });
    int64_t covered = 0;
    for (const SavedPiece &p : list) {
      if (p.tensor_begin != covered)
        return Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' elements %lld.. are %s in the shard layout", path.c_str(),
                     tensors[t].name.c_str(), static_cast<long long>(std::min(covered, p.tensor_begin)),
                     p.tensor_begin > covered ? "missing" : "held twice");
      covered += p.count;
    }
    if (covered != tensors[t].numel)
      return Error(DSRT_ERR_CHECKPOINT, "'%s': tensor '%s' elements %lld.. are missing from the shard layout",
                   path.c_str(), tensors[t].name.c_str(), static_cast<long long>(covered));
  }
  return Status::Ok();
}

std::vector<SavedPiece> Manifest::locate(size_t t, int64_t begin, int64_t end) const {
  std::vector<SavedPiece> out;
  for (const SavedPiece &p : pieces[t]) {
    const int64_t b = std::max(begin, p.tensor_begin), e = std::min(end, p.tensor_begin + p.count);
    if (b >= e) continue;
    out.push_back({p.shard, b, e - b, p.stream_elem + static_cast<uint64_t>(b - p.tensor_begin)});
  }
  return out;
}

Status read_manifest(const std::string &tag_dir, Manifest *out) {
  const std::string path = join_file_path(tag_dir, kManifestFile);
  const std::string crc_path = join_file_path(tag_dir, kManifestCrcFile);
  std::string text, crc_text;
  DSRT_RETURN_IF_ERROR(read_whole_file(path, size_t(1) << 30, &text));
  DSRT_RETURN_IF_ERROR(read_whole_file(crc_path, 256, &crc_text));
  unsigned crc = 0;
  unsigned long long bytes = 0;
  if (std::sscanf(crc_text.c_str(), "crc32c %x bytes %llu", &crc, &bytes) != 2)
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is malformed", crc_path.c_str());
  if (bytes != text.size())
    return Error(DSRT_ERR_CHECKPOINT, "'%s' is %zu bytes but '%s' says %llu (truncated or replaced)", path.c_str(),
                 text.size(), crc_path.c_str(), bytes);
  if (crc32c(0, text.data(), text.size()) != crc)
    return Error(DSRT_ERR_CHECKPOINT, "'%s': checksum mismatch (the manifest is damaged)", path.c_str());
  return Manifest::parse(text, path, out);
}

Status write_manifest(const std::string &tag_dir, const Manifest &manifest) {
  const std::string text = manifest.to_json();
  char crc_text[64];
  const int n = std::snprintf(crc_text, sizeof crc_text, "crc32c %08x bytes %zu\n", crc32c(0, text.data(), text.size()),
                              text.size());
  for (const auto &[name, data, size] :
       {std::tuple<const char *, const char *, size_t>{kManifestFile, text.data(), text.size()},
        std::tuple<const char *, const char *, size_t>{kManifestCrcFile, crc_text, static_cast<size_t>(n)}}) {
    File file;
    DSRT_RETURN_IF_ERROR(File::create(join_file_path(tag_dir, name), &file));
    DSRT_RETURN_IF_ERROR(file.write_all(data, size));
    DSRT_RETURN_IF_ERROR(file.sync());
    DSRT_RETURN_IF_ERROR(file.close());
  }
  return Status::Ok();
}

}  // namespace dsrt
