/* test_comm_tcp_ranks.c -- ranks as processes the way torchrun starts them (RANK, WORLD_SIZE,
** MASTER_ADDR=127.0.0.1, MASTER_PORT, no MPI), through the public C header only: each of 3
** children joins with dsrt_comm_create_from_env (DSRT_COMM=tcp), meets at barriers, and trains a
** linear regression on its third of the samples with ZeRO stage 2; every rank must converge to the
** same, bit-identical weights. Then a world where one rank exits right after joining: the others'
** barrier fails with DSRT_ERR_COMM naming that rank instead of hanging. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsrt.h"

enum { kRanks = 3, kSamples = 96, kFeatures = 4, kSteps = 300 };

static int failures = 0;

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      failures++;                                                                  \
    }                                                                              \
  } while (0)

#define CHECK_OK(call)                                                                                  \
  do {                                                                                                  \
    dsrt_status status_ = (call);                                                                       \
    if (status_ != DSRT_OK) {                                                                           \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, dsrt_status_string(status_), \
              dsrt_last_error_message());                                                               \
      failures++;                                                                                       \
    }                                                                                                   \
  } while (0)

static const char *kConfig =
    "{\n"
    "  \"train_micro_batch_size_per_gpu\": 32,\n"
    "  \"gradient_accumulation_steps\": 1,\n"
    "  \"steps_per_print\": 100000,\n"
    "  \"zero_optimization\": {\"stage\": 2},\n"
    "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.05, \"weight_decay\": 0.0}}\n"
    "}\n";

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
    perror("free_port");
    exit(2);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

static double next_uniform(unsigned *state) {
  *state = *state * 1664525u + 1013904223u;
  return (double)(*state >> 8) / (double)(1u << 24) * 2.0 - 1.0;
}

static void set_rank_env(int rank, int world, int port) {
  char text[32];
  snprintf(text, sizeof text, "%d", rank);
  setenv("RANK", text, 1);
  setenv("LOCAL_RANK", text, 1);
  snprintf(text, sizeof text, "%d", world);
  setenv("WORLD_SIZE", text, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  /* the rendezvous listens on MASTER_PORT + 1, the port found free */
  snprintf(text, sizeof text, "%d", port - 1);
  setenv("MASTER_PORT", text, 1);
  setenv("DSRT_COMM", "tcp", 1);
  setenv("DSRT_COMM_TIMEOUT_S", "60", 1);
}

/* One rank's training; writes its final weights (5 floats) to out_fd. */
static int train_rank(int rank, int out_fd) {
  const double true_w[kFeatures] = {0.5, -1.25, 2.0, 0.75};
  const double true_b = -0.7;
  double x[kSamples][kFeatures], y[kSamples];
  unsigned rng = 12345u;
  for (int i = 0; i < kSamples; ++i) {
    y[i] = true_b;
    for (int j = 0; j < kFeatures; ++j) {
      x[i][j] = next_uniform(&rng);
      y[i] += true_w[j] * x[i][j];
    }
  }
  dsrt_comm *comm = NULL;
  CHECK_OK(dsrt_comm_create_from_env(&comm));
  if (comm == NULL) return 1;
  CHECK(dsrt_comm_rank(comm) == rank);
  CHECK(dsrt_comm_world_size(comm) == kRanks);
  for (int i = 0; i < 3; ++i) CHECK_OK(dsrt_comm_barrier(comm));
  dsrt_config *config = NULL;
  dsrt_engine *engine = NULL;
  dsrt_tensor *w = NULL, *b = NULL;
  CHECK_OK(dsrt_config_parse(kConfig, &config));
  CHECK_OK(dsrt_engine_create(config, comm, &engine));
  dsrt_config_destroy(config);
  dsrt_comm_destroy(comm);
  if (engine == NULL) return 1;
  const int64_t w_shape[2] = {1, kFeatures};
  const float w_init[kFeatures] = {0.1f, 0.1f, -0.1f, 0.0f};
  CHECK_OK(dsrt_engine_add_param(engine, "linear.weight", w_shape, 2, w_init, &w));
  CHECK_OK(dsrt_engine_add_param(engine, "linear.bias", NULL, 0, NULL, &b));
  CHECK_OK(dsrt_engine_build(engine));
  const int per_rank = kSamples / kRanks, first = rank * per_rank;
  for (int step = 0; step < kSteps && failures == 0; ++step) {
    void *wp = NULL, *bp = NULL, *gw = NULL, *gb = NULL;
    CHECK_OK(dsrt_tensor_acquire(w, &wp, NULL));
    CHECK_OK(dsrt_tensor_acquire(b, &bp, NULL));
    const float *wv = (const float *)wp;
    const float bv = *(const float *)bp;
    double grad_w[kFeatures] = {0}, grad_b = 0;
    for (int i = first; i < first + per_rank; ++i) {
      double pred = bv;
      for (int j = 0; j < kFeatures; ++j) pred += wv[j] * x[i][j];
      const double err = pred - y[i];
      for (int j = 0; j < kFeatures; ++j) grad_w[j] += 2.0 * err * x[i][j] / per_rank;
      grad_b += 2.0 * err / per_rank;
    }
    CHECK_OK(dsrt_tensor_release(b));
    CHECK_OK(dsrt_tensor_release(w));
    CHECK_OK(dsrt_tensor_grad(b, &gb, NULL));
    *(float *)gb += (float)grad_b;
    CHECK_OK(dsrt_tensor_grad_ready(b));
    CHECK_OK(dsrt_tensor_grad(w, &gw, NULL));
    for (int j = 0; j < kFeatures; ++j) ((float *)gw)[j] += (float)grad_w[j];
    CHECK_OK(dsrt_tensor_grad_ready(w));
    CHECK_OK(dsrt_engine_step(engine, NULL));
  }
  float final[kFeatures + 1];
  CHECK_OK(dsrt_tensor_read_fp32(w, final, kFeatures));
  CHECK_OK(dsrt_tensor_read_fp32(b, final + kFeatures, 1));
  for (int j = 0; j < kFeatures; ++j) CHECK(fabs(final[j] - true_w[j]) < 1e-2);
  CHECK(fabs(final[kFeatures] - true_b) < 1e-2);
  if (write(out_fd, final, sizeof final) != (ssize_t)sizeof final) CHECK(!"write to the parent failed");
  dsrt_engine_destroy(engine);
  return failures ? 1 : 0;
}

