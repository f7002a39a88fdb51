// defines: MpiComm (collectives over MPI non-blocking calls, polled on the shared queue of
// queued_comm.h) and mpi_comm_create_world.
#include "comm/mpi/mpi_comm.h"

#ifdef DSRT_HAVE_MPI
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/comm_checks.h"
#include "comm/comm_split.h"
#include "comm/queued_comm.h"
#include "comm/mpi/mpi_exchange.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/reduce_kernels.h"
#include "util/env_number.h"
#include "util/half.h"
#include "util/log.h"

namespace dsrt {
namespace {

// Below this many fp32 bytes an all-reduce uses MPI's latency-optimized algorithms (on an fp32
// image of 16-bit data); above it, dsrt's reduce-scatter + all-gather.
constexpr size_t kSmallAllReduceBytes = 64 << 10;
constexpr size_t kBroadcastPieceBytes = size_t{1} << 30;

// A wait-policy duration from the environment (mpi_exchange.h), 0..1 s; else the default.
std::chrono::microseconds env_microseconds(const char *name, std::chrono::microseconds fallback) {
  return std::chrono::microseconds{static_cast<long long>(
      env_number(name, static_cast<double>(fallback.count()), {0.0, 1e6, true, "microseconds"}))};
}

class MpiComm final : public QueuedComm {
 public:
  MpiComm(const MpiRuntime *runtime, MPI_Comm comm, int rank, int size)
      : QueuedComm(rank, size, comm_timeout_seconds_from_env(), Wording{"died", ""}), runtime_(runtime) {
    ctx_.comm = comm;
    ctx_.rank = rank;
    ctx_.size = size;
    ctx_.chunk_bytes = static_cast<size_t>(env_number("DSRT_COMM_CHUNK_BYTES", static_cast<double>(ctx_.chunk_bytes),
                                                      {4096.0, 16777216.0, true, "bytes"}));
    ctx_.spin = env_microseconds("DSRT_COMM_SPIN_US", ctx_.spin);
    ctx_.nap = env_microseconds("DSRT_COMM_NAP_US", ctx_.nap);
    if (runtime_->worker_threads) start_worker();  // else ops run on the caller
  }

  ~MpiComm() override {
    stop_worker();
    // A broken communicator may still have collectives inside MPI; it is left to MPI_Finalize.
    if (!broken() && !mpi_runtime_finalized()) {
      MpiCallLock lock;
      MPI_Comm_free(&ctx_.comm);
    }
  }

  const char *backend() const override { return "mpi"; }

  // A failed collective may mean a dead rank: the exit handler then finalizes under a watchdog.
  void on_broken(const Status &) override { mpi_runtime_mark_broken(); }

  Status all_reduce(void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_reduce_args(*this, buffer, count, dtype, op, handle));
    count_all_reduce(count * dtype_size(dtype));
    std::string what = Format("all_reduce (%s, %zu elements, %s)", dtype_name(dtype), count, reduce_op_name(op));
    return submit(std::move(what), handle, [this, buffer, count, dtype, op, &ctx = ctx_] {
      if (count * sizeof(float) <= kSmallAllReduceBytes) return small_all_reduce(ctx, buffer, count, dtype, op);
      BlockLayout layout = split_blocks(count, size_);
      char *own = static_cast<char *>(buffer) + layout.offset[rank_] * dtype_size(dtype);
      DSRT_RETURN_IF_ERROR(exchange_reduce_scatter(ctx, buffer, own, layout, dtype, op));
      return exchange_all_gather(ctx, own, buffer, layout, dtype_size(dtype));
    });
  }

  Status reduce_scatter(const void *send, void *recv, size_t recv_count, dsrt_dtype dtype, ReduceOp op,
                        CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_args(*this, send, recv, recv_count, dtype, op, handle));
    count_reduce_scatter(recv_count * dtype_size(dtype) * size(), recv_count * dtype_size(dtype));
    std::string what = Format("reduce_scatter (%s, %zu elements per rank, %s)", dtype_name(dtype), recv_count,
                              reduce_op_name(op));
    return submit(std::move(what), handle, [this, send, recv, recv_count, dtype, op, &ctx = ctx_] {
      return exchange_reduce_scatter(ctx, send, recv, equal_blocks(recv_count, size_), dtype, op);
    });
  }

