// bench_comm -- bucketed reduce-scatter, all-gather and all-to-all throughput of dsrt's MPI communicator
// against MPI's own blocking collectives on the same bytes, in the same run.
// Run under mpirun (see bench/run_comm.sh). Prints bus bandwidth, (N-1)/N * bytes / time.
//
// fp32: dsrt reduce_scatter vs MPI_Reduce_scatter_block(MPI_FLOAT, MPI_SUM).
// bf16: MPI has no bf16 sum. The peer is MPI_Reduce_scatter_block on the same bytes as MPI_FLOAT
// (the speed MPI moves and sums those bytes), and, for reference, the user-defined MPI op on
// MPI_UINT16_T that hosts write (it rounds to bf16 after every pairwise combine).
// all_gather: dsrt all_gather vs MPI_Allgather on the same bytes.
// all_to_all: dsrt all_to_all vs MPI_Alltoall on the same bytes (bytes = each rank's whole send
// buffer, a block of bytes/N to every rank).
// gloo: the same collectives over dsrt's tcp communicator, which runs on Gloo's TCP transport
// (what torchrun ranks on CPU hosts use), set up in the same processes, against the same MPI
// figure: the gloo/MPI column is MPI's time over Gloo's on the same bytes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/gloo/gloo_comm.h"
#include "util/aligned_buffer.h"
#include "util/half.h"

namespace {

using dsrt::Comm;

void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *) {
  auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) b[i] = dsrt::float_to_bf16(dsrt::bf16_to_float(a[i]) + dsrt::bf16_to_float(b[i]));
}

// Seconds of one call: the slowest rank's time, after a barrier.
double time_once(const std::function<void()> &op) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto start = std::chrono::steady_clock::now();
  op();
  double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// Best-of-reps times of each op, the ops interleaved call by call so that machine load (other
// processes on a shared host) falls on all of them alike; the minimum is the least disturbed.
std::vector<double> best_times(int reps, const std::vector<std::function<void()>> &ops) {
  std::vector<double> best(ops.size(), 1e30);
  for (auto &op : ops) op();  // warm up: buffers, connections, scratch
  for (int i = 0; i < reps; ++i)
    for (size_t k = 0; k < ops.size(); ++k) best[k] = std::min(best[k], time_once(ops[k]));
  return best;
}

