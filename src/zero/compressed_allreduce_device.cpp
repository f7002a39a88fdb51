// defines: CompressedAllReduce's device mode (init_device, run_device) -- the two-phase 1-bit
// all-reduce of compressed_allreduce.cpp on buffers in a CUDA device's memory: the element work
// by cuda/onebit.h's kernels on the stream, the packed signs and scales exchanged by the
// communicator as device buffers (all_to_all_bytes, all_gather_bytes). Without CUDA, init_device
// refuses.
#include <algorithm>

#include "comm/device_comm.h"
#include "zero/compressed_allreduce.h"
#ifdef DSRT_HAVE_CUDA
#include "cuda/onebit.h"
#endif

namespace dsrt {

Status CompressedAllReduce::init_device(Comm *comm, size_t n, Device *device, DeviceStream stream) {
  if (device == nullptr || device->type() != DSRT_DEVICE_CUDA)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "compressed all-reduce: device mode needs a CUDA device");
#ifndef DSRT_HAVE_CUDA
  (void)comm, (void)n, (void)stream;
  return Error(DSRT_ERR_UNSUPPORTED, "compressed all-reduce: this build has no CUDA; rebuild with DSRT_CUDA=ON");
#else
  DSRT_RETURN_IF_ERROR(init(comm, n));  // sizes; host buffers stay empty in device mode
  worker_error_.clear();
  server_error_.clear();
  work_.clear();
  server_.clear();
  signs_.clear();
  recv_signs_.clear();
  device_ = device;
  stream_ = stream;
  if (world_ == 1) return Status::Ok();
  const size_t chunk = chunk_size();
  DSRT_RETURN_IF_ERROR(device->allocate(padded_ * sizeof(float), &d_worker_error_));
  DSRT_RETURN_IF_ERROR(device->allocate(chunk * sizeof(float), &d_server_error_));
  DSRT_RETURN_IF_ERROR(device->allocate(padded_ * sizeof(float), &d_work_));
  DSRT_RETURN_IF_ERROR(device->allocate(chunk * sizeof(float), &d_server_));
  DSRT_RETURN_IF_ERROR(device->allocate(padded_ / 8, &d_signs_));
  DSRT_RETURN_IF_ERROR(device->allocate(padded_ / 8, &d_recv_signs_));
  DSRT_RETURN_IF_ERROR(device->allocate(sizeof(double) + sizeof(float) * (1 + static_cast<size_t>(world_)), &d_small_));
  // The collectives wait for the kernels enqueued on this stream before them.
  return comm_set_compute_stream(*comm, stream).with_context("compressed all-reduce: ordering after the stream");
#endif
}

Status CompressedAllReduce::errors_to_host(std::vector<float> *worker, std::vector<float> *server) const {
  if (device_ == nullptr) {
    *worker = worker_error_;
    *server = server_error_;
    return Status::Ok();
  }
  worker->assign(d_worker_error_.bytes() / sizeof(float), 0.0f);
  server->assign(d_server_error_.bytes() / sizeof(float), 0.0f);
  if (!worker->empty()) DSRT_RETURN_IF_ERROR(device_->copy(worker->data(), d_worker_error_.data(), d_worker_error_.bytes(), stream_));
  if (!server->empty()) DSRT_RETURN_IF_ERROR(device_->copy(server->data(), d_server_error_.data(), d_server_error_.bytes(), stream_));
  return device_->synchronize(stream_);
}

Status CompressedAllReduce::errors_from_host(const std::vector<float> &worker, const std::vector<float> &server) {
  const size_t w = world_ > 1 ? padded_ : 0, s = world_ > 1 ? chunk_size() : 0;
  if (worker.size() != w || server.size() != s)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "compressed all-reduce: errors of %zu and %zu elements given, %zu and %zu held",
                 worker.size(), server.size(), w, s);
  if (device_ == nullptr) {
    worker_error_ = worker;
    server_error_ = server;
    return Status::Ok();
  }
  if (w > 0) DSRT_RETURN_IF_ERROR(device_->copy(d_worker_error_.data(), worker.data(), w * sizeof(float), stream_));
  if (s > 0) DSRT_RETURN_IF_ERROR(device_->copy(d_server_error_.data(), server.data(), s * sizeof(float), stream_));
  return device_->synchronize(stream_);
}

