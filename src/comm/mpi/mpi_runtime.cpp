// defines: process-wide MPI initialization and finalization, thread-level policy, NaN-aware ops.
#ifdef DSRT_HAVE_MPI
#include "comm/mpi/mpi_runtime.h"

#include <dirent.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "comm/comm_checks.h"

#include "util/log.h"

namespace dsrt {
namespace {

std::mutex g_start_mutex;
std::mutex g_call_mutex;
bool g_started = false;
bool g_serialize_calls = false;
MpiRuntime g_runtime;

template <typename T, bool IsMax>
void nan_extreme(void *in, void *inout, int *len, MPI_Datatype *) {
  const T *a = static_cast<const T *>(in);
  T *b = static_cast<T *>(inout);
  for (int i = 0; i < *len; ++i) {
    T x = a[i], y = b[i];
    if (x != x) {
      b[i] = x;
    } else if (y == y) {
      b[i] = IsMax ? (x > y ? x : y) : (x < y ? x : y);
    }
  }
}

void nan_max(void *in, void *inout, int *len, MPI_Datatype *type) {
  if (*type == MPI_DOUBLE) return nan_extreme<double, true>(in, inout, len, type);
  nan_extreme<float, true>(in, inout, len, type);
}
void nan_min(void *in, void *inout, int *len, MPI_Datatype *type) {
  if (*type == MPI_DOUBLE) return nan_extreme<double, false>(in, inout, len, type);
  nan_extreme<float, false>(in, inout, len, type);
}

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer reports at exit, after Open MPI has dlclose'd its plugins (some already during
// MPI_Init, the rest in MPI_Finalize): their allocations then have no module name and
// tests/lsan.supp cannot attribute them to Open MPI. Sanitizer builds map every plugin first with
// RTLD_NODELETE, so the plugins stay mapped and the report names them.
}  // namespace

void mpi_keep_plugins_mapped() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&MPI_Init_thread), &info) == 0 || info.dli_fname == nullptr) return;
  std::string libdir = info.dli_fname;
  libdir = libdir.substr(0, libdir.rfind('/'));
  // plugin folders of Open MPI (Debian's and upstream's layouts) and of what it loads (PMIx, UCX, hwloc)
  const std::pair<const char *, const char *> folders[] = {
      {"/openmpi/lib/openmpi3", "mca_"}, {"/openmpi/lib/openmpi", "mca_"}, {"/openmpi", "mca_"},
      {"/pmix2/lib/pmix", "pmix_mca_"}, {"/pmix", "mca_"},  {"/ucx", "libuct_"},
      {"/hwloc", "hwloc_"}};
  for (const auto &folder : folders) {
    std::string dir = libdir + folder.first;
    DIR *listing = opendir(dir.c_str());
    if (listing == nullptr) continue;
    while (dirent *entry = readdir(listing)) {
      std::string name = entry->d_name;
      if (name.rfind(folder.second, 0) != 0 || name.find(".so") == std::string::npos) continue;
      // a plugin whose dependencies are missing simply fails to load, as it would in MPI
      dlopen((dir + "/" + name).c_str(), RTLD_LAZY | RTLD_NODELETE);
    }
    closedir(listing);
  }
}
#else
}  // namespace

void mpi_keep_plugins_mapped() {}
#endif

namespace {

std::atomic<bool> g_broken{false};
std::atomic<bool> g_finalize_returned{false};

// MPI_Finalize is collective: with a rank dead it can wait for ever (about one run in five hung
// there). After a failed collective (a timeout: a peer died, stopped answering, or skipped it on
// purpose) the process finalizes under a watchdog: if MPI_Finalize has not returned within the
// collective timeout, the process exits without it (status 1), so survivors that a launcher lets
// run can exit. With every rank alive, finalizing takes milliseconds and the watchdog never fires.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_broken.load()) {
    const double limit = comm_timeout_seconds(comm_timeout_seconds_from_env());
    std::thread([limit] {
      std::this_thread::sleep_for(std::chrono::duration<double>(limit));
      if (g_finalize_returned.load()) return;
      std::fprintf(stderr, "dsrt: MPI_Finalize did not return within %g s after a failed collective (a rank died "
                           "or stopped answering); exiting without it\n", limit);
      std::fflush(stderr);
      std::_Exit(1);
    }).detach();
  }
  MPI_Finalize();
  g_finalize_returned.store(true);
}

const char *thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

}  // namespace

Status mpi_check(int rc, const char *call) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) text[0] = '\0';
  return Error(DSRT_ERR_COMM, "%s failed: %s (MPI error %d)", call, text, rc);
}

void mpi_runtime_mark_broken() { g_broken.store(true); }

bool mpi_runtime_broken() { return g_broken.load(); }

bool mpi_runtime_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

Status mpi_runtime_start(const MpiRuntime **out) {
  std::lock_guard<std::mutex> guard(g_start_mutex);
  if (g_started) {
    if (mpi_runtime_finalized())
      return Error(DSRT_ERR_COMM, "MPI has already been finalized in this process; it cannot be used again");
    *out = &g_runtime;
    return Status::Ok();
  }
  if (mpi_runtime_finalized())
    return Error(DSRT_ERR_COMM, "MPI was finalized by the host before dsrt used it; create dsrt communicators "
                                "before MPI_Finalize");
  int initialized = 0;
  DSRT_RETURN_IF_ERROR(mpi_check(MPI_Initialized(&initialized), "MPI_Initialized"));
  MpiRuntime runtime;
  if (initialized) {
    DSRT_RETURN_IF_ERROR(mpi_check(MPI_Query_thread(&runtime.thread_level), "MPI_Query_thread"));
  } else {
    mpi_keep_plugins_mapped();
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &runtime.thread_level);
    DSRT_RETURN_IF_ERROR(mpi_check(rc, "MPI_Init_thread"));
    runtime.initialized_by_dsrt = true;
    std::atexit(finalize_at_exit);
  }
  // Each dsrt communicator has its own worker thread; with MULTIPLE they call MPI freely. With
  // SERIALIZED in a process where dsrt owns MPI, dsrt's own lock is enough (the host does not
  // use MPI). A host that initialized MPI at a lower level gets collectives run on its thread.
  if (runtime.thread_level == MPI_THREAD_MULTIPLE) {
    runtime.worker_threads = true;
  } else if (runtime.thread_level == MPI_THREAD_SERIALIZED && runtime.initialized_by_dsrt) {
    runtime.worker_threads = true;
    g_serialize_calls = true;
  } else {
    log_warn_once("mpi-thread-level",
                  Format("MPI provides %s: dsrt runs collectives on the calling thread, so communication does "
                         "not overlap computation (initialize MPI with MPI_THREAD_MULTIPLE to get overlap)",
                         thread_level_name(runtime.thread_level)));
  }
  DSRT_RETURN_IF_ERROR(mpi_check(MPI_Op_create(nan_max, 1, &runtime.max_nan), "MPI_Op_create"));
  DSRT_RETURN_IF_ERROR(mpi_check(MPI_Op_create(nan_min, 1, &runtime.min_nan), "MPI_Op_create"));
  g_runtime = runtime;
  g_started = true;
  *out = &g_runtime;
  return Status::Ok();
}

MpiCallLock::MpiCallLock() {
  if (g_serialize_calls) {
    g_call_mutex.lock();
    locked_ = true;
  }
}
MpiCallLock::~MpiCallLock() {
  if (locked_) g_call_mutex.unlock();
}

}  // namespace dsrt
#endif