void fail(const char *what, const dsrt::Status &status) {
  std::fprintf(stderr, "bench_comm: %s: %s\n", what, status.message().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// A TCP communicator over the MPI ranks: rank 0 picks a free loopback port for the rendezvous.
std::shared_ptr<Comm> make_tcp_comm(int rank, int size) {
  int port = 0;
  if (rank == 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
      fail("picking a port for the TCP rendezvous", dsrt::Status(DSRT_ERR_COMM, "socket/bind failed"));
    ::close(fd);
    port = ntohs(addr.sin_port);
  }
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dsrt::RendezvousOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.timeout_s = 60;
  std::shared_ptr<Comm> tcp;
  dsrt::Status status = dsrt::tcp_comm_create(options, rank, size, &tcp);
  if (!status.ok()) fail("creating the TCP communicator", status);
  return tcp;
}

}  // namespace

int main(int argc, char **argv) {
  std::shared_ptr<Comm> comm;
  dsrt::Status status = dsrt::comm_create_from_env(&comm);
  if (!status.ok()) {
    std::fprintf(stderr, "bench_comm: %s\n", status.message().c_str());
    return 1;
  }
  if (std::strcmp(comm->backend(), "mpi") != 0 || comm->size() < 2) {
    std::fprintf(stderr, "bench_comm: run under mpirun with 2 or more ranks (got a %s world of %d)\n",
                 comm->backend(), comm->size());
    return 1;
  }
  const int n = comm->size(), me = comm->rank();
  std::shared_ptr<Comm> tcp = make_tcp_comm(me, n);
  const size_t max_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) << 20 : size_t{64} << 20;
  MPI_Op bf16_op;
  MPI_Op_create(bf16_sum_op, 1, &bf16_op);

  dsrt::AlignedBuffer send, recv;
  if (!send.allocate(max_bytes) || !recv.allocate(max_bytes)) fail("allocate", dsrt::Status(DSRT_ERR_OUT_OF_MEMORY, ""));
  for (size_t i = 0; i < max_bytes / 2; ++i)  // small values: bf16 and fp32 views are both finite
    send.as<uint16_t>()[i] = dsrt::float_to_bf16(0.001f * static_cast<float>((i * 7 + me) % 13));

  if (me == 0)
    std::printf("# %d ranks; best of several calls; bus bandwidth GB/s = (N-1)/N * bytes / time; ratio = dsrt / MPI on the same bytes\n"
                "%-15s %-5s %9s %10s %10s %7s %10s %9s %12s\n",
                n, "collective", "dtype", "bytes", "dsrt", "MPI", "ratio", "gloo", "gloo/MPI", "MPI-bf16-op");
  std::vector<double> ratios, tcp_ratios;
  for (size_t bytes = size_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
    const int reps = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bytes, 8, 40));
    const double bus = static_cast<double>(bytes) * (n - 1) / n / 1e9;
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
      const size_t element = dsrt::dtype_size(dtype);
      const size_t block = bytes / element / n;       // reduce-scatter: elements per rank
      const int block_f32 = static_cast<int>(bytes / 4 / n);  // the same bytes as MPI_FLOAT
      auto ours = [&] {
        dsrt::Status s = comm->reduce_scatter_sync(send.data(), recv.data(), block, dtype, dsrt::ReduceOp::Sum);
        if (!s.ok()) fail("reduce_scatter", s);
      };
      auto theirs = [&] {
        MPI_Reduce_scatter_block(send.data(), recv.data(), block_f32, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
      auto over_tcp = [&] {
        dsrt::Status s = tcp->reduce_scatter_sync(send.data(), recv.data(), block, dtype, dsrt::ReduceOp::Sum);
        if (!s.ok()) fail("reduce_scatter over TCP", s);
      };
      auto theirs_bf16 = [&] {
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(block), MPI_UINT16_T, bf16_op,
                                 MPI_COMM_WORLD);
      };
      std::vector<std::function<void()>> ops = {ours, theirs, over_tcp};
      if (dtype == DSRT_BF16) ops.push_back(theirs_bf16);
      std::vector<double> best = best_times(reps, ops);
      double t_ours = best[0], t_theirs = best[1], t_tcp = best[2], t_bf16 = dtype == DSRT_BF16 ? best[3] : 0;
      ratios.push_back(t_theirs / t_ours);
      tcp_ratios.push_back(t_theirs / t_tcp);
      if (me == 0) {
        char extra[32] = "";
        if (dtype == DSRT_BF16) std::snprintf(extra, sizeof extra, "%12.2f", bus / t_bf16);
        std::printf("%-15s %-5s %9zu %10.2f %10.2f %7.2f %10.2f %9.2f %s\n", "reduce_scatter", dsrt::dtype_name(dtype),
                    bytes, bus / t_ours, bus / t_theirs, t_theirs / t_ours, bus / t_tcp, t_theirs / t_tcp, extra);
      }
    }
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
      const size_t element = dsrt::dtype_size(dtype);
      const size_t count = bytes / element / n;  // all-gather: elements each rank contributes
      auto ours = [&] {
        dsrt::Status s = comm->all_gather_sync(send.data(), recv.data(), count, dtype);
        if (!s.ok()) fail("all_gather", s);
      };
      auto theirs = [&] {
        MPI_Allgather(send.data(), static_cast<int>(count * element), MPI_BYTE, recv.data(),
                      static_cast<int>(count * element), MPI_BYTE, MPI_COMM_WORLD);
      };
      auto over_tcp = [&] {
        dsrt::Status s = tcp->all_gather_sync(send.data(), recv.data(), count, dtype);
        if (!s.ok()) fail("all_gather over TCP", s);
      };
      std::vector<double> best = best_times(reps, {ours, theirs, over_tcp});
      double t_ours = best[0], t_theirs = best[1], t_tcp = best[2];
      ratios.push_back(t_theirs / t_ours);
      tcp_ratios.push_back(t_theirs / t_tcp);
      if (me == 0)
        std::printf("%-15s %-5s %9zu %10.2f %10.2f %7.2f %10.2f %9.2f\n", "all_gather", dsrt::dtype_name(dtype), bytes,
                    bus / t_ours, bus / t_theirs, t_theirs / t_ours, bus / t_tcp, t_theirs / t_tcp);
    }
    for (dsrt_dtype dtype : {DSRT_F32, DSRT_BF16}) {
      const size_t element = dsrt::dtype_size(dtype);
      const size_t count = bytes / element / n;  // all-to-all: elements to each rank
      const int block_bytes = static_cast<int>(count * element);
      auto ours = [&] {
        dsrt::CommHandle h;
        dsrt::Status s = comm->all_to_all(send.data(), recv.data(), count, dtype, &h);
        if (s.ok()) s = h->wait();
        if (!s.ok()) fail("all_to_all", s);
      };
      auto theirs = [&] {
        MPI_Alltoall(send.data(), block_bytes, MPI_BYTE, recv.data(), block_bytes, MPI_BYTE, MPI_COMM_WORLD);
      };
      auto over_tcp = [&] {
        dsrt::CommHandle h;
        dsrt::Status s = tcp->all_to_all(send.data(), recv.data(), count, dtype, &h);
        if (s.ok()) s = h->wait();
        if (!s.ok()) fail("all_to_all over TCP", s);
      };
      std::vector<double> best = best_times(reps, {ours, theirs, over_tcp});
      double t_ours = best[0], t_theirs = best[1], t_tcp = best[2];
      ratios.push_back(t_theirs / t_ours);
      tcp_ratios.push_back(t_theirs / t_tcp);
      if (me == 0)
        std::printf("%-15s %-5s %9zu %10.2f %10.2f %7.2f %10.2f %9.2f\n", "all_to_all", dsrt::dtype_name(dtype), bytes,
                    bus / t_ours, bus / t_theirs, t_theirs / t_ours, bus / t_tcp, t_theirs / t_tcp);
    }
  }
  if (me == 0) {
    std::sort(ratios.begin(), ratios.end());
    std::printf("# ratio dsrt/MPI: min %.2f, median %.2f, max %.2f\n", ratios.front(), ratios[ratios.size() / 2],
                ratios.back());
    std::sort(tcp_ratios.begin(), tcp_ratios.end());
    std::printf("# ratio gloo/MPI (Gloo over loopback TCP against MPI's shared memory): min %.2f, median %.2f, max %.2f\n",
                tcp_ratios.front(), tcp_ratios[tcp_ratios.size() / 2], tcp_ratios.back());
  }
  MPI_Op_free(&bf16_op);
  tcp.reset();
  comm.reset();
  return 0;
}