void CompressedAllReduce::reset_device_errors() {
  if (d_worker_error_.bytes() > 0) (void)device_->memset(d_worker_error_.data(), 0, d_worker_error_.bytes(), stream_);
  if (d_server_error_.bytes() > 0) (void)device_->memset(d_server_error_.data(), 0, d_server_error_.bytes(), stream_);
  (void)device_->synchronize(stream_);
}

Status CompressedAllReduce::run_device(float *buffer) {
#ifndef DSRT_HAVE_CUDA
  (void)buffer;
  return Error(DSRT_ERR_UNSUPPORTED, "compressed all-reduce: this build has no CUDA");
#else
  const size_t chunk = chunk_size(), chunk_bytes = chunk / 8;
  const float inv_world = 1.0f / static_cast<float>(world_);
  auto *sum = d_small_.as<double>();
  float *my_scale = reinterpret_cast<float *>(d_small_.as<char>() + sizeof(double));
  float *scales = my_scale + 1;
  float *work = d_work_.as<float>(), *server = d_server_.as<float>();
  auto *signs = d_signs_.as<uint8_t>(), *recv = d_recv_signs_.as<uint8_t>();

  // Worker phase: y = buffer (zero-padded) + worker error; its signs, chunk r to rank r.
  DSRT_RETURN_IF_ERROR(device_->copy(work, buffer, n_ * sizeof(float), stream_));
  if (padded_ > n_) DSRT_RETURN_IF_ERROR(device_->memset(work + n_, 0, (padded_ - n_) * sizeof(float), stream_));
  DSRT_RETURN_IF_ERROR(device_->memset(sum, 0, sizeof(double), stream_));
  DSRT_RETURN_IF_ERROR(cuda_onebit_add_error(work, d_worker_error_.as<float>(), padded_, sum, stream_));
  DSRT_RETURN_IF_ERROR(cuda_onebit_pack(work, d_worker_error_.as<float>(), padded_, sum, signs, my_scale, stream_));
  DSRT_RETURN_IF_ERROR(all_to_all_bytes(signs, recv, chunk_bytes).with_context("1-bit all-reduce: exchanging worker signs"));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(my_scale, scales, sizeof(float)).with_context("1-bit all-reduce: gathering worker scales"));

  // Server phase over this rank's chunk.
  for (int q = 0; q < world_; ++q)
    DSRT_RETURN_IF_ERROR(cuda_onebit_unpack(recv + chunk_bytes * static_cast<size_t>(q), scales + q, inv_world, chunk,
                                            server, q > 0, stream_));
  DSRT_RETURN_IF_ERROR(device_->memset(sum, 0, sizeof(double), stream_));
  DSRT_RETURN_IF_ERROR(cuda_onebit_add_error(server, d_server_error_.as<float>(), chunk, sum, stream_));
  DSRT_RETURN_IF_ERROR(cuda_onebit_pack(server, d_server_error_.as<float>(), chunk, sum, signs, my_scale, stream_));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(signs, recv, chunk_bytes).with_context("1-bit all-reduce: gathering server signs"));
  DSRT_RETURN_IF_ERROR(all_gather_bytes(my_scale, scales, sizeof(float)).with_context("1-bit all-reduce: gathering server scales"));

  for (int r = 0; r < world_; ++r)
    DSRT_RETURN_IF_ERROR(cuda_onebit_unpack(recv + chunk_bytes * static_cast<size_t>(r), scales + r, 1.0f, chunk,
                                            work + chunk * static_cast<size_t>(r), false, stream_));
  DSRT_RETURN_IF_ERROR(device_->copy(buffer, work, n_ * sizeof(float), stream_));
  return Status::Ok();
#endif
}

}  // namespace dsrt