  Status reduce_scatter_v(const void *send, void *recv, const size_t *recv_counts, dsrt_dtype dtype, ReduceOp op,
                          CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_reduce_scatter_v_args(*this, send, recv, recv_counts, dtype, op, handle));
    BlockLayout layout = blocks_from_counts(recv_counts, size_);
    count_reduce_scatter(layout.total * dtype_size(dtype), layout.count[rank_] * dtype_size(dtype));
    std::string what = Format("reduce_scatter_v (%s, %zu elements in all, %zu here, %s)", dtype_name(dtype),
                              layout.total, layout.count[rank_], reduce_op_name(op));
    return submit(std::move(what), handle, [send, recv, layout, dtype, op, &ctx = ctx_] {
      return exchange_reduce_scatter(ctx, send, recv, layout, dtype, op);
    });
  }

  Status all_gather_v(const void *send, void *recv, const size_t *counts, dsrt_dtype dtype,
                      CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_v_args(*this, send, recv, counts, dtype, handle));
    BlockLayout layout = blocks_from_counts(counts, size_);
    count_all_gather(layout.count[rank_] * dtype_size(dtype));
    std::string what = Format("all_gather_v (%s, %zu elements in all, %zu here)", dtype_name(dtype), layout.total,
                              layout.count[rank_]);
    return submit(std::move(what), handle, [send, recv, layout, dtype, &ctx = ctx_] {
      return exchange_all_gather(ctx, send, recv, layout, dtype_size(dtype));
    });
  }

  Status all_gather(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_args(*this, send, recv, count, dtype, handle));
    count_all_gather(count * dtype_size(dtype));
    std::string what = Format("all_gather (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle, [this, send, recv, count, dtype, &ctx = ctx_] {
      return exchange_all_gather(ctx, send, recv, equal_blocks(count, size_), dtype_size(dtype));
    });
  }

  Status broadcast(void *buffer, size_t count, dsrt_dtype dtype, int root, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_args(*this, buffer, count, dtype, root, handle));
    count_broadcast(count * dtype_size(dtype), root);
    std::string what = Format("broadcast (%s, %zu elements, root %d)", dtype_name(dtype), count, root);
    size_t bytes = count * dtype_size(dtype);
    return submit(std::move(what), handle,
                  [buffer, bytes, root, &ctx = ctx_] { return broadcast_pieces(ctx, buffer, bytes, root); });
  }

  Status all_gather_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_gather_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_gather(bytes_per_rank);
    std::string what = Format("all_gather_bytes (%zu bytes per rank)", bytes_per_rank);
    return submit(std::move(what), handle, [this, send, recv, bytes_per_rank, &ctx = ctx_] {
      return exchange_all_gather(ctx, send, recv, equal_blocks(bytes_per_rank, size_), 1);
    });
  }

  Status all_to_all_bytes(const void *send, void *recv, size_t bytes_per_rank, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_bytes_args(*this, send, recv, bytes_per_rank, handle));
    count_all_to_all(bytes_per_rank);
    std::string what = Format("all_to_all_bytes (%zu bytes per rank)", bytes_per_rank);
    return submit(std::move(what), handle, [send, recv, bytes_per_rank, &ctx = ctx_] {
      return exchange_all_to_all(ctx, send, recv, bytes_per_rank);
    });
  }

  Status all_to_all(const void *send, void *recv, size_t count, dsrt_dtype dtype, CommHandle *handle) override {
    DSRT_RETURN_IF_ERROR(check_all_to_all_args(*this, send, recv, count, dtype, handle));
    const size_t block = count * dtype_size(dtype);
    count_all_to_all(block);
    std::string what = Format("all_to_all (%s, %zu elements per rank)", dtype_name(dtype), count);
    return submit(std::move(what), handle,
                  [send, recv, block, &ctx = ctx_] { return exchange_all_to_all(ctx, send, recv, block); });
  }

  // The colors are exchanged (and checked) on the polled path first, so every rank is known to be
  // here before the blocking MPI_Comm_split; the split itself runs in this communicator's order.
  Status split(int color, int key, std::shared_ptr<Comm> *out) override {
    DSRT_RETURN_IF_ERROR(check_split_args(color, out));
    *out = nullptr;
    SplitPlan plan;
    DSRT_RETURN_IF_ERROR(comm_split_plan(*this, color, key, &plan));
    MPI_Comm child = MPI_COMM_NULL;
    DSRT_RETURN_IF_ERROR(run_blocking(Format("split (color %d, key %d)", color, key), [&plan, &child, &ctx = ctx_] {
      MpiCallLock lock;
      DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_split(ctx.comm, plan.color, plan.rank, &child), "MPI_Comm_split"));
      return mpi_check(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    }));
    int rank = -1, size = 0;
    {
      MpiCallLock lock;
      DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_rank(child, &rank), "MPI_Comm_rank"));
      DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_size(child, &size), "MPI_Comm_size"));
    }
    if (rank != plan.rank || size != plan.size())
      return Error(DSRT_ERR_INTERNAL, "split: MPI made rank %d of %d where the colors say rank %d of %d", rank, size,
                   plan.rank, plan.size());
    auto comm = std::make_shared<MpiComm>(runtime_, child, rank, size);
    comm->set_step(step());
    *out = std::move(comm);
    return Status::Ok();
  }

  Status all_reduce_f64(double *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_f64", values, count, op));
    count_all_reduce(count * sizeof(double));
    std::string what = Format("all_reduce_f64 (%zu values, %s)", count, reduce_op_name(op));
    return run_blocking(std::move(what), [this, values, count, op, &ctx = ctx_] {
      return mpi_all_reduce(ctx, values, count, MPI_DOUBLE, float_op(op), "MPI_Iallreduce (f64)");
    });
  }

  Status all_reduce_u64(uint64_t *values, size_t count, ReduceOp op) override {
    DSRT_RETURN_IF_ERROR(check_control_args("all_reduce_u64", values, count, op));
    count_all_reduce(count * sizeof(uint64_t));
    std::string what = Format("all_reduce_u64 (%zu values, %s)", count, reduce_op_name(op));
    MPI_Op mpi_op = op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
    return run_blocking(std::move(what), [values, count, mpi_op, &ctx = ctx_] {
      return mpi_all_reduce(ctx, values, count, MPI_UINT64_T, mpi_op, "MPI_Iallreduce (u64)");
    });
  }

  Status broadcast_bytes(void *data, size_t bytes, int root) override {
    DSRT_RETURN_IF_ERROR(check_broadcast_bytes_args(*this, data, bytes, root));
    count_broadcast(bytes, root);
    std::string what = Format("broadcast_bytes (%zu bytes, root %d)", bytes, root);
    return run_blocking(std::move(what),
                        [data, bytes, root, &ctx = ctx_] { return broadcast_pieces(ctx, data, bytes, root); });
  }

  Status barrier() override {
    return run_blocking("barrier", [&ctx = ctx_] {
      MPI_Request request = MPI_REQUEST_NULL;
      {
        MpiCallLock lock;
        DSRT_RETURN_IF_ERROR(mpi_check(MPI_Ibarrier(ctx.comm, &request), "MPI_Ibarrier"));
      }
      return poll_request(ctx, &request, "MPI_Ibarrier");
    });
  }

 private:
  MPI_Op float_op(ReduceOp op) const {
    return op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? runtime_->max_nan : runtime_->min_nan;
  }

  static Status mpi_all_reduce(ExchangeContext &ctx, void *values, size_t count, MPI_Datatype type, MPI_Op op,
                               const char *call) {
    if (count == 0) return Status::Ok();
    MPI_Request request = MPI_REQUEST_NULL;
    {
      MpiCallLock lock;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count), type, op, ctx.comm, &request);
      DSRT_RETURN_IF_ERROR(mpi_check(rc, call));
    }
    return poll_request(ctx, &request, call);
  }

  // 16-bit data is widened to fp32, reduced by MPI in fp32 and rounded once.
  Status small_all_reduce(ExchangeContext &ctx, void *buffer, size_t count, dsrt_dtype dtype, ReduceOp op) {
    if (dtype == DSRT_F32) return mpi_all_reduce(ctx, buffer, count, MPI_FLOAT, float_op(op), "MPI_Iallreduce");
    small_scratch_.resize(count);
    load_to_f32(small_scratch_.data(), buffer, dtype, count);
    DSRT_RETURN_IF_ERROR(mpi_all_reduce(ctx, small_scratch_.data(), count, MPI_FLOAT, float_op(op), "MPI_Iallreduce"));
    store_from_f32(buffer, small_scratch_.data(), dtype, count);
    return Status::Ok();
  }

  static Status broadcast_pieces(ExchangeContext &ctx, void *data, size_t bytes, int root) {
    for (size_t done = 0; done < bytes; done += kBroadcastPieceBytes) {
      size_t piece = std::min(kBroadcastPieceBytes, bytes - done);
      MPI_Request request = MPI_REQUEST_NULL;
      {
        MpiCallLock lock;
        int rc = MPI_Ibcast(static_cast<char *>(data) + done, static_cast<int>(piece), MPI_BYTE, root, ctx.comm,
                            &request);
        DSRT_RETURN_IF_ERROR(mpi_check(rc, "MPI_Ibcast"));
      }
      DSRT_RETURN_IF_ERROR(poll_request(ctx, &request, "MPI_Ibcast"));
    }
    return Status::Ok();
  }

  void begin_op(Clock::time_point deadline) override {
    ctx_.timed_out = false;
    ctx_.deadline = deadline;
  }
  bool op_timed_out() const override { return ctx_.timed_out; }

 private:
  const MpiRuntime *runtime_;
  ExchangeContext ctx_;              // used only by the op being executed
  std::vector<float> small_scratch_;  // fp32 image for small 16-bit all-reduces
};

}  // namespace

