// defines: ParamCoordinator::check_agreement -- at each micro-step end the ranks compare a hash of
// their acquire/release sequences and name the first call where they differ (param_coordinator.h).
#include "zero/param_coordinator.h"

namespace dsrt {

Status ParamCoordinator::check_agreement() {
  if (comm_->size() == 1) return Status::Ok();
  uint64_t hash = 1469598103934665603ull;
  for (uint64_t e : current_) hash = (hash ^ e) * 1099511628211ull;
  const uint64_t length = current_.size();
  uint64_t values[4] = {hash, length, ~hash, ~length};
  DSRT_RETURN_IF_ERROR(comm_->all_reduce_u64(values, 4, ReduceOp::Max)
                           .with_context("ZeRO-3: comparing the ranks' acquire/release sequences"));
  if (values[0] == ~values[2] && values[1] == ~values[3]) return Status::Ok();
  const uint64_t min_length = ~values[3];
  std::vector<uint64_t> entries(2 * min_length);
  for (uint64_t i = 0; i < min_length; ++i) {
    entries[i] = current_[i];
    entries[min_length + i] = ~current_[i];
  }
  DSRT_RETURN_IF_ERROR(comm_->all_reduce_u64(entries.data(), entries.size(), ReduceOp::Max)
                           .with_context("ZeRO-3: locating where the ranks' sequences differ"));
  uint64_t first = min_length;
  for (uint64_t i = 0; i < min_length; ++i)
    if (entries[i] != ~entries[min_length + i]) {
      first = i;
      break;
    }
  std::string mine = "nothing (this rank's sequence ended)";
  if (first < current_.size()) {
    const uint64_t e = current_[first];
    mine = Format("%s('%s')", (e & kReleaseBit) ? "release" : "acquire", names_[e & ~kReleaseBit].c_str());
  }
  return Error(DSRT_ERR_COMM,
               "ZeRO-3: ranks acquired or released parameters in different orders in this micro-step; at call #%llu "
               "rank %d did %s while another rank did something else. Every rank must acquire and release the same "
               "tensors in the same order",
               static_cast<unsigned long long>(first), comm_->rank(), mine.c_str());
}

}  // namespace dsrt
