/*
** dsrt.h -- the public interface of dsrt, a training-memory runtime.
**
** dsrt owns the model states of a training run (parameters, gradients, optimizer states),
** partitions them across ranks (ZeRO stages 0-3), moves them between device memory, pinned host
** memory and NVMe, steps them with fused optimizers, keeps mixed precision stable, and checkpoints
** them. The host program computes forward and backward; dsrt does everything else.
**
** This header is the authoritative description of the interface. It is plain C11 (C99-clean),
** carries no C++, CUDA, MPI or NCCL types, and is the only header a program needs.
**
** CONVENTIONS (they hold for every function below unless its comment says otherwise)
**
** Status.  Every fallible function returns a dsrt_status. DSRT_OK (0) means success. Results are
**   written to trailing out-parameters; on failure an out-parameter that would hold a handle or a
**   string is set to NULL. The codes are fixed forever; new codes are only appended.
**
** Errors.  On failure, dsrt_last_error_message() returns a human-readable detail of the failure
**   (which key, which file and offset, which rank, which errno, and what to do). The message is
**   thread-local: it describes the last failure on the calling thread and is overwritten by the
**   next failure on that thread. Successful calls do not clear it.
**
** Handles.  dsrt_config, dsrt_comm, dsrt_engine, dsrt_tensor and dsrt_checkpoint are opaque.
**   Every create/open has a destroy/close that accepts NULL. Destroy order never matters: an engine
**   keeps its communicator alive internally, so a binding that frees objects in any order is safe.
**   A NULL handle passed where one is required returns DSRT_ERR_INVALID_ARGUMENT.
**
** Threads.  A handle is used from one thread at a time; different engines are independent and may
**   be driven from different threads concurrently. dsrt_status_string, dsrt_last_error_message,
**   dsrt_version_*, dsrt_has_feature and dsrt_free are safe from any thread at any time.
**   dsrt_set_log_callback is process-wide; set it before creating engines.
**
** Exceptions.  No C++ exception, abort() or exit() ever crosses this interface. Out-of-memory
**   inside the library is reported as DSRT_ERR_OUT_OF_MEMORY.
**
** Status lists.  Each function's comment lists the codes it returns. Two more may come from any
**   function returning dsrt_status, and are not repeated: DSRT_ERR_OUT_OF_MEMORY (host memory ran
**   out) and DSRT_ERR_INTERNAL (a bug in dsrt). scripts/check-header-docs.py (ctest
**   check_header_docs) fails when a function's comment lists no code.
**
** Experimental.  The calls in a section whose banner says EXPERIMENTAL are exported and tested
**   like the others, but their names, arguments or meaning may still change in a minor version
**   (the banner says why); everything else follows the compatibility rule below.
**
** Compatibility.  Programs built against version MAJOR.x work with any library of the same MAJOR
**   (the SONAME is libdsrt.so.MAJOR). Structs that cross the interface start with a struct_size
**   field which the caller sets to sizeof(the struct it was compiled with); fields are only ever
**   appended, and the library reads and writes no more than struct_size bytes.
*/
#ifndef DSRT_H
#define DSRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The export marker of every function below. Windows: dllexport while the library itself is built
** (DSRT_BUILDING_LIBRARY, set by its build), dllimport for programs that use the DLL, nothing when
** they link a static library (define DSRT_STATIC). Elsewhere: default visibility, since the library
** is built with hidden visibility. */
#if defined(_WIN32) || defined(__CYGWIN__)
#if defined(DSRT_BUILDING_LIBRARY)
#define DSRT_API __declspec(dllexport)
#elif defined(DSRT_STATIC)
#define DSRT_API
#else
#define DSRT_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define DSRT_API __attribute__((visibility("default")))
#else
#define DSRT_API
#endif

/* ------------------------------------------------------------------------------------------------
** VERSION
** DSRT_VERSION_NUMBER = MAJOR*10000 + MINOR*100 + PATCH. Compare it with dsrt_version_number() to
** check that the header a program was compiled with matches the library it runs against.
*/
#define DSRT_VERSION_MAJOR 0
#define DSRT_VERSION_MINOR 1
#define DSRT_VERSION_PATCH 0
#define DSRT_VERSION_NUMBER (DSRT_VERSION_MAJOR * 10000 + DSRT_VERSION_MINOR * 100 + DSRT_VERSION_PATCH)
#define DSRT_VERSION_STRING "0.1.0"

/* The version of the library actually loaded (not of this header). Always safe. */
DSRT_API int32_t dsrt_version_number(void);
DSRT_API const char *dsrt_version_string(void);

/* ------------------------------------------------------------------------------------------------
** STATUS CODES AND ERRORS
*/
typedef int32_t dsrt_status;

#define DSRT_OK 0
#define DSRT_ERR_INVALID_ARGUMENT 1 /* a NULL handle, a bad pointer/size, an unknown name */
#define DSRT_ERR_CONFIG 2           /* the configuration is invalid or incomplete */
#define DSRT_ERR_STATE 3            /* the call is out of order (e.g. add_param after build) */
#define DSRT_ERR_OUT_OF_MEMORY 4    /* host, pinned or device memory could not be allocated */
#define DSRT_ERR_IO 5               /* a file or NVMe operation failed (message names file, offset) */
#define DSRT_ERR_COMM 6             /* a collective failed or timed out, or ranks disagree */
#define DSRT_ERR_DEVICE 7           /* a CUDA call failed */
#define DSRT_ERR_CHECKPOINT 8       /* a checkpoint is corrupt, incomplete or does not match */
#define DSRT_ERR_UNSUPPORTED 9      /* a valid request this build or version does not implement */
#define DSRT_ERR_INTERNAL 10        /* a bug in dsrt: please report it with the message */

/* Static English text for a status code ("invalid argument", ...); never NULL, never freed.
** An unknown code gives "unknown status". Always safe. */
DSRT_API const char *dsrt_status_string(dsrt_status status);

/* Detail of the last failure on the calling thread, or "" if none has happened. The pointer is
** owned by the library and valid until the next dsrt call on this thread. Always safe. */
DSRT_API const char *dsrt_last_error_message(void);

/* Free a string or buffer the library returned through a char ** out-parameter. Accepts NULL. */
DSRT_API void dsrt_free(void *ptr);

/* 1 if this build of the library has the named feature and it is usable in this process, else 0.
** Names: "cuda" (built with CUDA and a GPU is visible), "nccl", "mpi", "tcp" (the TCP communicator
** torchrun ranks use without GPUs), "io_uring" (built with liburing and the kernel allows it),
** "avx512", "avx2" (the CPU optimizer kernels can use them).
** An unknown or NULL name gives 0. Always safe. */
DSRT_API int32_t dsrt_has_feature(const char *name);

