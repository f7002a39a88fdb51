// defines: the boundary's agreement collectives -- overflow flag (stage 0), gradient norm and
// overflow flag over the partitions and MiCS replicas (stages 1-3), Lamb's per-tensor sums, a
// rank-local failure.
#include "zero/boundary_agreement.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dsrt {

Status agree_replicated_overflow(Comm &world, double *norm_sq, bool *nonfinite) {
  if (world.size() == 1) return Status::Ok();
  double flag = *nonfinite || !std::isfinite(*norm_sq) ? 1.0 : 0.0;
  DSRT_RETURN_IF_ERROR(world.all_reduce_f64(&flag, 1, ReduceOp::Max).with_context("step: agreeing on the overflow flag"));
  *nonfinite = flag > 0.0;
  return Status::Ok();
}

Status agree_partitioned_norm(Comm &world, Comm &partition, const Comm *replicas, double *norm_sq, bool *nonfinite) {
  if (world.size() == 1) return Status::Ok();
  // A non-finite local norm counts as an overflow too, as at stage 0 (sum_squares sets *nonfinite
  // for every non-finite gradient, so this only guards the contract).
  const bool overflow = *nonfinite || !std::isfinite(*norm_sq);
  double values[2] = {overflow ? 0.0 : *norm_sq, overflow ? 1.0 : 0.0};
  if (partition.size() > 1)
    DSRT_RETURN_IF_ERROR(partition.all_reduce_f64(values, 2, ReduceOp::Sum)
                             .with_context("step: all-reducing the gradient norm and overflow flag"));
  if (replicas != nullptr) {
    // MiCS: the replicas computed the same values; the world still agrees on them (a maximum of
    // equal values), so a rank-local fault can never split the ranks into stepping and skipping.
    DSRT_RETURN_IF_ERROR(world.all_reduce_f64(values, 2, ReduceOp::Max)
                             .with_context("step: agreeing on the gradient norm across MiCS replicas"));
  }
  *norm_sq = values[0];
  *nonfinite = values[1] > 0.0;
  return Status::Ok();
}

Status agree_local_failure(Comm &world, const Status &local) {
  if (world.size() == 1) return local;
  double first = local.ok() ? static_cast<double>(world.size()) : static_cast<double>(world.rank());
  DSRT_RETURN_IF_ERROR(world.all_reduce_f64(&first, 1, ReduceOp::Min).with_context("agreeing on a rank's failure"));
  if (first >= static_cast<double>(world.size())) return Status::Ok();
  const int root = static_cast<int>(first);
  // The failing rank's code and message (NUL-terminated, cut to fit).
  struct {
    int32_t code;
    char message[1020];
  } failure;
  std::memset(&failure, 0, sizeof failure);
  if (world.rank() == root) {
    failure.code = static_cast<int32_t>(local.code());
    std::strncpy(failure.message, local.message().c_str(), sizeof failure.message - 1);
  }
  DSRT_RETURN_IF_ERROR(world.broadcast_bytes(&failure, sizeof failure, root)
                           .with_context(Format("agreeing on a rank's failure: rank %d's message", root)));
  if (!local.ok()) return local;
  failure.message[sizeof failure.message - 1] = '\0';
  const dsrt_status code = failure.code != DSRT_OK ? static_cast<dsrt_status>(failure.code) : DSRT_ERR_INTERNAL;
  return Error(code, "rank %d failed: %s", root, failure.message);
}

Status agree_partitioned_sums(Comm &partition, double *sums, size_t n) {
  if (partition.size() == 1) return Status::Ok();
  return partition.all_reduce_f64(sums, n, ReduceOp::Sum).with_context("all-reducing Lamb's per-tensor norms");
}

}  // namespace dsrt
