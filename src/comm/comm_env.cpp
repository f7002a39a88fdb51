// defines: comm_create_from_env -- which launcher started this process, and the matching world:
// MPI, NCCL bootstrapped over MPI or over a TCP rendezvous (torchrun), or MPI behind host staging
// when ranks share a GPU, or Gloo over TCP between CPU hosts under torchrun.
// DSRT_COMM=auto|mpi|nccl|staged|tcp chooses.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_checks.h"
#include "comm/mpi/mpi_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/staged/staged_comm.h"
#include "comm/gloo/gloo_comm.h"
#include "comm/tcp_rendezvous.h"
#include "device/cuda_device.h"
#include "util/log.h"

#ifdef DSRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dsrt {
namespace {

enum class Launcher { Alone, Mpi, Torchrun };

struct LaunchInfo {
  Launcher kind = Launcher::Alone;
  const char *name = "";
  int rank = -1;
  int size = -1;
};

const char *env(const char *name) {
  const char *value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// Reads an integer variable (missing = -1).
Status env_int(const char *name, int *out) {
  *out = -1;
  const char *text = env(name);
  if (text == nullptr) return Status::Ok();
  char *end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > (1 << 24))
    return Error(DSRT_ERR_COMM, "environment variable %s='%s' is not a rank or size: the launcher's environment is "
                                "inconsistent", name, text);
  *out = static_cast<int>(value);
  return Status::Ok();
}

// The first (rank, size) pair present, from the given variable names.
Status read_pair(const char *rank_name, const char *size_name, LaunchInfo *info) {
  DSRT_RETURN_IF_ERROR(env_int(rank_name, &info->rank));
  DSRT_RETURN_IF_ERROR(env_int(size_name, &info->size));
  if (info->rank >= 0 && info->size >= 0 && info->rank >= info->size)
    return Error(DSRT_ERR_COMM, "%s=%d is not below %s=%d: the launcher's environment is inconsistent", rank_name,
                 info->rank, size_name, info->size);
  if (info->size == 0)
    return Error(DSRT_ERR_COMM, "%s=0: the launcher's environment is inconsistent", size_name);
  return Status::Ok();
}

Status detect_launcher(LaunchInfo *info) {
  if (env("OMPI_COMM_WORLD_SIZE") || env("OMPI_COMM_WORLD_RANK")) {
    *info = {Launcher::Mpi, "mpirun (Open MPI, OMPI_COMM_WORLD_*)"};
    return read_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", info);
  }
  if (env("PMI_RANK") || env("PMI_SIZE")) {
    *info = {Launcher::Mpi, "a PMI launcher (PMI_RANK/PMI_SIZE: mpiexec or srun --mpi=pmi2)"};
    return read_pair("PMI_RANK", "PMI_SIZE", info);
  }
  if (env("PMIX_RANK")) {
    *info = {Launcher::Mpi, "a PMIx launcher (PMIX_RANK)"};
    return env_int("PMIX_RANK", &info->rank);
  }
  // SLURM_PROCID alone is also set in a batch script, which is not a multi-rank launch: only an
  // srun job step (SLURM_STEP_ID) is.
  if (env("SLURM_STEP_ID") && env("SLURM_PROCID")) {
    *info = {Launcher::Mpi, "srun (SLURM_PROCID/SLURM_STEP_NUM_TASKS)"};
    return read_pair("SLURM_PROCID", env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", info);
  }
  if (env("RANK") && env("WORLD_SIZE")) {
    *info = {Launcher::Torchrun, "torchrun (RANK/WORLD_SIZE)"};
    return read_pair("RANK", "WORLD_SIZE", info);
  }
  *info = {Launcher::Alone, "no launcher", 0, 1};
  return Status::Ok();
}


enum class Choice { Auto, Mpi, Nccl, Staged, Tcp };

bool comm_has_nccl_build() {
#ifdef DSRT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Status read_choice(Choice *out) {
  *out = Choice::Auto;
  const char *text = env("DSRT_COMM");
  if (text == nullptr || std::strcmp(text, "auto") == 0) return Status::Ok();
  if (std::strcmp(text, "mpi") == 0) *out = Choice::Mpi;
  else if (std::strcmp(text, "nccl") == 0) *out = Choice::Nccl;
  else if (std::strcmp(text, "staged") == 0) *out = Choice::Staged;
  else if (std::strcmp(text, "tcp") == 0 || std::strcmp(text, "gloo") == 0) *out = Choice::Tcp;  // Gloo over TCP
  else
    return Error(DSRT_ERR_COMM, "DSRT_COMM='%s' is not one of auto, mpi, nccl, staged, tcp (or its other name, gloo)",
                 text);
  return Status::Ok();
}

uint64_t fnv1a(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash | 1;  // never 0, which stands for "no GPU"
}

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

// This rank's GPU: ordinal local_rank % visible devices, and an identity (host and PCI bus id)
// that is equal for two ranks exactly when they would drive the same GPU. No GPU: device -1 and
// identity 0.
struct LocalGpu {
  int device = -1;
  int visible = 0;
  uint64_t identity = 0;
  std::string bus_id;
};

LocalGpu local_gpu(int local_rank) {
  LocalGpu gpu;
#ifdef DSRT_HAVE_CUDA
  if (cudaGetDeviceCount(&gpu.visible) != cudaSuccess || gpu.visible <= 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    gpu.visible = 0;
    return gpu;
  }
  const int device = local_rank % gpu.visible;
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    return gpu;
  }
  gpu.device = device;
  gpu.bus_id = bus;
  gpu.identity = fnv1a(host_name() + "/" + bus);
#else
  (void)local_rank;
#endif
  return gpu;
}

// The GPU a staged communicator copies through; the CPU device when there is none (the copies
// are then plain host copies, which only tests want).
Status staging_device(int device, std::shared_ptr<Device> *out) {
  if (device < 0) {
    *out = std::shared_ptr<Device>(device_create_cpu());
    return Status::Ok();
  }
  std::unique_ptr<Device> cuda;
  DSRT_RETURN_IF_ERROR(device_create_cuda(device, &cuda));
  *out = std::shared_ptr<Device>(std::move(cuda));
  return Status::Ok();
}

Status nccl_not_possible(const char *launcher) {
  if (!comm_has_nccl_build())
    return Error(DSRT_ERR_UNSUPPORTED,
                 "launched by %s with NCCL requested, but this build of dsrt has no NCCL: rebuild with "
                 "-DDSRT_CUDA=ON where nccl.h and libnccl are installed, or set DSRT_COMM=mpi", launcher);
  return Error(DSRT_ERR_DEVICE,
               "launched by %s with NCCL requested, but no CUDA GPU is visible to this process (check the driver, "
               "nvidia-smi and CUDA_VISIBLE_DEVICES), or set DSRT_COMM=mpi", launcher);
}

// Rank 0's rendezvous address: MASTER_ADDR, and DSRT_RENDEZVOUS_PORT or MASTER_PORT + 1.
// who: "torchrun (RANK=3)", for messages.
Status rendezvous_from_env(const std::string &who, RendezvousOptions *options) {
  const char *master = env("MASTER_ADDR");
  if (master == nullptr)
    return Error(DSRT_ERR_COMM, "launched by %s but MASTER_ADDR is not set: the launcher's "
                                "environment is incomplete", who.c_str());
  options->host = master;
  int port = -1;
  DSRT_RETURN_IF_ERROR(env_int("DSRT_RENDEZVOUS_PORT", &port));
  if (port < 0) {
    int master_port = -1;
    DSRT_RETURN_IF_ERROR(env_int("MASTER_PORT", &master_port));
    if (master_port < 0)
      return Error(DSRT_ERR_COMM, "launched by %s but neither MASTER_PORT nor DSRT_RENDEZVOUS_PORT "
                                  "is set", who.c_str());
    port = master_port + 1;  // torch's TCPStore already listens on MASTER_PORT
  }
  options->port = port;
  options->timeout_s = comm_timeout_seconds_from_env();
  return Status::Ok();
}

// Host memory over Gloo's TCP transport, the ranks meeting at MASTER_ADDR.
Status create_tcp(const LaunchInfo &info, std::shared_ptr<Comm> *out) {
  if (info.rank < 0 || info.size < 1)
    return Error(DSRT_ERR_COMM, "DSRT_COMM=tcp needs this process's rank and the world size, but %s gave %s: "
                                "launch with mpirun, srun or torchrun", info.name,
                 info.rank < 0 ? "no rank" : "no world size");
  if (info.size == 1) return tcp_comm_create(RendezvousOptions(), 0, 1, out);
  RendezvousOptions options;
  const std::string who = info.kind == Launcher::Torchrun ? Format("torchrun (RANK=%d)", info.rank)
                                                         : Format("%s (rank %d)", info.name, info.rank);
  DSRT_RETURN_IF_ERROR(rendezvous_from_env(who, &options)
                           .with_context("DSRT_COMM=tcp needs rank 0's host and a free port, the same on every rank"));
  return tcp_comm_create(options, info.rank, info.size, out)
      .with_context(Format("joining the tcp communicator as rank %d of %d", info.rank, info.size));
}

// Under an MPI launcher: the MPI world, or NCCL / staging built on it.
Status create_under_mpi(const LaunchInfo &info, Choice choice, std::shared_ptr<Comm> *out) {
  if (choice == Choice::Tcp) return create_tcp(info, out);
  std::shared_ptr<Comm> world;
  DSRT_RETURN_IF_ERROR(mpi_comm_create_world(info.rank, info.size, info.name, &world));
  if (choice == Choice::Mpi || (choice == Choice::Auto && (world->size() == 1 || !comm_has_nccl_build()))) {
    *out = std::move(world);
    return Status::Ok();
  }
  // Every rank learns every rank's host and GPU, so all take the same decision.
  const int n = world->size(), me = world->rank();
  const uint64_t host = fnv1a(host_name());
  std::vector<uint64_t> hosts(n, 0);
  hosts[me] = host;
  DSRT_RETURN_IF_ERROR(world->all_reduce_u64(hosts.data(), hosts.size(), ReduceOp::Sum)
                           .with_context("exchanging host names to find each rank's GPU"));
  int local_rank = 0;
  for (int r = 0; r < me; ++r) local_rank += hosts[r] == host ? 1 : 0;
  const LocalGpu gpu = local_gpu(local_rank);
  std::vector<uint64_t> gpus(n, 0);
  gpus[me] = gpu.identity;
  DSRT_RETURN_IF_ERROR(world->all_reduce_u64(gpus.data(), gpus.size(), ReduceOp::Sum)
                           .with_context("exchanging GPU identities"));
  int without_gpu = -1, shared_a = -1, shared_b = -1;
  for (int r = 0; r < n; ++r) {
    if (gpus[r] == 0 && without_gpu < 0) without_gpu = r;
    for (int q = 0; q < r && shared_a < 0; ++q)
      if (gpus[r] != 0 && gpus[q] == gpus[r]) shared_a = q, shared_b = r;
  }
  if (choice == Choice::Auto) {
    if (without_gpu >= 0) {
      *out = std::move(world);  // a rank without a GPU: stay on MPI everywhere
      return Status::Ok();
    }
    choice = shared_a >= 0 ? Choice::Staged : Choice::Nccl;
    if (choice == Choice::Staged && me == 0)
      logf(DSRT_LOG_INFO, "ranks %d and %d share a GPU, which NCCL refuses: collectives go through host staging "
                          "and MPI", shared_a, shared_b);
  }
  if (choice == Choice::Staged) {
    std::shared_ptr<Device> device;
    DSRT_RETURN_IF_ERROR(staging_device(gpu.device, &device));
    return staged_comm_create(std::move(world), std::move(device), out);
  }
  // NCCL, requested or chosen.
  if (!comm_has_nccl_build() || gpu.device < 0) return nccl_not_possible(info.name);
  if (without_gpu >= 0)
    return Error(DSRT_ERR_DEVICE, "DSRT_COMM=nccl, but rank %d sees no CUDA GPU: every rank needs one (or use "
                                  "DSRT_COMM=mpi)", without_gpu);
  if (shared_a >= 0)
    return Error(DSRT_ERR_COMM, "DSRT_COMM=nccl, but ranks %d and %d drive the same GPU, which NCCL refuses: give each "
                                "rank its own GPU (CUDA_VISIBLE_DEVICES) or set DSRT_COMM=staged",
                 shared_a, shared_b);
  std::vector<uint8_t> id(kNcclUniqueIdBytes, 0);
  // A rank 0 that cannot make an id still joins the broadcast, so the others fail too, not hang.
  uint8_t id_ok = 1;
  Status id_status = Status::Ok();
  if (me == 0) {
    id_status = nccl_unique_id(id.data());
    id_ok = id_status.ok() ? 1 : 0;
  }
  DSRT_RETURN_IF_ERROR(world->broadcast_bytes(&id_ok, 1, 0).with_context("sharing the NCCL id"));
  DSRT_RETURN_IF_ERROR(id_status);
  if (!id_ok) return Error(DSRT_ERR_COMM, "rank 0 could not create an NCCL unique id (see rank 0's error)");
  DSRT_RETURN_IF_ERROR(world->broadcast_bytes(id.data(), id.size(), 0).with_context("sharing the NCCL id"));
  return nccl_comm_create(id.data(), me, n, gpu.device, out)
      .with_context(Format("joining NCCL as rank %d of %d on cuda:%d (%s)", me, n, gpu.device, gpu.bus_id.c_str()));
}

// Under torchrun: NCCL bootstrapped through a TCP rendezvous next to torch's own store when this
// rank sees a GPU (auto) or NCCL is asked for; otherwise host memory over TCP.
Status create_under_torchrun(const LaunchInfo &info, Choice choice, std::shared_ptr<Comm> *out) {
  if (choice == Choice::Mpi || choice == Choice::Staged)
    return Error(DSRT_ERR_UNSUPPORTED,
                 "DSRT_COMM=%s needs an MPI world, but this process was launched by torchrun (RANK=%d, WORLD_SIZE=%d) "
                 "without one: launch with mpirun or srun, or leave DSRT_COMM unset for NCCL (GPUs) or TCP (CPUs)",
                 choice == Choice::Mpi ? "mpi" : "staged", info.rank, info.size);
  int local_rank = -1;
  DSRT_RETURN_IF_ERROR(env_int("LOCAL_RANK", &local_rank));
  if (local_rank < 0) local_rank = info.rank;
  if (choice == Choice::Tcp) return create_tcp(info, out);
  if (choice == Choice::Auto && (!comm_has_nccl_build() || local_gpu(local_rank).device < 0))
    return create_tcp(info, out);
  if (!comm_has_nccl_build())
    return Error(DSRT_ERR_UNSUPPORTED,
                 "launched by torchrun (RANK=%d, WORLD_SIZE=%d) without an MPI launcher: joining torchrun's world "
                 "needs the NCCL build of dsrt (-DDSRT_CUDA=ON with nccl.h and libnccl installed). Launch with mpirun "
                 "or srun instead",
                 info.rank, info.size);
  const LocalGpu gpu = local_gpu(local_rank);
  if (gpu.device < 0)
    return Error(DSRT_ERR_DEVICE,
                 "launched by torchrun (RANK=%d, WORLD_SIZE=%d): dsrt joins torchrun's world over NCCL, but no CUDA "
                 "GPU is visible to this process (check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES); without "
                 "GPUs launch with mpirun or srun",
                 info.rank, info.size);
  RendezvousOptions options;
  DSRT_RETURN_IF_ERROR(rendezvous_from_env(Format("torchrun (RANK=%d)", info.rank), &options));
  // Each rank contributes its GPU identity; rank 0 adds the NCCL id.
  std::string mine(reinterpret_cast<const char *>(&gpu.identity), sizeof gpu.identity);
  if (info.rank == 0) {
    std::string id(kNcclUniqueIdBytes, '\0');
    DSRT_RETURN_IF_ERROR(nccl_unique_id(&id[0]));
    mine += id;
  }
  std::vector<std::string> all;
  DSRT_RETURN_IF_ERROR(tcp_rendezvous_all_gather(options, info.rank, info.size, mine, &all)
                           .with_context("bootstrapping NCCL under torchrun"));
  if (all[0].size() != sizeof(uint64_t) + kNcclUniqueIdBytes)
    return Error(DSRT_ERR_COMM, "rendezvous: rank 0 sent %zu bytes instead of an NCCL id (it chose the tcp "
                 "communicator if it sees no GPU: give every rank a GPU, or set DSRT_COMM=tcp on every rank)",
                 all[0].size());
  for (int r = 1; r < info.size; ++r)
    if (all[r].size() != sizeof(uint64_t))
      return Error(DSRT_ERR_COMM, "rendezvous: rank %d did not send a GPU identity (it chose the tcp communicator, "
                   "probably because it sees no GPU): give every rank a GPU, or set DSRT_COMM=tcp on every rank", r);
  for (int r = 0; r < info.size; ++r)
    for (int q = 0; q < r; ++q)
      if (all[r].compare(0, sizeof(uint64_t), all[q], 0, sizeof(uint64_t)) == 0)
        return Error(DSRT_ERR_COMM,
                     "ranks %d and %d drive the same GPU, which NCCL refuses: give each rank its own GPU "
                     "(torchrun --nproc-per-node at most the GPU count), or launch with mpirun, where ranks that share "
                     "a GPU use host staging (DSRT_COMM=staged)",
                     q, r);
  return nccl_comm_create(all[0].data() + sizeof(uint64_t), info.rank, info.size, gpu.device, out)
      .with_context(Format("joining NCCL as rank %d of %d on cuda:%d (%s)", info.rank, info.size, gpu.device,
                           gpu.bus_id.c_str()));
}

}  // namespace

Status comm_create_from_env(std::shared_ptr<Comm> *out) {
  if (out == nullptr) return Error(DSRT_ERR_INVALID_ARGUMENT, "comm_create_from_env: out is NULL");
  LaunchInfo info;
  DSRT_RETURN_IF_ERROR(detect_launcher(&info));
  Choice choice = Choice::Auto;
  DSRT_RETURN_IF_ERROR(read_choice(&choice));
  switch (info.kind) {
    case Launcher::Mpi: return create_under_mpi(info, choice, out);
    case Launcher::Torchrun:
      if (info.size > 1) return create_under_torchrun(info, choice, out);
      return comm_create_local(out);
    case Launcher::Alone:
      // A host that initialized MPI itself (e.g. mpi4py in a singleton) still gets its MPI world.
      if (mpi_already_initialized()) return create_under_mpi({Launcher::Mpi, "the host's MPI", -1, -1}, choice, out);
      return comm_create_local(out);
  }
  return Error(DSRT_ERR_INTERNAL, "comm_create_from_env: unknown launcher kind");
}

}  // namespace dsrt
