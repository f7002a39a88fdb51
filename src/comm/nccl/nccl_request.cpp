// defines: the NCCL communicator's handle (nccl_shared.h): waits for the collective's completion
// event under the deadline, copies staged host results out, frees the staging.
#include "comm/nccl/nccl_comm.h"

#ifdef DSRT_HAVE_NCCL

#include <vector>

#include "comm/nccl/nccl_shared.h"

namespace dsrt {
namespace nccl_internal {
namespace {

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(std::shared_ptr<Shared> shared, cudaEvent_t done, std::vector<Arg> args, std::string what,
              Clock::time_point until)
      : shared_(std::move(shared)), done_(done), args_(std::move(args)), what_(std::move(what)), until_(until) {}
  ~NcclRequest() override {
    if (!waited_) release();
  }
  Status wait() override {
    if (waited_) return result_;
    waited_ = true;
    result_ = shared_->wait_event(done_, what_, until_);
    if (result_.ok()) result_ = copy_out();
    release();
    return result_;
  }

 private:
  // Results of staged host buffers, now that the collective is done on the GPU.
  Status copy_out() {
    DSRT_CUDA_OK(cudaSetDevice(shared_->device), what_);
    bool any = false;
    for (const Arg &a : args_)
      if (a.staged && a.out && a.bytes > 0) {
        DSRT_CUDA_OK(cudaMemcpyAsync(a.ptr, a.dev, a.bytes, cudaMemcpyDeviceToHost, shared_->copy_stream),
                     what_ + ": copying the result to host memory");
        any = true;
      }
    if (any) DSRT_CUDA_OK(cudaStreamSynchronize(shared_->copy_stream), what_);
    return Status::Ok();
  }
  void release() {
    std::lock_guard<std::mutex> guard(shared_->mutex);
    if (cudaSetDevice(shared_->device) != cudaSuccess) return;
    for (Arg &a : args_)
      if (a.staged && a.dev != nullptr) cudaFreeAsync(a.dev, shared_->stream);
    args_.clear();
    if (done_ != nullptr) cudaEventDestroy(done_);
    done_ = nullptr;
  }

  std::shared_ptr<Shared> shared_;
  cudaEvent_t done_;
  std::vector<Arg> args_;
  std::string what_;
  Clock::time_point until_;
  bool waited_ = false;
  Status result_;
};

}  // namespace

CommHandle nccl_request_make(std::shared_ptr<Shared> shared, cudaEvent_t done, std::vector<Arg> args, std::string what,
                             Clock::time_point until) {
  return std::make_unique<NcclRequest>(std::move(shared), done, std::move(args), std::move(what), until);
}

}  // namespace nccl_internal
}  // namespace dsrt

#endif  // DSRT_HAVE_NCCL