/* ------------------------------------------------------------------------------------------------
** LOGGING
** Without a callback, messages at or above the level named by the DSRT_LOG_LEVEL environment
** variable (error, warn, info, debug; default warn) go to stderr, prefixed "[dsrt rank R]".
** With a callback, every message at or above that level is passed to it instead. The callback may
** be called from any thread dsrt uses internally; it must not call back into dsrt. Pass fn = NULL
** to restore stderr. The msg pointer is valid only during the call.
*/
#define DSRT_LOG_ERROR 0
#define DSRT_LOG_WARN 1
#define DSRT_LOG_INFO 2
#define DSRT_LOG_DEBUG 3
typedef void (*dsrt_log_fn)(int32_t level, const char *msg, void *user);
/* Set (or, with fn NULL, clear) the process's log callback, as described above. Never fails. */
DSRT_API void dsrt_set_log_callback(dsrt_log_fn fn, void *user);

/* ------------------------------------------------------------------------------------------------
** DATA TYPES AND PLACES
*/
typedef enum { DSRT_F32 = 0, DSRT_F16 = 1, DSRT_BF16 = 2 } dsrt_dtype;

/* Where a buffer lives (dsrt_engine_device, dsrt_memory_stats). */
typedef enum { DSRT_DEVICE_CPU = 0, DSRT_DEVICE_CUDA = 1 } dsrt_device_type;
typedef enum { DSRT_LOC_DEVICE = 0, DSRT_LOC_HOST = 1, DSRT_LOC_NVME = 2 } dsrt_location;
#define DSRT_NUM_LOCATIONS 3

typedef struct dsrt_config dsrt_config;
typedef struct dsrt_comm dsrt_comm;
typedef struct dsrt_engine dsrt_engine;
typedef struct dsrt_tensor dsrt_tensor;
typedef struct dsrt_checkpoint dsrt_checkpoint;

/* ------------------------------------------------------------------------------------------------
** CONFIG -- a DeepSpeed JSON configuration
**
** The text is read the way DeepSpeed reads it: // and # comments and trailing commas are
** accepted; duplicate keys are an error. Every section is validated against DeepSpeed's schema
** (DeepSpeed 0.19.8's keys, ranges and defaults): an unknown key inside a section is an error naming
** its full path and the nearest valid key; an unknown top-level key is a warning (DeepSpeed ignores
** it) unless it is close to a known key or a known misplaced name, which stay errors; a wrong type or range
** names the key, the value and what is allowed; a key dsrt knows but does not implement is
** reported, never dropped. All errors found are listed in the message, one per line.
**
** Values may be "auto"; they must be resolved with the setters below before dsrt_engine_create.
** A config is a value object: dsrt_engine_create copies it, so it may be destroyed afterwards.
*/

/* Parse JSON text (NUL-terminated). On DSRT_ERR_CONFIG the message lists every error with its key
** path (or line and column for a syntax error). *out is NULL on failure.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL json or out), DSRT_ERR_CONFIG. */
DSRT_API dsrt_status dsrt_config_parse(const char *json, dsrt_config **out);

/* Read and parse a file. DSRT_ERR_IO if it cannot be read; otherwise as dsrt_config_parse, with
** the file name in every message. Also DSRT_ERR_INVALID_ARGUMENT (NULL path or out). */
DSRT_API dsrt_status dsrt_config_load(const char *path, dsrt_config **out);

/* Set or resolve one value by dotted key path ("optimizer.params.lr", "zero_optimization.stage",
** "optimizer.params.betas.0" for an element of a list). The key must be one the schema knows; the
** value is validated as if it had been in the file. Setting a key that was "auto" resolves it.
** Errors: DSRT_ERR_INVALID_ARGUMENT (NULL), DSRT_ERR_CONFIG (unknown key, wrong type or range). */
DSRT_API dsrt_status dsrt_config_set_number(dsrt_config *config, const char *key_path, double value);
DSRT_API dsrt_status dsrt_config_set_string(dsrt_config *config, const char *key_path, const char *value);
DSRT_API dsrt_status dsrt_config_set_bool(dsrt_config *config, const char *key_path, int value);

/* Resolve the hidden-size "auto"s the way Accelerate and the HF Trainer do:
** zero_optimization.reduce_bucket_size = h*h, stage3_prefetch_bucket_size = 0.9*h*h,
** stage3_param_persistence_threshold = 10*h. Only keys that are "auto" are changed.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL config, h outside 1..94906265, where h*h would
** not be exact); DSRT_ERR_CONFIG (a resolved value out of its key's range). */
DSRT_API dsrt_status dsrt_config_set_hidden_size(dsrt_config *config, int64_t hidden_size);

/* Apply the batch rule train_batch_size = train_micro_batch_size_per_gpu *
** gradient_accumulation_steps * world_size, deriving a missing term as DeepSpeed does.
** DSRT_ERR_CONFIG, showing the three numbers, if they are inconsistent. dsrt_engine_create applies
** it with the communicator's world size; call it directly to check a config offline.
** Also DSRT_ERR_INVALID_ARGUMENT (NULL config, world_size < 1). */
DSRT_API dsrt_status dsrt_config_set_world_size(dsrt_config *config, int32_t world_size);

/* The effective value of a numeric or boolean key (booleans give 0 or 1), defaults filled in.
** DSRT_ERR_CONFIG if the key is unknown, is not a number, or is still "auto";
** DSRT_ERR_INVALID_ARGUMENT for a NULL argument (*out is then 0). */
DSRT_API dsrt_status dsrt_config_get_number(const dsrt_config *config, const char *key_path, double *out);

/* The effective value of a string key (e.g. "optimizer.type", "zero_optimization.offload_param.device").
** *out is a new string; free it with dsrt_free. By contract any scalar key can be read this way: a
** numeric key gives DSRT_OK and its value as text (the shortest form that reads back, "0.00025",
** "8"), a boolean "true" or "false". DSRT_ERR_CONFIG if the key is unknown, a section, has no value
** or is still "auto"; DSRT_ERR_INVALID_ARGUMENT for a NULL argument. */
DSRT_API dsrt_status dsrt_config_get_string(const dsrt_config *config, const char *key_path, char **out);

