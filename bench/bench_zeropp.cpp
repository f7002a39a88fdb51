// bench_zeropp -- ZeRO++ and friends against plain ZeRO-3 on the same model, ranks and gradients
// (run under mpirun; bench/run_zeropp.sh). For each variant of a table: bytes this rank put on the
// wire per training step (the communicators' traffic counters, comm.h: the world's and the
// variant's own groups'), the share of them that crosses nodes, and the step time; printed with
// their ratios against the ZeRO-3 row, also for the parameter-gather bytes alone (gather x) and
// the gradient-reduction bytes alone (grad x). Nodes: DSRT_RANKS_PER_NODE (or host names).
//
// A row is a name and a change to the stage-3 config; add a variant by adding a row to kVariants.
//   bench_zeropp [PARAMS_MILLIONS] [STEPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/topology.h"
#include "engine/engine.h"
#include "util/half.h"

namespace {

using namespace dsrt;

struct Variant {
  const char *name;
  // Changes the plain ZeRO-3 config; ranks_per_node is the node size found for this run.
  std::function<void(TrainConfig &, int ranks_per_node)> apply;
};

const std::vector<Variant> kVariants = {
    {"ZeRO-3", [](TrainConfig &, int) {}},
    {"hpZ", [](TrainConfig &c, int ranks_per_node) { c.zero.zero_hpz_partition_size = ranks_per_node; }},
    // MiCS with a shard group per node (at one node: plain ZeRO-3).
    {"MiCS", [](TrainConfig &c, int ranks_per_node) { c.zero.mics_shard_size = ranks_per_node; }},
    {"qwZ", [](TrainConfig &c, int) { c.zero.zero_quantized_weights = true; }},
    {"qgZ", [](TrainConfig &c, int) { c.zero.zero_quantized_gradients = true; }},
    {"qwZ+qgZ",
     [](TrainConfig &c, int) {
       c.zero.zero_quantized_weights = true;
       c.zero.zero_quantized_gradients = true;
     }},
};

[[noreturn]] void fail(const char *what, const Status &status) {
  std::fprintf(stderr, "bench_zeropp: %s: %s\n", what, status.message().c_str());
  std::exit(1);
}

TrainConfig base_config(int world) {
  TrainConfig c;
  c.optimizer.present = true;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 1e-4;
  c.steps_per_print = 0;
  c.bf16_enabled = true;
  c.zero.stage = 3;
  c.zero.stage3_param_persistence_threshold = 0;
  c.zero.reduce_bucket_size = 4000000;
  c.zero.stage3_prefetch_bucket_size = 4000000;
  // A model far larger than memory allows to keep gathered: every use is a gather (no reuse).
  c.zero.stage3_max_reuse_distance = 0;
  c.zero.stage3_max_live_parameters = 4000000;
  c.world_size = world;
  c.train_batch_size = world;
  return c;
}

// Bytes of a communicator's traffic, and the part that crossed nodes: in a pairwise collective a
// rank sends to every peer alike, so the cross-node share is the share of peers on other nodes.
struct Bytes {
  double total = 0, cross = 0;
};
Bytes bytes_of(const Comm *comm, const CommTraffic &before, bool inside_node, int ranks_per_node) {
  Bytes b;
  if (comm == nullptr) return b;
  b.total = static_cast<double>(comm->traffic().total() - before.total());
  const int n = comm->size();
  if (!inside_node && n > 1) b.cross = b.total * static_cast<double>(n - std::min(n, ranks_per_node)) / (n - 1);
  return b;
}

struct Row {
  Bytes world, group;
  double seconds = 0;
  // Per step, all communicators: parameter gathers, and gradient reduction (reduce-scatter,
  // all-reduce and the all-to-alls of qgZ).
  double gather = 0, gradient = 0;
};

// The sub-communicators a variant adds (hpZ's group, qgZ's groups, MiCS's shard and replica
// groups), whether each stays inside a node (groups of consecutive ranks) and whether, a MiCS
// replica group of shard groups that fill whole nodes, every peer is on another node.
struct Group {
  const Comm *comm;
  bool inside_node;
  bool all_cross = false;
};
std::vector<Group> groups_of(const Engine &e, int ranks_per_node) {
  std::vector<Group> g;
  if (e.hpz_group()) g.push_back({e.hpz_group(), ranks_per_node % e.hpz_group()->size() == 0});
  if (e.grad_reducer().qgz_intra()) g.push_back({e.grad_reducer().qgz_intra(), true});
  if (e.grad_reducer().qgz_inter()) g.push_back({e.grad_reducer().qgz_inter(), false});
  if (&e.partition_comm() != &e.comm())
    g.push_back({&e.partition_comm(), ranks_per_node % e.part_size() == 0});
  if (e.replica_group()) g.push_back({e.replica_group(), false, e.part_size() % ranks_per_node == 0});
  return g;
}

void micro_step(Engine &e, const std::vector<std::vector<float>> &grads) {
  for (size_t t = 0; t < e.num_tensors(); ++t) {
    void *data = nullptr;
    Status s = e.acquire(t, &data, nullptr);
    if (s.ok()) s = e.release(t);
    if (!s.ok()) fail("forward", s);
  }
  for (size_t t = e.num_tensors(); t-- > 0;) {
    void *data = nullptr;
    Status s = e.acquire(t, &data, nullptr);
    void *buffer = nullptr;
    dsrt_dtype dtype = DSRT_F32;
    if (s.ok()) s = e.grad(t, &buffer, &dtype);
    if (s.ok()) {  // written through the device (a copy on the CPU device)
      std::vector<uint8_t> host(grads[t].size() * dtype_size(dtype));
      for (size_t i = 0; i < grads[t].size(); ++i) from_float(host.data(), dtype, i, grads[t][i]);
      Device &device = const_cast<Device &>(e.device());
      s = device.copy(buffer, host.data(), host.size(), nullptr);
      if (s.ok()) s = device.synchronize(nullptr);
    }
    if (s.ok()) s = e.grad_ready(t);
    if (s.ok()) s = e.release(t);
    if (!s.ok()) fail("backward", s);
  }
  dsrt_step_result result = DSRT_STEP_RESULT_INIT;
  Status s = e.step(&result);
  if (!s.ok()) fail("step", s);
}

Row run(Comm &world, const Variant &v, const NodeLayout &nodes, const std::vector<int64_t> &sizes, int steps) {
  std::shared_ptr<Comm> comm;  // fresh counters
  Status s = world.split(0, world.rank(), &comm);
  if (!s.ok()) fail("split", s);
  TrainConfig config = base_config(world.size());
  v.apply(config, nodes.ranks_per_node);
  std::unique_ptr<Engine> engine;
  s = Engine::create(config, comm, &engine);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<std::vector<float>> grads;
  for (size_t t = 0; s.ok() && t < sizes.size(); ++t) {
    std::vector<float> init(static_cast<size_t>(sizes[t]));
    for (float &x : init) x = dist(rng);
    grads.push_back(init);
    // Matrices as [rows, 512] (qgZ, like DeepSpeed, sends 1-D tensors unquantized); vectors 1-D.
    const int64_t shape[2] = {sizes[t] / 512, 512};
    s = sizes[t] % 512 == 0 && sizes[t] > 1024
            ? engine->add_param("layer" + std::to_string(t), shape, 2, init.data(), nullptr)
            : engine->add_param("layer" + std::to_string(t), &sizes[t], 1, init.data(), nullptr);
  }
  if (s.ok()) s = engine->build();
  if (!s.ok()) fail(v.name, s);
  micro_step(*engine, grads);  // warm-up: trace, buffers
  const CommTraffic world_before = comm->traffic();
  const std::vector<Group> groups = groups_of(*engine, nodes.ranks_per_node);
  std::vector<CommTraffic> group_before;
  for (const Group &g : groups) group_before.push_back(g.comm->traffic());
  Row row;
  row.seconds = 1e30;
  for (int i = 0; i < steps; ++i) {
    if (!comm->barrier().ok()) fail("barrier", Status::Ok());
    const auto start = std::chrono::steady_clock::now();
    micro_step(*engine, grads);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!comm->all_reduce_f64(&seconds, 1, ReduceOp::Max).ok()) fail("timing", Status::Ok());
    row.seconds = std::min(row.seconds, seconds);
  }
  row.world = bytes_of(comm.get(), world_before, false, nodes.ranks_per_node);
  auto kinds = [&](const CommTraffic &now, const CommTraffic &before) {
    row.gather += static_cast<double>(now.all_gather - before.all_gather);
    row.gradient += static_cast<double>((now.reduce_scatter - before.reduce_scatter) +
                                        (now.all_reduce - before.all_reduce) + (now.all_to_all - before.all_to_all));
  };
  kinds(comm->traffic(), world_before);
  for (size_t i = 0; i < groups.size(); ++i) {
    const Bytes b = bytes_of(groups[i].comm, group_before[i], groups[i].inside_node, nodes.ranks_per_node);
    row.group.total += b.total;
    row.group.cross += groups[i].all_cross ? b.total : b.cross;
    kinds(groups[i].comm->traffic(), group_before[i]);
  }
  // The counters include the timing all-reduces and barriers (8 bytes each): negligible here.
  row.world.total /= steps, row.world.cross /= steps, row.group.total /= steps, row.group.cross /= steps;
  row.gather /= steps, row.gradient /= steps;
  return row;
}

}  // namespace