/* Rank 1 exits right after joining; the others' barrier must name it. */
static int dead_rank(int rank) {
  dsrt_comm *comm = NULL;
  CHECK_OK(dsrt_comm_create_from_env(&comm));
  if (comm == NULL) return 1;
  if (rank == 1) _exit(0); /* no goodbye: the kernel closes its sockets */
  CHECK(dsrt_comm_barrier(comm) == DSRT_ERR_COMM);
  const char *message = dsrt_last_error_message();
  int named_other = strstr(message, "rank 1 closed its connection") == NULL;
  /* A survivor that starts its barrier after the other survivor has already failed and exited may
  ** see that one's sockets close first; the first survivor to fail always names rank 1. */
  if (named_other && strstr(message, "closed its connection") == NULL) CHECK(!"unexpected message");
  if (failures) fprintf(stderr, "rank %d: %s\n", rank, message);
  sleep(1); /* stay connected a while, so the other survivor sees rank 1 leave first */
  dsrt_comm_destroy(comm);
  return failures ? 1 : named_other ? 3 : 0;
}

/* Forks kRanks children running body; returns how many failed. */
static int run_world(int training, float weights[kRanks][kFeatures + 1]) {
  const int port = free_port();
  int pipes[kRanks][2];
  pid_t pids[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    if (pipe(pipes[r]) != 0) {
      perror("pipe");
      exit(2);
    }
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      exit(2);
    }
    if (pids[r] == 0) {
      close(pipes[r][0]);
      set_rank_env(r, kRanks, port);
      alarm(120); /* a hang becomes a failure */
      _exit(training ? train_rank(r, pipes[r][1]) : dead_rank(r));
    }
    close(pipes[r][1]);
  }
  int failed = 0, named_rank_1 = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (training && read(pipes[r][0], weights[r], sizeof weights[r]) != (ssize_t)sizeof weights[r]) ++failed;
    close(pipes[r][0]);
    int status = 0;
    if (waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) && WEXITSTATUS(status) == 0 && r != 1)
      ++named_rank_1;
    if (!training && WIFEXITED(status) && WEXITSTATUS(status) == 3) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed (status 0x%x)\n", r, status);
      ++failed;
    }
  }
  if (!training && named_rank_1 == 0) {
    fprintf(stderr, "no survivor named rank 1 as the rank that left\n");
    ++failed;
  }
  return failed;
}

int main(void) {
  float weights[kRanks][kFeatures + 1];
  memset(weights, 0, sizeof weights);
  CHECK(run_world(1, weights) == 0);
  for (int r = 1; r < kRanks; ++r) CHECK(memcmp(weights[0], weights[r], sizeof weights[0]) == 0);
  CHECK(run_world(0, weights) == 0);
  if (failures) {
    fprintf(stderr, "test_comm_tcp_ranks: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_comm_tcp_ranks: ok (w0 = %.4f)\n", weights[0][0]);
  return 0;
}