/* The effective configuration as pretty-printed JSON, every value in force (defaults filled in,
** "auto" kept where unresolved). *out is a new string; free it with dsrt_free.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config or out). */
DSRT_API dsrt_status dsrt_config_to_json(const dsrt_config *config, char **out);

/* The dotted paths of values still "auto", one per line ("" when none). Free with dsrt_free.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config or out). */
DSRT_API dsrt_status dsrt_config_unresolved(const dsrt_config *config, char **out);

/* Warnings found while reading (deprecated aliases, misplaced sections), one per line, "" if none.
** They are also logged at warn level. Free with dsrt_free.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config or out). */
DSRT_API dsrt_status dsrt_config_warnings(const dsrt_config *config, char **out);

/* Free a config. Accepts NULL. Engines created from it keep their own copy. */
DSRT_API void dsrt_config_destroy(dsrt_config *config);

/* ------------------------------------------------------------------------------------------------
** COMMUNICATOR -- the group of ranks an engine partitions over
*/

/* A world of one rank (no MPI needed). Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (out is NULL). */
DSRT_API dsrt_status dsrt_comm_create_local(dsrt_comm **out);

/* The world this process was launched into: mpirun/Open MPI (OMPI_COMM_WORLD_*), srun/PMI
** (SLURM_PROCID, PMI_RANK) or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A process
** started alone gives a world of one. MPI is initialized on first use (unless the host already did)
** and finalized at process exit only if dsrt initialized it. Between GPUs, NCCL is used when the
** build has it. DSRT_ERR_COMM if the launcher's environment is inconsistent or MPI fails;
** DSRT_ERR_UNSUPPORTED if launched by a launcher this build cannot join (e.g. built without MPI).
** Collectives that do not finish within DSRT_COMM_TIMEOUT_S seconds (default 300) fail with
** DSRT_ERR_COMM naming the operation, the rank and the step instead of hanging. */
DSRT_API dsrt_status dsrt_comm_create_from_env(dsrt_comm **out);

/* Fill out128 with a new NCCL unique id (128 bytes) for dsrt_comm_create_nccl; one rank creates it
** and the host shares it (e.g. through torch.distributed). DSRT_ERR_UNSUPPORTED in a build without
** NCCL; DSRT_ERR_COMM if NCCL cannot create one (no usable network interface). */
DSRT_API dsrt_status dsrt_nccl_unique_id(void *out128);

/* Join an NCCL world from a shared unique id; collective over world_size ranks, one GPU per rank.
** device is the CUDA device ordinal of this rank. Collectives take GPU buffers (host buffers work,
** staged through the GPU) and run on the communicator's own stream. DSRT_ERR_UNSUPPORTED in a build
** without NCCL; DSRT_ERR_DEVICE if no GPU is visible or device does not exist; DSRT_ERR_COMM if a
** rank does not join within DSRT_COMM_TIMEOUT_S seconds or NCCL refuses (two ranks on one GPU). */
DSRT_API dsrt_status dsrt_comm_create_nccl(const void *id128, int32_t rank, int32_t world_size,
                                           int32_t device, dsrt_comm **out);

/* This process's rank and the number of ranks; -1 for a NULL handle. */
DSRT_API int32_t dsrt_comm_rank(const dsrt_comm *comm);
DSRT_API int32_t dsrt_comm_world_size(const dsrt_comm *comm);

/* Block until every rank reaches the barrier (or the timeout passes: DSRT_ERR_COMM).
** DSRT_ERR_INVALID_ARGUMENT for a NULL comm. */
DSRT_API dsrt_status dsrt_comm_barrier(dsrt_comm *comm);

/* Release the caller's reference. Engines created on it keep it alive until they are destroyed. */
DSRT_API void dsrt_comm_destroy(dsrt_comm *comm);

/* ------------------------------------------------------------------------------------------------
** ENGINE -- owns the model states
**
** Life cycle: create -> add_param (every tensor, same order and shapes on every rank) -> build ->
** repeat { acquire/read working copies, write gradients, grad_ready, step } -> destroy.
** A call out of this order returns DSRT_ERR_STATE.
*/

/* Create an engine from a configuration (copied) and a communicator (NULL = a world of one).
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL config or out, an invalid comm handle);
** DSRT_ERR_CONFIG (an unresolved "auto", inconsistent batch sizes at the communicator's world
** size, or a setting the engine refuses: what dsrt_config_check reports); DSRT_ERR_UNSUPPORTED (an
** enabled feature dsrt does not implement; CUDA asked in a build without it); DSRT_ERR_DEVICE (no
** usable GPU for DSRT_DEVICE=cuda); DSRT_ERR_IO (csv_monitor's folder cannot be created);
** DSRT_ERR_COMM (staging a host communicator for the device failed). *out is NULL on failure. */
DSRT_API dsrt_status dsrt_engine_create(const dsrt_config *config, dsrt_comm *comm, dsrt_engine **out);

/* Register a parameter. name must be unique; shape holds ndim (0..8) positive sizes. init is the
** full fp32 value on the host, identical on every rank (or NULL for zeros); it is copied. The
** tensor handle is owned by the engine and valid until the engine is destroyed. out may be NULL.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine or name, empty or taken name, ndim outside
** 0..8, NULL shape with ndim > 0, a size < 1, more than 2^40 elements, non-finite init);
** DSRT_ERR_STATE (engine already built, or unusable after a failed collective). */
DSRT_API dsrt_status dsrt_engine_add_param(dsrt_engine *engine, const char *name, const int64_t *shape,
                                           int32_t ndim, const float *init, dsrt_tensor **out);

