// defines: CompressedAllReduce -- the two-phase 1-bit all-reduce with worker and server error
// feedback (see compressed_allreduce.h).
#include "zero/compressed_allreduce.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "optim/onebit_adam.h"

namespace dsrt {

size_t compressed_allreduce_padded_size(size_t n, int world) {
  const size_t w = static_cast<size_t>(std::max(world, 1));
  const size_t lcm = w * 8 / std::gcd(w, size_t{8});
  const size_t unit = w * lcm;
  return (n + unit - 1) / unit * unit;
}

Status CompressedAllReduce::init(Comm *comm, size_t n) {
  if (comm == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "compressed all-reduce: no communicator");
  comm_ = comm;
  device_ = nullptr;
  world_ = comm->size();
  rank_ = comm->rank();
  n_ = n;
  padded_ = compressed_allreduce_padded_size(n, world_);
  if (world_ == 1) {
    worker_error_.clear();
    server_error_.clear();
    return Status::Ok();
  }
  const size_t chunk = chunk_size();
  worker_error_.assign(padded_, 0.0f);
  server_error_.assign(chunk, 0.0f);
  work_.assign(padded_, 0.0f);
  server_.assign(chunk, 0.0f);
  signs_.assign(padded_ / 8, 0);
  recv_signs_.assign(padded_ / 8, 0);
  return Status::Ok();
}

void CompressedAllReduce::reset_errors() {
  if (device_ != nullptr) return reset_device_errors();
  std::fill(worker_error_.begin(), worker_error_.end(), 0.0f);
  std::fill(server_error_.begin(), server_error_.end(), 0.0f);
}

Status CompressedAllReduce::all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank) {
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(comm_->all_gather_bytes(send, recv, bytes_per_rank, &handle));
  return handle->wait();
}

Status CompressedAllReduce::all_to_all_bytes(const uint8_t *send, uint8_t *recv, size_t bytes_per_rank) {
  CommHandle handle;
  DSRT_RETURN_IF_ERROR(comm_->all_to_all_bytes(send, recv, bytes_per_rank, &handle));
  return handle->wait();
}

Status CompressedAllReduce::run(float *buffer) {
  if (comm_ == nullptr) return Error(DSRT_ERR_STATE, "compressed all-reduce: init was not called");
  if (world_ == 1 || n_ == 0) return Status::Ok();
  if (device_ != nullptr) return run_device(buffer);
  const size_t chunk = chunk_size();
  const size_t chunk_bytes = chunk / 8;
  const float inv_world = 1.0f / static_cast<float>(world_);

  // Worker phase.
  std::memcpy(work_.data(), buffer, n_ * sizeof(float));
  std::fill(work_.begin() + static_cast<std::ptrdiff_t>(n_), work_.end(), 0.0f);
  const float worker_scale = static_cast<float>(onebit_compress(work_.data(), worker_error_.data(), padded_, signs_.data()));
  DSRT_RETURN_IF_ERROR(all_to_all_bytes(signs_.data(), recv_signs_.data(), chunk_bytes)
                           .with_context("1-bit all-reduce: exchanging worker signs"));
  std::vector<float> scales(static_cast<size_t>(world_));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(&worker_scale, scales.data(), sizeof(float))
                           .with_context("1-bit all-reduce: gathering worker scales"));

  // Server phase over this rank's chunk.
  for (int q = 0; q < world_; ++q)
    onebit_decompress(recv_signs_.data() + chunk_bytes * static_cast<size_t>(q), scales[static_cast<size_t>(q)] * inv_world,
                      chunk, server_.data(), q > 0);
  const float server_scale = static_cast<float>(onebit_compress(server_.data(), server_error_.data(), chunk, signs_.data()));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(signs_.data(), recv_signs_.data(), chunk_bytes)
                           .with_context("1-bit all-reduce: gathering server signs"));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(&server_scale, scales.data(), sizeof(float))
                           .with_context("1-bit all-reduce: gathering server scales"));

  for (int r = 0; r < world_; ++r)
    onebit_decompress(recv_signs_.data() + chunk_bytes * static_cast<size_t>(r), scales[static_cast<size_t>(r)], chunk,
                      work_.data() + chunk * static_cast<size_t>(r), false);
  std::memcpy(buffer, work_.data(), n_ * sizeof(float));
  return Status::Ok();
}

}  // namespace dsrt