int main(int argc, char **argv) {
  std::shared_ptr<Comm> world;
  Status status = comm_create_from_env(&world);
  if (!status.ok()) fail("joining the world", status);
  const double millions = argc > 1 ? std::atof(argv[1]) : 4.0;
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  NodeLayout nodes;
  status = comm_node_layout(*world, &nodes);
  if (!status.ok()) fail("node layout", status);
  // Transformer-like tensors: a few large matrices and small vectors.
  std::vector<int64_t> sizes;
  const int64_t matrix = static_cast<int64_t>(millions * 1e6 / 8) / 512 * 512;
  for (int layer = 0; layer < 8; ++layer) {
    sizes.push_back(matrix);
    sizes.push_back(1024);
  }
  std::vector<Row> rows;
  for (const Variant &v : kVariants) rows.push_back(run(*world, v, nodes, sizes, steps));
  if (world->rank() == 0) {
    std::printf("# %d ranks, %d per node (%d nodes); %.1fM parameters in %zu tensors, bf16, stage 3; best of %d steps\n"
                "# bytes: what rank 0 put on the wire per step (world + the variant's groups), MB; cross: the part\n"
                "# sent to other nodes; ratios against %s\n",
                world->size(), nodes.ranks_per_node, nodes.nodes, millions, sizes.size(), steps, kVariants[0].name);
    std::printf("%-10s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n", "variant", "bytes MB", "world MB", "group MB",
                "cross MB", "step ms", "bytes x", "cross x", "time x", "gather x", "grad x");
    const Row &base = rows[0];
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      const double bytes = r.world.total + r.group.total, cross = r.world.cross + r.group.cross;
      const double base_bytes = base.world.total + base.group.total, base_cross = base.world.cross + base.group.cross;
      std::printf("%-10s %10.3f %10.3f %10.3f %10.3f %9.2f %9.3f %9s %9.3f %9.3f %9.3f\n", kVariants[i].name,
                  bytes / 1e6, r.world.total / 1e6, r.group.total / 1e6, cross / 1e6, r.seconds * 1e3, bytes / base_bytes,
                  base_cross > 0 ? std::to_string(cross / base_cross).substr(0, 5).c_str() : "-",
                  r.seconds / base.seconds, r.gather / base.gather, r.gradient / base.gradient);
    }
  }
  world.reset();
  return 0;
}