/* Register a frozen parameter (a base model fine-tuned through adapters): a working copy only, in
** the working dtype, with no gradient, no fp32 master and no optimizer state; the optimizer never
** changes it. Arguments, ownership and validation as dsrt_engine_add_param (the name must differ
** from every trainable and frozen tensor's). Before build only; every rank registers the same
** frozen tensors in the same order (build: DSRT_ERR_COMM otherwise). Same thread rules as
** add_param (one thread per engine).
** Storage: at ZeRO stages 0-2 every rank keeps the whole working copy; at stage 3 on W ranks
** (W = 1 included) each rank keeps ceil(n/W) elements, and dsrt_tensor_acquire all-gathers the
** tensor (a collective: every rank acquires the same tensors in the same order) exactly as it does
** a trainable tensor: the gathers follow the recorded acquire order with prefetching, reuse,
** stage3_max_live_parameters and stage3_param_persistence_threshold applying to frozen tensors
** too. With zero_optimization.offload_param ("cpu" or "nvme") a non-persistent frozen tensor's
** shard lives in host memory or on NVMe beside the trainable shards, read back on each gather.
** Calls on the handle: acquire/release as above; dsrt_tensor_read_fp32 returns the working copy
** widened to fp32 (collective at stage 3); dsrt_tensor_write_fp32 sets it (rounded to the working
** dtype); dsrt_tensor_grad, dsrt_tensor_grad_ready and dsrt_tensor_set_group return
** DSRT_ERR_STATE naming the tensor; dsrt_tensor_group returns -1; name/ndim/shape/numel as for any
** tensor. Frozen tensors are not counted by dsrt_engine_num_tensors / dsrt_engine_tensor (which
** list the trainable ones); they are saved in checkpoints (marked frozen: loading into an engine
** where a tensor's frozen flag differs is DSRT_ERR_CHECKPOINT naming it) and in the 16-bit model
** file, and counted in dsrt_memory_stats.working_params.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine or name, empty or taken name, bad ndim or
** shape, non-finite init); DSRT_ERR_STATE (engine already built, or unusable after a failed
** collective). The handle is owned by the engine and valid until the engine is destroyed. */
DSRT_API dsrt_status dsrt_engine_add_frozen_param(dsrt_engine *engine, const char *name, const int64_t *shape,
                                                  int32_t ndim, const float *init, dsrt_tensor **out);

/* After the last add_param: checks that all ranks registered the same tensors, partitions,
** allocates and places every state (device, host, NVMe). Collective.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine); DSRT_ERR_STATE (already built,
** unusable); DSRT_ERR_COMM (ranks registered different tensors or groups, or a collective failed);
** DSRT_ERR_CONFIG (an NVMe-offloaded parameter shard larger than offload_param.buffer_size);
** DSRT_ERR_IO (the NVMe swap files cannot be created or written); DSRT_ERR_DEVICE (a CUDA call
** failed); DSRT_ERR_OUT_OF_MEMORY (device or pinned memory too). */
DSRT_API dsrt_status dsrt_engine_build(dsrt_engine *engine);

/* The CUDA stream (a cudaStream_t) the host computes on; dsrt orders its work after the host's work
** on it with events. Ignored by CPU engines. Call before build.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine), DSRT_ERR_STATE (after build). */
DSRT_API dsrt_status dsrt_engine_set_stream(dsrt_engine *engine, void *cuda_stream);

/* Where this engine's working copies and gradient buffers live: type and device ordinal.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine, device_type or device_index). */
DSRT_API dsrt_status dsrt_engine_device(const dsrt_engine *engine, int32_t *device_type, int32_t *device_index);

/* The full working copy of a tensor (16-bit under fp16/bf16, else fp32), row-major, on the
** engine's device. Under ZeRO-3 this gathers the tensor (prefetching along the recorded order);
** the pointer is valid until dsrt_tensor_release. Acquires nest (counted). At other stages the
** pointer stays valid until destroy and release only ends the bracket. dtype may be NULL. The
** memory is dsrt's: a host writing through the pointer changes what forward reads until the next
** step rewrites it, and at stage 3 with offload_param "cpu" on the CPU device in fp32 (where the kept
** shards are the fp32 masters) the master itself; use dsrt_tensor_write_fp32 to set values.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL tensor or data); DSRT_ERR_STATE (before build,
** unusable engine, release without acquire); at stage 3 also DSRT_ERR_COMM (the gather failed),
** DSRT_ERR_IO (reading an NVMe-offloaded shard) and DSRT_ERR_DEVICE. */
DSRT_API dsrt_status dsrt_tensor_acquire(dsrt_tensor *tensor, void **data, dsrt_dtype *dtype);
DSRT_API dsrt_status dsrt_tensor_release(dsrt_tensor *tensor);

/* This micro-step's gradient buffer for the tensor (full shape, the working dtype), zeroed at the
** start of the micro-step. The host adds the gradient of (loss * dsrt_engine_loss_scale) into it,
** then calls dsrt_tensor_grad_ready once; after that the buffer must not be touched again in this
** micro-step. dsrt averages over ranks and over gradient_accumulation_steps micro-steps (see
** dsrt_engine_set_scale_wrt_gas). Requesting the buffer again after grad_ready, before
** dsrt_engine_step, starts a new micro-step of the same accumulation window (a second backward per
** step call); the buffer is then zeroed again. dtype may be NULL.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL tensor or grad); DSRT_ERR_STATE (before build, a
** frozen tensor, grad_ready twice in a micro-step, unusable engine); DSRT_ERR_COMM (a bucket's
** reduction failed); DSRT_ERR_DEVICE. (Stage 3 with offload_optimizer "nvme": a reduced range that
** cannot be written to or read back from its gradient swap file is not reported here but by the
** window's boundary dsrt_engine_step, on every rank.) */
DSRT_API dsrt_status dsrt_tensor_grad(dsrt_tensor *tensor, void **grad, dsrt_dtype *dtype);
DSRT_API dsrt_status dsrt_tensor_grad_ready(dsrt_tensor *tensor);

/* The factor the host multiplies its loss by before backward (1.0 without fp16).
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine or out). */
DSRT_API dsrt_status dsrt_engine_loss_scale(const dsrt_engine *engine, double *out);

typedef struct {
    uint64_t struct_size; /* caller sets sizeof(dsrt_step_result) */
    int64_t global_step;  /* optimizer steps taken so far, skipped ones included (DeepSpeed's global_steps) */
    int32_t boundary;     /* 1 if this call was an accumulation boundary (the optimizer ran or was skipped) */
    int32_t overflow;     /* 1 if the step was skipped: inf/nan gradients (fp16 overflow, bf16 nan) */
    double grad_norm;     /* global L2 norm of the unscaled, averaged gradients, before clipping */
    double lr;            /* the learning rate this step used */
    double loss_scale;    /* the loss scale in force after this step */
} dsrt_step_result;
/* An initializer that sets struct_size and zeroes the rest: dsrt_step_result r = DSRT_STEP_RESULT_INIT; */
#define DSRT_STEP_RESULT_INIT {sizeof(dsrt_step_result), 0, 0, 0, 0.0, 0.0, 0.0}