bool mpi_already_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0 && !mpi_runtime_finalized();
}

Status mpi_comm_create_world(int expected_rank, int expected_size, const char *launcher, std::shared_ptr<Comm> *out) {
  const MpiRuntime *runtime = nullptr;
  DSRT_RETURN_IF_ERROR(mpi_runtime_start(&runtime));
  int rank = 0, size = 0;
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  }
  if ((expected_size >= 0 && expected_size != size) || (expected_rank >= 0 && expected_rank != rank))
    return Error(DSRT_ERR_COMM,
                 "%s says this is rank %d of %d but MPI reports rank %d of %d: the program was probably started by a "
                 "launcher of a different MPI than the one dsrt was built with (Open MPI), or the environment was "
                 "copied between processes",
                 launcher, expected_rank, expected_size, rank, size);
  // Each dsrt communicator gets its own MPI communicator so engines never match each other's
  // messages; the duplication is itself polled so a rank that never arrives cannot hang us.
  ExchangeContext ctx;
  ctx.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(comm_timeout_seconds(comm_timeout_seconds_from_env())));
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &request), "MPI_Comm_idup"));
  }
  Status dup_status = poll_request(ctx, &request, "MPI_Comm_idup");
  if (!dup_status.ok()) mpi_runtime_mark_broken();
  if (!dup_status.ok())
    return dup_status.with_context(Format("creating a communicator on rank %d of %d (every rank must create it)",
                                          rank, size));
  {
    MpiCallLock lock;
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  }
  log_set_rank(rank);
  *out = std::make_shared<MpiComm>(runtime, dup, rank, size);
  return Status::Ok();
}

}  // namespace dsrt

#else  // no MPI in this build

namespace dsrt {
bool mpi_already_initialized() { return false; }
Status mpi_comm_create_world(int, int expected_size, const char *launcher, std::shared_ptr<Comm> *) {
  return Error(DSRT_ERR_UNSUPPORTED,
               "launched by %s with %d ranks, but this build of dsrt has no MPI: rebuild with -DDSRT_MPI=ON and "
               "Open MPI installed",
               launcher, expected_size);
}
}  // namespace dsrt
#endif
