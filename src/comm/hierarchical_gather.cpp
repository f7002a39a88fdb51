// defines: comm_hierarchical_gather -- a Comm that forwards to a group communicator, except for
// all-gathers, which gather inside the node first and then exchange the nodes' blocks.
#include "comm/hierarchical_gather.h"

#include <utility>

#include "comm/comm_checks.h"
#include "comm/topology.h"
#include "util/half.h"

namespace dsrt {
namespace {

class HierarchicalGatherComm final : public Comm {
 public:
  HierarchicalGatherComm(std::shared_ptr<Comm> group, std::shared_ptr<Comm> intra, std::shared_ptr<Comm> inter)
      : group_(std::move(group)), intra_(std::move(intra)), inter_(std::move(inter)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const char *backend() const override { return group_->backend(); }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    return group_->all_reduce(buffer, count, dtype, op, handle);
  }
  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    return group_->reduce_scatter(send, recv, recv_count, dtype, op, handle);
  }
  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    return group_->reduce_scatter_v(send, recv, recv_counts, dtype, op, handle);
  }
  // Group rank r = node * per_node + local, so the node's blocks are adjacent in recv: the intra
  // gather fills this node's stretch, then the inter gather exchanges whole stretches in place.
  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    const size_t stretch = count * static_cast<size_t>(intra_->size()) * dtype_size(dtype);
    char *mine = static_cast<char *>(recv) + static_cast<size_t>(inter_->rank()) * stretch;
    Status status = intra_->all_gather_sync(send, mine, count, dtype).with_context("all-gather inside the node");
    if (status.ok())
      status = inter_->all_gather_sync(mine, recv, count * static_cast<size_t>(intra_->size()), dtype)
                   .with_context("all-gather across nodes");
    if (!status.ok()) return status;
    *handle = completed_handle();
    return Status::Ok();
  }
  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    return group_->all_gather_v(send, recv, counts, dtype, handle);
  }
  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    return group_->broadcast(buffer, count, dtype, root, handle);
  }
  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    const size_t stretch = bytes_per_rank * static_cast<size_t>(intra_->size());
    char *mine = static_cast<char *>(recv) + static_cast<size_t>(inter_->rank()) * stretch;
    CommHandle step;
    Status status = intra_->all_gather_bytes(send, mine, bytes_per_rank, &step);
    if (status.ok()) status = step->wait().with_context("all-gather inside the node");
    if (status.ok()) status = inter_->all_gather_bytes(mine, recv, stretch, &step);
    if (status.ok()) status = step->wait().with_context("all-gather across nodes");
    if (!status.ok()) return status;
    *handle = completed_handle();
    return Status::Ok();
  }
  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    return group_->all_to_all_bytes(send, recv, bytes_per_rank, handle);
  }
  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    return group_->all_to_all(send, recv, count, dtype, handle);
  }
  Status split(int color, int key, std::shared_ptr<Comm> *out) override { return group_->split(color, key, out); }
  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    return group_->all_reduce_f64(values, count, op);
  }
  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    return group_->all_reduce_u64(values, count, op);
  }
  Status broadcast_bytes(void *data, size_t bytes, int root) override { return group_->broadcast_bytes(data, bytes, root); }
  Status barrier() override { return group_->barrier(); }

 private:
  std::shared_ptr<Comm> group_, intra_, inter_;
};

}  // namespace

Status comm_hierarchical_gather(std::shared_ptr<Comm> group, std::shared_ptr<Comm> *out) {
  if (!group || out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "comm_hierarchical_gather: group or out is NULL");
  NodeLayout layout;
  DSRT_RETURN_IF_ERROR(comm_node_layout(*group, &layout).with_context("hierarchical all-gather: the node layout"));
  // Node-major: group rank = node * ranks_per_node + local, on every rank (host names found in
  // another order would put the blocks out of place).
  const bool node_major = group->rank() == layout.node * layout.ranks_per_node + layout.local;
  uint64_t misplaced = node_major ? 0 : 1;
  DSRT_RETURN_IF_ERROR(group->all_reduce_u64(&misplaced, 1, ReduceOp::Max));
  if (misplaced != 0)
    return Error(DSRT_ERR_INVALID_ARGUMENT,
                 "hierarchical all-gather: the group's ranks are not placed node after node (consecutive ranks on "
                 "one node); launch ranks by node, or set mics_hierarchical_params_gather to false");
  if (layout.nodes == 1 || layout.ranks_per_node == 1) {
    *out = std::move(group);
    return Status::Ok();
  }
  std::shared_ptr<Comm> intra, inter;
  DSRT_RETURN_IF_ERROR(comm_split_by_node(*group, &intra, &inter));
  *out = std::make_shared<HierarchicalGatherComm>(std::move(group), std::move(intra), std::move(inter));
  return Status::Ok();
}

}  // namespace dsrt