/* Called after every micro-step, like DeepSpeed's engine.step(): tensors whose gradient was not
** signalled ready count as zero; the micro-step's gradients are reduced first, unless
** dsrt_engine_end_backward already did it. At the accumulation boundary (every
** gradient_accumulation_steps-th call, or where the host says:
** dsrt_engine_set_accumulation_boundary): reduction, overflow check,
** unscale, clipping, the optimizer, the 16-bit copy, the scheduler and the loss scaler. out may
** be NULL; the library writes no more than out->struct_size bytes.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine, out->struct_size < 8); DSRT_ERR_STATE
** (before build, unusable engine); DSRT_ERR_COMM (a rank fails or disagrees; the engine is then
** unusable); DSRT_ERR_IO (NVMe-offloaded states, or at stage 3 the gradient swap files; the message
** names the file, or on the other ranks the rank whose gradient swap failed: every rank returns it
** for that boundary, none applies the step, and the window's gradients are dropped on every rank;
** the engine stays usable); DSRT_ERR_DEVICE. */
DSRT_API dsrt_status dsrt_engine_step(dsrt_engine *engine, dsrt_step_result *out);

/* The host's backward of this micro-step is complete: dsrt reduces the micro-step's gradients now
** -- what dsrt_engine_step would otherwise do first (tensors not signalled ready count as zero,
** the last buckets' collectives are issued and waited for, and at stage 3 the ranks check that
** they acquired in the same order) -- so that the following dsrt_engine_step only runs the
** boundary (as DeepSpeed's engine.backward() ends with its gradient reduction). Optional: without
** it dsrt_engine_step does the same work, and the results are the same bit for bit either way.
** Call it after the micro-step's last dsrt_tensor_grad_ready (after the host's work on the stream
** of dsrt_engine_set_stream is enqueued), before dsrt_engine_step. A second call before the next
** gradient is a no-op that returns DSRT_OK (so a host may call it whenever its backward ends). A
** dsrt_tensor_grad or dsrt_tensor_grad_ready after it begins a new micro-step of the same
** accumulation window (a second backward per step call), which the next dsrt_engine_step or
** dsrt_engine_end_backward ends. Collective: every rank calls it at the same point, as
** dsrt_engine_step. Threads: as every engine call (one thread at a time per engine).
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine); DSRT_ERR_STATE (before build, unusable
** engine, a failed NVMe step pending: call dsrt_engine_step to retry it first); DSRT_ERR_COMM (a
** rank fails or disagrees, e.g. on the stage-3 acquire order; the engine is then unusable);
** DSRT_ERR_DEVICE. Stage 3 with offload_optimizer "nvme": a gradient swap file that fails here is
** not reported here but, as for dsrt_tensor_grad_ready, by the window's boundary dsrt_engine_step
** on every rank (DSRT_ERR_IO). */
DSRT_API dsrt_status dsrt_engine_end_backward(dsrt_engine *engine);

/* Optimizer steps so far (skipped included) and the current learning rate.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine or out). */
DSRT_API dsrt_status dsrt_engine_global_step(const dsrt_engine *engine, int64_t *out);
DSRT_API dsrt_status dsrt_engine_get_lr(const dsrt_engine *engine, double *out);

/* The full fp32 master value (bf16 masters, bf16.bf16_master_weights_and_grads: widened exactly),
** gathered from all ranks (collective under ZeRO: every rank calls it for the same tensor). count
** must equal dsrt_tensor_numel.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL tensor or out, count differs); DSRT_ERR_STATE
** (before build, unusable engine); DSRT_ERR_COMM; DSRT_ERR_IO (NVMe-offloaded states);
** DSRT_ERR_DEVICE. */
DSRT_API dsrt_status dsrt_tensor_read_fp32(dsrt_tensor *tensor, float *out, uint64_t count);

/* Overwrite master and working copy (every rank passes the same full value; collective; bf16
** masters: rounded to the nearest bf16).
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL tensor or src, count differs from numel, a
** non-finite value); DSRT_ERR_STATE (before build, unusable engine); DSRT_ERR_COMM; DSRT_ERR_IO;
** DSRT_ERR_DEVICE. */
DSRT_API dsrt_status dsrt_tensor_write_fp32(dsrt_tensor *tensor, const float *src, uint64_t count);

/* Accessors. name is owned by the engine (NULL for a NULL tensor); ndim and numel give -1 for
** NULL. shape writes ndim values: DSRT_OK, or DSRT_ERR_INVALID_ARGUMENT for a NULL tensor or out. */
DSRT_API const char *dsrt_tensor_name(const dsrt_tensor *tensor);
DSRT_API int32_t dsrt_tensor_ndim(const dsrt_tensor *tensor);
DSRT_API dsrt_status dsrt_tensor_shape(const dsrt_tensor *tensor, int64_t *out);
DSRT_API int64_t dsrt_tensor_numel(const dsrt_tensor *tensor);

/* The number of registered tensors and the i-th one, in registration order (NULL if out of range). */
DSRT_API int64_t dsrt_engine_num_tensors(const dsrt_engine *engine);
DSRT_API dsrt_tensor *dsrt_engine_tensor(dsrt_engine *engine, int64_t index);

/* Bytes this rank holds for each state, by location (index with dsrt_location). */
typedef struct {
    uint64_t struct_size; /* caller sets sizeof(dsrt_memory_stats) */
    uint64_t working_params[DSRT_NUM_LOCATIONS];   /* 16-bit (or fp32) working copies */
    uint64_t gradients[DSRT_NUM_LOCATIONS];        /* gradient buffers and partitions */
    uint64_t master_params[DSRT_NUM_LOCATIONS];    /* master weights (fp32; bf16 with bf16_master_weights_and_grads) */
    uint64_t optimizer_states[DSRT_NUM_LOCATIONS]; /* e.g. Adam's m and v */
    uint64_t buffers[DSRT_NUM_LOCATIONS];          /* buckets, prefetch and swap buffers */
} dsrt_memory_stats;
/* An initializer that sets struct_size and zeroes the rest: dsrt_memory_stats m = DSRT_MEMORY_STATS_INIT; */
#define DSRT_MEMORY_STATS_INIT {sizeof(dsrt_memory_stats), {0}, {0}, {0}, {0}, {0}}
/* Fill *out (no more than out->struct_size bytes). Any time after create (zeros before build).
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine or out, out->struct_size < 8). */
DSRT_API dsrt_status dsrt_engine_memory(const dsrt_engine *engine, dsrt_memory_stats *out);

