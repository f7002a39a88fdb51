// compressed_allreduce.h -- DeepSpeed's 1-bit compressed all-reduce with error feedback
// (runtime/comm/nccl.py's compressed_allreduce), on host fp32 buffers over any host communicator.
//
// For a buffer of n elements on each of W ranks, padded with zeros to N, a multiple of
// W * lcm(W, 8) (as DeepSpeed pads "corrected_tensor_size"), so each rank's chunk of C = N / W
// elements packs into whole bytes:
//   worker phase: y = x + worker_error; worker_scale = ||y|| / sqrt(N); worker_error = y -
//     worker_scale * sign(y); the packed signs go chunk r to rank r (all-to-all, C/8 bytes per
//     peer) and the worker scales to everyone (all-gather of one float);
//   server phase (rank r owns chunk r): z = sum_q sign_q * scale_q / W + server_error;
//     server_scale = ||z|| / sqrt(C); server_error = z - server_scale * sign(z); the packed signs
//     and the server scale are all-gathered;
//   result: element j of chunk r = sign_r(j) * server_scale_r, identical on every rank.
// Bytes each rank puts on the wire per call, as Comm::traffic() counts them: (W-1)(C/8 + 4) in
// each phase, (W-1)(N/(4W) + 8) in all -- about 1/32 of a ring all-reduce of the fp32 buffer
// (2 (W-1)/W * 4N).
//
// Device mode (init_device): the same algorithm on buffers in a CUDA device's memory, the element
// work done by cuda/onebit.h's kernels on the given stream, and the packed signs and scales handed
// to the communicator as device buffers (it must take them: NCCL, or the host-staged communicator
// that copies them through host memory). Then buffer, worker_error() and server_error() are
// device pointers. Without CUDA in the build init_device fails with DSRT_ERR_UNSUPPORTED.
//
// The errors are per rank and per buffer; DeepSpeed drops them when a checkpoint is loaded (they
// restart at zero), and so does the engine after a load at another world size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "util/status.h"

namespace dsrt {

// N for n elements on world ranks (DeepSpeed's corrected_tensor_size).
size_t compressed_allreduce_padded_size(size_t n, int world);

class CompressedAllReduce {
 public:
  // Sizes the errors (zero) for a buffer of n elements over comm (which must outlive this).
  Status init(Comm *comm, size_t n);
  // Device mode (see above): device and comm must outlive this; stream orders every kernel and copy.
  Status init_device(Comm *comm, size_t n, Device *device, DeviceStream stream);
  bool on_device() const { return device_ != nullptr; }
  // buffer[0, n) on every rank is replaced by the compressed average over the ranks (one rank:
  // left unchanged, no error kept, as DeepSpeed skips the call at world size 1).
  Status run(float *buffer);
  void reset_errors();

  size_t size() const { return n_; }
  size_t padded_size() const { return padded_; }
  size_t chunk_size() const { return padded_ / static_cast<size_t>(world_); }
  // worker error: padded_size() elements; server error: chunk_size() elements.
  // Host bytes held: the two errors, and the scratch of a call (the padded buffer, the chunk, signs).
  uint64_t error_bytes() const {
    return (worker_error_.size() + server_error_.size()) * sizeof(float) + d_worker_error_.bytes() + d_server_error_.bytes();
  }
  uint64_t scratch_bytes() const {
    return (work_.size() + server_.size()) * sizeof(float) + signs_.size() + recv_signs_.size() + d_work_.bytes() +
           d_server_.bytes() + d_signs_.bytes() + d_recv_signs_.bytes() + d_small_.bytes();
  }
  // Copies of both errors in host memory, whichever mode (tests, checkpoints).
  Status errors_to_host(std::vector<float> *worker, std::vector<float> *server) const;
  // Sets both errors from host copies of padded_size() and chunk_size() elements (a checkpoint).
  Status errors_from_host(const std::vector<float> &worker, const std::vector<float> &server);
  float *worker_error() { return device_ ? d_worker_error_.as<float>() : worker_error_.data(); }
  float *server_error() { return device_ ? d_server_error_.as<float>() : server_error_.data(); }
  const float *worker_error() const { return device_ ? d_worker_error_.as<float>() : worker_error_.data(); }
  const float *server_error() const { return device_ ? d_server_error_.as<float>() : server_error_.data(); }

 private:
  Status all_to_all_bytes(const uint8_t *send, uint8_t *recv, size_t bytes_per_rank);
  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank);
  Status run_device(float *buffer);
  void reset_device_errors();

  Comm *comm_ = nullptr;
  int world_ = 1, rank_ = 0;
  size_t n_ = 0, padded_ = 0;
  std::vector<float> worker_error_, server_error_;
  std::vector<float> work_;             // y, then the result (padded_)
  std::vector<float> server_;           // z (chunk)
  std::vector<uint8_t> signs_, recv_signs_;
  // Device mode.
  Device *device_ = nullptr;
  DeviceStream stream_ = nullptr;
  DeviceBuffer d_worker_error_, d_server_error_, d_work_, d_server_, d_signs_, d_recv_signs_;
  DeviceBuffer d_small_;  // one double (a sum of squares), one float (this rank's scale), W floats (the scales)
};

}  // namespace dsrt
