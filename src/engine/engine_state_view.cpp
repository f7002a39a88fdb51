// defines: the engine's parameter groups through the partitioned-state view
// (zero/partitioned_state.h): their values by name for a checkpoint, and setting saved values.
#include "engine/engine.h"

namespace dsrt {

std::vector<GroupValues> Engine::group_values() const {
  std::vector<GroupValues> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupValues group;
    for (size_t i = 0; i < static_cast<size_t>(HyperName::Count); ++i)
      group.emplace_back(hyper_name_text(static_cast<HyperName>(i)), groups_.get_raw(g, static_cast<HyperName>(i)));
    out.push_back(std::move(group));
  }
  return out;
}

namespace {

// Saved values into target in order. check_only: CHECKPOINT errors naming the group, for unknown
// names too; otherwise unknown names are skipped.
Status apply_group_values(const std::vector<GroupValues> &groups, bool check_only, ParamGroups &target) {
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto &v : groups[g]) {
      bool known = false;
      for (size_t i = 0; i < static_cast<size_t>(HyperName::Count); ++i)
        if (v.first == hyper_name_text(static_cast<HyperName>(i))) {
          known = true;
          const Status s = target.set_raw(g, static_cast<HyperName>(i), v.second);
          if (!s.ok() && check_only)
            return Error(DSRT_ERR_CHECKPOINT, "parameter group %zu: %s", g, s.message().c_str());
          DSRT_RETURN_IF_ERROR(s.with_context(Format("parameter group %zu of the checkpoint", g)));
        }
      if (!known && check_only)
        return Error(DSRT_ERR_CHECKPOINT, "parameter group %zu has an unknown value '%s'", g, v.first.c_str());
    }
  return Status::Ok();
}

}  // namespace

Status Engine::check_group_values(const std::vector<GroupValues> &groups) const {
  // On a copy, so that setting them later cannot fail halfway.
  ParamGroups trial = groups_;
  return apply_group_values(groups, true, trial);
}

Status Engine::set_group_values(const std::vector<GroupValues> &groups) {
  return apply_group_values(groups, false, groups_);
}

}  // namespace dsrt