/* ------------------------------------------------------------------------------------------------
** MONITORS -- DeepSpeed's csv_monitor, and the events for any other monitor
**
** At every accumulation boundary the engine produces DeepSpeed's monitor events, with its names,
** values and steps (the step of an event is a sample count, global_steps * train_batch_size):
**   Train/Samples/train_loss  sum over the window's micro-steps of loss / gradient_accumulation_steps,
**                             from the losses the host reported (absent when it reported none),
**                             at the samples seen before the boundary
**   Train/Samples/lr          the learning rate after the boundary, at the samples seen after it
**   Train/Samples/loss_scale  (fp16 only) the loss scale after the boundary
**   with wall_clock_breakdown, milliseconds over the window: Train/Samples/elapsed_time_ms_forward
**   and _backward (when the host reported them), _backward_allreduce (dsrt's gradient
**   collectives) and _step (the boundary's dsrt_engine_step).
** With csv_monitor.enabled, rank 0 appends them to DeepSpeed's files: one per event in
** csv_monitor.output_path/job_name, named after the event with '/' as '_' (e.g.
** Train_Samples_train_loss.csv), a "step,<name>" header the first time an engine writes a file,
** then "step,value" rows. The folder is created by dsrt_engine_create (DSRT_ERR_IO if it cannot
** be); a failed write during training is logged once at warn level and training goes on.
** With a loss reported, the steps_per_print progress line ends with ", loss <train_loss>", and
** wall_clock_breakdown's line with the host's forward and backward milliseconds per step.
*/

/* The host's loss for this micro-step, as its model computed it (not multiplied by the loss
** scale nor divided by gradient_accumulation_steps). Call it once per micro-step, before
** dsrt_engine_step. nan and inf are recorded as they are. DSRT_ERR_STATE before build;
** DSRT_ERR_INVALID_ARGUMENT for a NULL engine. */
DSRT_API dsrt_status dsrt_engine_report_loss(dsrt_engine *engine, double loss);

/* Seconds the host spent in this micro-step's forward or backward, for wall_clock_breakdown's
** events. DSRT_ERR_INVALID_ARGUMENT for a NULL engine, another phase or a negative or non-finite
** duration; DSRT_ERR_STATE before build. */
#define DSRT_HOST_FORWARD 0
#define DSRT_HOST_BACKWARD 1
DSRT_API dsrt_status dsrt_engine_report_host_time(dsrt_engine *engine, int32_t phase, double seconds);

/* The events the last dsrt_engine_step produced, one "name,value,step" line each ("" when that
** call was not a boundary, or before the first step); values have the shortest digits that read
** back exactly ("nan", "inf" for those). Every rank gets its own (DeepSpeed's monitors write rank
** 0's). *out is a new string; free it with dsrt_free. DSRT_ERR_STATE before build;
** DSRT_ERR_INVALID_ARGUMENT for a NULL engine or out. */
DSRT_API dsrt_status dsrt_engine_events(const dsrt_engine *engine, char **out);

/* ------------------------------------------------------------------------------------------------
** PARAMETER GROUPS AND HOST-DRIVEN HYPERPARAMETERS -- EXPERIMENTAL
** Why: the hyperparameters are named by strings whose set grows with the optimizers being added
** (1-bit optimizers, bf16 modes), and who owns a value when the config has a scheduler (today
** DSRT_ERR_STATE for the host) may become a per-group choice. Frozen tensors and host-driven
** accumulation boundaries are settled: they follow DeepSpeed's requires_grad=False and
** set_gradient_accumulation_boundary, and checkpoints already record the frozen flag.
**
** Every tensor belongs to a parameter group (group 0 unless dsrt_tensor_set_group says otherwise).
** Each group has its own optimizer hyperparameters; group 0 and every added group start as the
** config's "optimizer" section. The optimizer steps each tensor with its own group's values, on
** every rank and at every stage, also where a tensor straddles two ranks' partitions.
**
** Hyperparameter names (each optimizer takes only those it uses; another name is
** DSRT_ERR_INVALID_ARGUMENT listing the ones it uses):
**   "lr", "weight_decay"                      every optimizer
**   "beta1", "beta2"                          Adam, AdamW, Lamb, Lion
**   "eps"                                     Adam, AdamW, Lamb, Adagrad
**   "momentum", "dampening", "nesterov" (0/1) SGD
**   "max_coeff", "min_coeff"                  Lamb (trust-ratio bounds)
**
** Who drives the schedule: without a "scheduler" section in the config the host does; the values
** it sets are used from the next accumulation boundary on. With a config scheduler, the schedule
** sets "lr" of every group (and, for OneCycle with cycle_momentum, "beta1" or SGD's "momentum"),
** as DeepSpeed's schedules set every param group; setting one of those values from the host is
** then ambiguous and returns DSRT_ERR_STATE naming the scheduler. Other values stay the host's.
**
** Threads: as every engine call (one thread at a time per engine). None of these calls is
** collective, but every rank must make the same group assignments (build checks it) and should set
** the same values, since each rank steps its own partition with them.
*/

/* Add a parameter group (before build). Its values start as the config's optimizer section.
** *out (may be NULL) receives its index: 1, 2, ... in order.
** DSRT_ERR_INVALID_ARGUMENT (NULL engine), DSRT_ERR_STATE (after build). */
DSRT_API dsrt_status dsrt_engine_add_group(dsrt_engine *engine, int32_t *out);

/* The number of groups (1 + groups added), or -1 for NULL. */
DSRT_API int32_t dsrt_engine_num_groups(const dsrt_engine *engine);

/* Put a tensor in a group (before build). DSRT_ERR_INVALID_ARGUMENT (NULL, unknown group: the
** message names the tensor and the groups that exist), DSRT_ERR_STATE (after build). */
DSRT_API dsrt_status dsrt_tensor_set_group(dsrt_tensor *tensor, int32_t group);

/* The tensor's group, or -1 for NULL. */
DSRT_API int32_t dsrt_tensor_group(const dsrt_tensor *tensor);

/* Set one hyperparameter of a group by name: before build, or between accumulation windows (after
** a boundary step and before the next window's first dsrt_tensor_grad). The value is used from the
** next boundary step on. Errors: DSRT_ERR_INVALID_ARGUMENT (NULL engine or name, unknown group,
** unknown name or one the optimizer does not use, a value out of range: negative lr, weight_decay,
** eps or momentum, betas outside [0, 1), nesterov other than 0/1, SGD nesterov without momentum or
** with dampening), DSRT_ERR_STATE (an accumulation window is open; the config's scheduler drives the
** value; a failed step is pending; or, SGD, momentum for the first time after build: no momentum
** buffer was allocated). The message names the group and the value. */
DSRT_API dsrt_status dsrt_engine_set_group_hyper(dsrt_engine *engine, int32_t group, const char *name, double value);

