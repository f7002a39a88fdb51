// defines: validate_tag and resolve_tag_dir (latest file, interrupted-save fallback).
#include "ckpt/ckpt.h"

#include <algorithm>
#include <vector>

#include "ckpt/file_io.h"
#include "ckpt/manifest.h"

namespace dsrt {

Status validate_tag(const std::string &tag) {
  // Names the save machinery uses itself in the checkpoint folder: "latest", "latest.tmp" (and any
  // "latest.*"), and everything starting with '.' (".tmp-<tag>-<id>", ".old-<tag>-<id>").
  const std::string latest = kLatestFile;
  const bool reserved = tag == latest || tag.compare(0, latest.size() + 1, latest + ".") == 0;
  if (tag.empty() || tag.size() > 200 || tag[0] == '.' || reserved ||
      tag.find_first_of(std::string("/\\\n\r\t\0", 6)) != std::string::npos)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "checkpoint tag '%s' must be a plain folder name (1-200 characters, no '/', not starting with '.', "
                 "and not 'latest' or 'latest.<anything>', which the save machinery uses itself)",
                 tag.c_str());
  return Status::Ok();
}

Status resolve_tag_dir(const std::string &dir, const std::string &tag_in, std::string *resolved_tag,
                       std::string *tag_dir) {
  if (!is_directory(dir)) return Error(DSRT_ERR_CHECKPOINT, "checkpoint folder '%s' does not exist", dir.c_str());
  std::string tag = tag_in;
  if (tag.empty()) {
    const std::string latest = join_file_path(dir, kLatestFile);
    if (!path_exists(latest))
      return Error(DSRT_ERR_CHECKPOINT, "'%s' does not exist: no complete checkpoint was saved in '%s' (or pass a tag)",
                   latest.c_str(), dir.c_str());
    DSRT_RETURN_IF_ERROR(read_whole_file(latest, 4096, &tag));
    while (!tag.empty() && (tag.back() == '\n' || tag.back() == '\r' || tag.back() == ' ')) tag.pop_back();
    if (!validate_tag(tag).ok())
      return Error(DSRT_ERR_CHECKPOINT, "'%s' does not name a valid tag", latest.c_str());
  } else {
    DSRT_RETURN_IF_ERROR(validate_tag(tag));
  }
  *resolved_tag = tag;
  *tag_dir = join_file_path(dir, tag);
  if (is_directory(*tag_dir)) return Status::Ok();
  // A save that replaced this tag on a filesystem without RENAME_EXCHANGE and died between its
  // two renames left the complete old folder at .old-<tag>-<id>.
  std::vector<std::string> names;
  DSRT_RETURN_IF_ERROR(list_directory(dir, &names));
  std::sort(names.begin(), names.end());
  const std::string prefix = ".old-" + tag + "-";
  for (const std::string &name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string candidate = join_file_path(dir, name);
    if (path_exists(join_file_path(candidate, kManifestFile))) {
      *tag_dir = candidate;
      return Status::Ok();
    }
  }
  return Error(DSRT_ERR_CHECKPOINT, "checkpoint '%s' does not exist", tag_dir->c_str());
}

}  // namespace dsrt