/* The value of a group's hyperparameter in force for the next boundary step ("lr" with a config
** scheduler: the schedule's next value; under OneCycle with cycle_momentum also "beta1", or SGD's
** "momentum", and the "beta2" it pins). DSRT_ERR_INVALID_ARGUMENT for NULL, an unknown group or name. */
DSRT_API dsrt_status dsrt_engine_get_group_hyper(const dsrt_engine *engine, int32_t group, const char *name,
                                                 double *out);

/* The learning rate a group used at the last boundary step (the optimizer ran or was skipped;
** dsrt_step_result.lr is group 0's); before this engine's first boundary (also right after a checkpoint load),
** the lr the next one will use. DSRT_ERR_INVALID_ARGUMENT for NULL or an unknown group. */
DSRT_API dsrt_status dsrt_engine_group_lr(const dsrt_engine *engine, int32_t group, double *out);

/* ------------------------------------------------------------------------------------------------
** HOST-DRIVEN ACCUMULATION BOUNDARIES
** By default dsrt counts: every gradient_accumulation_steps-th dsrt_engine_step call is a boundary,
** and the accumulated gradient is divided by gradient_accumulation_steps (DeepSpeed's behaviour).
** A host that decides the windows itself (the HF Trainer and Accelerate pattern) says, before each
** micro-step's backward, whether the next dsrt_engine_step closes the window; windows may then be
** of any length (a short last window included). A host may also call dsrt_tensor_grad again for a
** tensor already signalled ready before calling dsrt_engine_step (several backward passes per
** step call, as DeepSpeed allows): the gradients so far are reduced into the window and a new
** micro-step of the same window begins (unready tensors count as zero).
*/

/* is_boundary 1: the micro-step the next dsrt_engine_step ends closes the accumulation window;
** 0: it does not; -1: count gradient_accumulation_steps again (the default). The setting stays
** until changed, as DeepSpeed's set_gradient_accumulation_boundary. Any time after create.
** DSRT_ERR_INVALID_ARGUMENT (NULL engine, a value other than -1, 0, 1). */
DSRT_API dsrt_status dsrt_engine_set_accumulation_boundary(dsrt_engine *engine, int32_t is_boundary);

/* enabled 1 (default): the accumulated gradient is divided by gradient_accumulation_steps;
** 0: it is not, because the host already scaled its loss (DeepSpeed's scale_wrt_gas=False).
** Averaging over ranks is unaffected. DSRT_ERR_INVALID_ARGUMENT (NULL engine, a value other than 0, 1),
** DSRT_ERR_STATE (a change while an accumulation window is open: change it between windows). */
DSRT_API dsrt_status dsrt_engine_set_scale_wrt_gas(dsrt_engine *engine, int32_t enabled);

/* ------------------------------------------------------------------------------------------------
** ENGINE OPTIONS -- choices the host makes per engine, beside the config
*/
#define DSRT_DEVICE_DEFAULT (-1) /* dsrt_engine_options.device_type: DSRT_DEVICE, else automatic */

typedef struct {
    uint64_t struct_size;  /* caller sets sizeof(dsrt_engine_options) */
    int32_t device_type;   /* DSRT_DEVICE_DEFAULT (the DSRT_DEVICE environment variable, else a GPU when one
                           ** is visible and the build has CUDA, else the CPU), DSRT_DEVICE_CPU or
                           ** DSRT_DEVICE_CUDA */
    int32_t device_index;  /* DSRT_DEVICE_CUDA: the CUDA ordinal, or -1 for local rank % visible GPUs */
} dsrt_engine_options;

/* dsrt_engine_create with options (NULL: as dsrt_engine_create). The device named here wins over
** DSRT_DEVICE, so a host can keep one engine's states on the CPU on a GPU machine, or pick its GPU.
** The library reads no more than options->struct_size bytes; fields it does not see take their
** defaults. Errors: as dsrt_engine_create, and DSRT_ERR_INVALID_ARGUMENT (struct_size too small, an
** unknown device_type, device_index below -1), DSRT_ERR_UNSUPPORTED (CUDA in a build without it),
** DSRT_ERR_DEVICE (no GPU visible, or device_index out of range). *out is NULL on failure. */
DSRT_API dsrt_status dsrt_engine_create_with_options(const dsrt_config *config, dsrt_comm *comm,
                                                     const dsrt_engine_options *options, dsrt_engine **out);

/* ------------------------------------------------------------------------------------------------
** CHECKPOINTS
** A checkpoint is a directory per tag under dir: a manifest and one shard per rank, plus a file
** dir/latest naming the newest complete tag. Saving is collective and atomic: a process killed
** during a save leaves the previous checkpoint loadable. Loading at a different world size or
** ZeRO stage reshards on the fly.
*/

/* Bytes the host wants stored with the next checkpoint (like DeepSpeed's client_state); copied.
** size 0 clears it. Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine, NULL data with size > 0). */
DSRT_API dsrt_status dsrt_engine_set_client_state(dsrt_engine *engine, const void *data, uint64_t size);

/* The client state restored by the last load (or set last). *data is owned by the engine and valid
** until the next set/load/destroy; *size is 0 when there is none.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL engine, data or size). */
DSRT_API dsrt_status dsrt_engine_client_state(const dsrt_engine *engine, const void **data, uint64_t *size);

/* Save (collective). tag NULL gives "global_step<N>". DSRT_ERR_IO names the file on failure; the
** previous checkpoint is untouched. Publication is one step: on DSRT_OK the tag and dir/latest name
** the new checkpoint; on failure both are as before and no temporary file is left. The tag must be
** a plain folder name; "latest" and "latest.<anything>" are reserved (DSRT_ERR_INVALID_ARGUMENT,
** as are a NULL engine or dir). Also DSRT_ERR_STATE (before build, inside an accumulation window,
** unusable engine) and
** DSRT_ERR_COMM (a rank failed: the save is not published on any rank). */
DSRT_API dsrt_status dsrt_engine_save_checkpoint(dsrt_engine *engine, const char *dir, const char *tag);

/* Load (collective) into a built engine with the same tensors. tag NULL reads dir/latest.
** DSRT_ERR_CHECKPOINT names the file and what is wrong (every value and size read from the files is
** range-checked); on such a failure nothing has been changed. Only a failure while writing the
** verified state into the engine (DSRT_ERR_IO: a swap disk full half-way through NVMe-offloaded
** states) can leave a mix of old and new values; the engine is then unusable (every call returns
** DSRT_ERR_STATE) until a load succeeds. Also DSRT_ERR_INVALID_ARGUMENT (NULL engine or dir),
** DSRT_ERR_STATE (before build, inside an accumulation window), DSRT_ERR_COMM (a rank failed;
** every rank then fails alike). */
DSRT_API dsrt_status dsrt_engine_load_checkpoint(dsrt_engine *engine, const char *dir, const char *tag);

/* Write the gathered 16-bit working weights of every tensor as one safetensors file (collective;
** rank 0 writes). This is stage3_gather_16bit_weights_on_model_save, never silently empty.
** Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL engine or path); DSRT_ERR_STATE (before build,
** no tensors, unusable engine); DSRT_ERR_IO (the file cannot be written; the message names it); DSRT_ERR_COMM. */
DSRT_API dsrt_status dsrt_engine_save_16bit_model(dsrt_engine *engine, const char *path);

/* Offline access to a checkpoint, without an engine, at any world size. Memory stays near the
** largest tensor whatever the model size. The tensors are the trainable ones (their fp32 masters)
** in registration order, then the frozen ones (dsrt_engine_add_frozen_param; their saved values).
** open: tag NULL reads dir/latest. Returns DSRT_OK; DSRT_ERR_INVALID_ARGUMENT (NULL dir or out);
** DSRT_ERR_IO (a file cannot be read); DSRT_ERR_CHECKPOINT (missing, corrupt or inconsistent
** files, naming which). *out is NULL on failure. */
DSRT_API dsrt_status dsrt_checkpoint_open(const char *dir, const char *tag, dsrt_checkpoint **out);
DSRT_API int64_t dsrt_checkpoint_num_tensors(const dsrt_checkpoint *ckpt); /* -1 for NULL */
DSRT_API const char *dsrt_checkpoint_tensor_name(const dsrt_checkpoint *ckpt, int64_t index); /* NULL if out of range */
/* Shape of a named tensor: *ndim receives the rank; shape (may be NULL) receives up to 8 sizes.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL ckpt, name or ndim; no tensor of that name). */
DSRT_API dsrt_status dsrt_checkpoint_tensor_shape(const dsrt_checkpoint *ckpt, const char *name,
                                                  int64_t *shape, int32_t *ndim);
/* The named tensor's fp32 value; count must equal its element count. Returns DSRT_OK;
** DSRT_ERR_INVALID_ARGUMENT (NULL argument, unknown name, count differs); DSRT_ERR_IO;
** DSRT_ERR_CHECKPOINT (a shard fails its checksum or size checks). */
DSRT_API dsrt_status dsrt_checkpoint_read_tensor_fp32(dsrt_checkpoint *ckpt, const char *name, float *out,
                                                      uint64_t count);
/* Consolidate every tensor into one safetensors file of the given dtype, streaming (written to
** path.tmp, renamed when complete; removed on failure). dtype other than DSRT_F32, DSRT_F16 or
** DSRT_BF16 (any integer a C caller passes): DSRT_ERR_INVALID_ARGUMENT, as are a NULL ckpt or path.
** Also DSRT_ERR_IO (the file cannot be written) and DSRT_ERR_CHECKPOINT (a shard fails its
** checks; nothing is left at path). */
DSRT_API dsrt_status dsrt_checkpoint_export_safetensors(dsrt_checkpoint *ckpt, const char *path, dsrt_dtype dtype);
DSRT_API void dsrt_checkpoint_close(dsrt_checkpoint *ckpt);

/* ------------------------------------------------------------------------------------------------
** CONFIG CHECKS -- what `dsrt config check` and `dsrt config show` report, for any host
*/

/* DSRT_OK when dsrt_engine_create would accept this config as far as the config alone decides;
** otherwise the status and message (dsrt_last_error_message) dsrt_engine_create would return for
** it: DSRT_ERR_CONFIG (an "auto" still unresolved, inconsistent batch sizes, a setting the engine
** refuses, e.g. stage3_max_live_parameters 0 or SGD nesterov without momentum) or
** DSRT_ERR_UNSUPPORTED (an enabled feature dsrt does not implement, listed one per line).
** world_size: the world size to apply the batch rule for; 0 takes the one dsrt_config_set_world_size
** gave, else the one the three batch terms imply (1 when they do not give all three).
** What needs the running program (the tensors' sizes against the offload buffers, the device, the
** communicator) is checked later by dsrt_engine_create and dsrt_engine_build; docs/config.md
** lists those checks. The config is not changed. Threads: as every config call.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config, negative world_size), DSRT_ERR_CONFIG,
** DSRT_ERR_UNSUPPORTED, DSRT_ERR_OUT_OF_MEMORY. */
DSRT_API dsrt_status dsrt_config_check(const dsrt_config *config, int32_t world_size);

/* The enabled features dsrt does not implement, one message per line naming the key, its value and
** what to do ("" when none); while one is listed, dsrt_engine_create fails with
** DSRT_ERR_UNSUPPORTED. *out is a new string; free it with dsrt_free.
** Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config or out), DSRT_ERR_OUT_OF_MEMORY. */
DSRT_API dsrt_status dsrt_config_unsupported(const dsrt_config *config, char **out);

/* How the host resolves the value at key_path if it is "auto": the setter to call (for example
** "dsrt_config_set_hidden_size, or dsrt_config_set_number"). *out is a new string; free it with
** dsrt_free. Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (a NULL argument), DSRT_ERR_CONFIG (an
** unknown key, or one this config's optimizer/scheduler type does not have),
** DSRT_ERR_OUT_OF_MEMORY. */
DSRT_API dsrt_status dsrt_config_resolve_hint(const dsrt_config *config, const char *key_path, char **out);

/* The effective config as DeepSpeed JSON that DeepSpeed 0.19 itself accepts: every key DeepSpeed
** has, with the value in force. Keys that are dsrt's only, and the optimizer/scheduler parameters
** the config does not give (DeepSpeed hands those sections to constructors that refuse unknown
** names), are left out of *json and listed in *dsrt_only, one "path = value  (why)" per line
** ("" when none). dsrt_only may be NULL. Both are new strings; free them with dsrt_free (on
** failure both are NULL). Returns DSRT_OK, DSRT_ERR_INVALID_ARGUMENT (NULL config or json),
** DSRT_ERR_OUT_OF_MEMORY. */
DSRT_API dsrt_status dsrt_config_to_deepspeed_json(const dsrt_config *config, char **json, char **dsrt_only);

/* Destroy the engine, its tensors and its swap files. Accepts NULL. */
DSRT_API void dsrt_engine_destroy(dsrt_engine *engine);

#ifdef __cplusplus
} /* extern "C" */
#endif
#endif /* DSRT_H */
