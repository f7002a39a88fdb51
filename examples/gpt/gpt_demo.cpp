// gpt_demo.cpp -- trains a small character-level GPT with dsrt owning every model state.
//
// The program computes forward and backward itself (gpt_model.h, fp32 on the CPU with OpenBLAS)
// and talks to dsrt through include/dsrt.h only: it registers its parameters, reads the working
// copies before each micro-step, writes gradients into dsrt's buffers, and calls
// dsrt_engine_step; dsrt applies the DeepSpeed config (optimizer, scheduler, mixed precision,
// clipping, ZeRO partitioning, checkpoints). Each rank trains on its own shard of the corpus.
#include <dsrt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dtype_convert.h"
#include "engine_bridge.h"
#include "gpt_model.h"
#include "text_data.h"
#include "train_options.h"

#ifndef DSRT_GPT_DEFAULT_CONFIG
#define DSRT_GPT_DEFAULT_CONFIG "examples/gpt/ds_config.json"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct CommDeleter {
    void operator()(dsrt_comm *c) const { dsrt_comm_destroy(c); }
};
struct ConfigDeleter {
    void operator()(dsrt_config *c) const { dsrt_config_destroy(c); }
};
struct EngineDeleter {
    void operator()(dsrt_engine *e) const { dsrt_engine_destroy(e); }
};
struct FreeDeleter {
    void operator()(char *p) const { dsrt_free(p); }
};
using CommPtr = std::unique_ptr<dsrt_comm, CommDeleter>;
using ConfigPtr = std::unique_ptr<dsrt_config, ConfigDeleter>;
using EnginePtr = std::unique_ptr<dsrt_engine, EngineDeleter>;
using DsrtString = std::unique_ptr<char, FreeDeleter>;

int g_rank = 0;

// Progress goes to stdout from rank 0; failures go to stderr from every rank, tagged.
#define SAY(...)                                                                                   \
    do {                                                                                           \
        if (g_rank == 0) {                                                                         \
            std::printf(__VA_ARGS__);                                                              \
            std::fflush(stdout);                                                                   \
        }                                                                                          \
    } while (0)

int fail(const std::string &what) {
    std::fprintf(stderr, "dsrt_gpt_demo [rank %d]: %s\n", g_rank, what.c_str());
    return 1;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string human_bytes(uint64_t bytes) {
    char buf[32];
    if (bytes >= (UINT64_C(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= (UINT64_C(1) << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
    else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
    else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
}

// Values a DeepSpeed config may leave "auto" for the training script to fill, as the Hugging
// Face Trainer fills them from its own arguments.
std::string resolve_autos(dsrt_config *config, const gpt::TrainOptions &o) {
    char *raw = nullptr;
    dsrt_status st = dsrt_config_unresolved(config, &raw);
    if (st != DSRT_OK) return gpt::dsrt_error("dsrt_config_unresolved", st);
    const std::string unresolved = raw ? raw : "";
    dsrt_free(raw);
    const struct {
        const char *key;
        double value;
    } defaults[] = {
        {"train_micro_batch_size_per_gpu", 16},     {"gradient_accumulation_steps", 1},
        {"gradient_clipping", 1.0},                 {"optimizer.params.lr", 1e-3},
        {"optimizer.params.weight_decay", 0.01},    {"scheduler.params.warmup_min_lr", 0},
        {"scheduler.params.warmup_max_lr", 1e-3},   {"scheduler.params.warmup_num_steps", 50},
        {"scheduler.params.total_num_steps", static_cast<double>(o.steps)},
    };
    size_t start = 0;
    while (start < unresolved.size()) {
        size_t end = unresolved.find('\n', start);
        if (end == std::string::npos) end = unresolved.size();
        const std::string key = unresolved.substr(start, end - start);
        start = end + 1;
        for (const auto &d : defaults)
            if (key == d.key) {
                st = dsrt_config_set_number(config, d.key, d.value);
                if (st != DSRT_OK) return gpt::dsrt_error(("resolving " + key).c_str(), st);
            }
    }
    // The hidden-size rule resolves bucket sizes left "auto"; train_batch_size follows the world.
    st = dsrt_config_set_hidden_size(config, o.model.d_model);
    if (st != DSRT_OK) return gpt::dsrt_error("dsrt_config_set_hidden_size", st);
    return "";
}

double config_number(const dsrt_config *config, const char *key, double fallback) {
    double v = 0;
    return dsrt_config_get_number(config, key, &v) == DSRT_OK ? v : fallback;
}

void print_memory(dsrt_engine *engine, int64_t num_params, const dsrt_config *config, int world) {
    dsrt_memory_stats m;
    std::memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    const dsrt_status st = dsrt_engine_memory(engine, &m);
    if (st != DSRT_OK) {
        SAY("memory: %s\n", gpt::dsrt_error("dsrt_engine_memory", st).c_str());
        return;
    }
    const struct {
        const char *name;
        const uint64_t *bytes;
    } rows[] = {{"working params", m.working_params}, {"gradients", m.gradients},
                {"master params", m.master_params},   {"optimizer states", m.optimizer_states},
                {"buffers", m.buffers}};
    SAY("memory held by rank 0, per state (device | host | nvme):\n");
    uint64_t total = 0;
    for (const auto &r : rows) {
        SAY("  %-17s %10s | %10s | %10s\n", r.name, human_bytes(r.bytes[DSRT_LOC_DEVICE]).c_str(),
            human_bytes(r.bytes[DSRT_LOC_HOST]).c_str(), human_bytes(r.bytes[DSRT_LOC_NVME]).c_str());
        for (int l = 0; l < DSRT_NUM_LOCATIONS; ++l) total += r.bytes[l];
    }
    // The ZeRO paper's per-rank model for mixed-precision Adam (K = 12), for comparison.
    const bool mixed = config_number(config, "bf16.enabled", 0) != 0 || config_number(config, "fp16.enabled", 0) != 0;
    const int stage = static_cast<int>(config_number(config, "zero_optimization.stage", 0));
    const double psi = static_cast<double>(num_params), w = world;
    double model = 0;
    switch (stage) {
    case 0: model = 16 * psi; break;
    case 1: model = 4 * psi + 12 * psi / w; break;
    case 2: model = 2 * psi + 14 * psi / w; break;
    default: model = 16 * psi / w; break;
    }
    SAY("  %-17s %s in all, for %lld parameters on %d rank(s)", "total", human_bytes(total).c_str(),
        static_cast<long long>(num_params), world);
    if (mixed)
        SAY("; the ZeRO-%d model of mixed-precision Adam (2+2+12 bytes a parameter) predicts %s", stage,
            human_bytes(static_cast<uint64_t>(model)).c_str());
    SAY("\n");
}

// Mean held-out loss over fixed validation windows (the same on every rank).
double evaluate(gpt::Model<float> &model, gpt::TokenRange val, int seq, int batch, int num_batches) {
    std::vector<int32_t> x(static_cast<size_t>(batch) * seq), y(x.size());
    double sum = 0;
    for (int k = 0; k < num_batches; ++k) {
        gpt::validation_batch(val, seq, batch, k, num_batches, x.data(), y.data());
        sum += model.forward(x.data(), y.data(), batch, seq);
    }
    return sum / num_batches;
}

std::string generate(gpt::Model<float> &model, const gpt::CharCorpus &corpus, const std::string &prompt, int n,
                     uint64_t seed) {
    std::vector<int32_t> ids;
    for (char ch : prompt) {
        const size_t pos = corpus.vocab().find(ch);
        if (pos != std::string::npos) ids.push_back(static_cast<int32_t>(pos));
    }
    if (ids.empty()) ids.push_back(0);
    std::mt19937_64 rng(seed);
    const int V = corpus.vocab_size(), ctx = model.config().context;
    std::vector<double> p(static_cast<size_t>(V));
    for (int i = 0; i < n; ++i) {
        const int len = std::min<int>(static_cast<int>(ids.size()), ctx);
        model.forward(ids.data() + ids.size() - len, nullptr, 1, len);
        const float *z = model.logits() + static_cast<size_t>(len - 1) * V;
        const float temperature = 0.8f;
        const float max_z = *std::max_element(z, z + V);
        for (int v = 0; v < V; ++v) p[static_cast<size_t>(v)] = std::exp((z[v] - max_z) / temperature);
        std::discrete_distribution<int32_t> pick(p.begin(), p.end());
        ids.push_back(pick(rng));
    }
    return corpus.decode(ids.data(), ids.size());
}

// What a checkpoint carries besides the model states: where this rank's data stream stands.
struct ClientState {
    char magic[8] = {'d', 's', 'r', 't', 'g', 'p', 't', '1'};
    uint64_t sampler_position = 0;
    uint64_t seed = 0;
};

// Saves a checkpoint; false when this build cannot (the caller stops trying), exits on real errors.
bool save_checkpoint(dsrt_engine *engine, const std::string &dir, const gpt::BatchSampler &sampler,
                     uint64_t seed, bool *fatal) {
    ClientState cs;
    cs.sampler_position = sampler.position();
    cs.seed = seed;
    dsrt_status st = dsrt_engine_set_client_state(engine, &cs, sizeof cs);
    if (st == DSRT_OK) st = dsrt_engine_save_checkpoint(engine, dir.c_str(), nullptr);
    if (st == DSRT_ERR_UNSUPPORTED) {
        SAY("checkpoint: not saved: %s; training goes on without checkpoints\n",
            gpt::dsrt_error("dsrt_engine_save_checkpoint", st).c_str());
        return false;
    }
    if (st != DSRT_OK) {
        *fatal = true;
        fail(gpt::dsrt_error(("saving a checkpoint to " + dir).c_str(), st));
        return false;
    }
    int64_t step = 0;
    dsrt_engine_global_step(engine, &step);
    SAY("checkpoint: saved step %lld to %s\n", static_cast<long long>(step), dir.c_str());
    return true;
}

int run(const gpt::TrainOptions &o) {
    // --- The world and the data ------------------------------------------------------------------
    dsrt_comm *comm_raw = nullptr;
    dsrt_status st = o.comm == "env" ? dsrt_comm_create_from_env(&comm_raw) : dsrt_comm_create_local(&comm_raw);
    if (st != DSRT_OK) return fail(gpt::dsrt_error(o.comm == "env" ? "dsrt_comm_create_from_env" : "dsrt_comm_create_local", st));
    CommPtr comm(comm_raw);
    g_rank = dsrt_comm_rank(comm.get());
    const int world = dsrt_comm_world_size(comm.get());

    gpt::CharCorpus corpus;
    std::string err = corpus.load(o.data_path);
    if (!err.empty()) return fail(err);
    gpt::ModelConfig mc = o.model;
    mc.vocab_size = corpus.vocab_size();
    const int seq = mc.context;
    const gpt::CorpusSplit split = gpt::split_corpus(corpus, o.val_fraction);
    const gpt::TokenRange shard = gpt::train_shard(split, g_rank, world);
    const gpt::TokenRange val = gpt::validation_range(split);
    if (shard.size < static_cast<size_t>(seq) + 2 || val.size < static_cast<size_t>(seq) + 2)
        return fail("corpus " + o.data_path + " is too small for " + std::to_string(world) +
                    " rank(s) at context " + std::to_string(seq));
    const double uniform_loss = std::log(static_cast<double>(mc.vocab_size));

    // --- The config ------------------------------------------------------------------------------
    dsrt_config *config_raw = nullptr;
    st = dsrt_config_load(o.config_path.c_str(), &config_raw);
    if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_config_load", st));
    ConfigPtr config(config_raw);
    err = resolve_autos(config.get(), o);
    if (!err.empty()) return fail(err);
    st = dsrt_config_set_world_size(config.get(), world);
    if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_config_set_world_size", st));
    const int micro_batch = static_cast<int>(config_number(config.get(), "train_micro_batch_size_per_gpu", 1));
    const int accumulation = static_cast<int>(config_number(config.get(), "gradient_accumulation_steps", 1));
    const int64_t steps_per_print =
        std::max<int64_t>(1, static_cast<int64_t>(config_number(config.get(), "steps_per_print", 10)));

    SAY("dsrt %s | GPT demo | %d rank(s) | comm %s\n", dsrt_version_string(), world, o.comm.c_str());
    SAY("corpus: %s: %zu file(s), %zu characters, vocabulary %d; per rank %zu training characters, %zu held out\n",
        o.data_path.c_str(), corpus.num_files(), corpus.size(), mc.vocab_size, shard.size, val.size);
    SAY("uniform-guess loss ln(%d) = %.4f\n", mc.vocab_size, uniform_loss);
    char *json = nullptr;
    st = dsrt_config_to_json(config.get(), &json);
    if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_config_to_json", st));
    SAY("effective config (%s):\n%s\n", o.config_path.c_str(), json);
    dsrt_free(json);

    // --- The engine and the model ----------------------------------------------------------------
    // This model's forward and backward run on the host (OpenBLAS), so dsrt's working copies and
    // gradient buffers must be host memory even where a GPU is visible.
    setenv("DSRT_DEVICE", "cpu", 1);
    dsrt_engine *engine_raw = nullptr;
    st = dsrt_engine_create(config.get(), comm.get(), &engine_raw);
    if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_engine_create", st));
    EnginePtr engine(engine_raw);
    gpt::Model<float> model(mc);
    gpt::EngineBridge bridge;
    err = bridge.register_params(engine.get(), model.tensors(), gpt::gpt2_init(mc, o.seed));
    if (!err.empty()) return fail(err);
    st = dsrt_engine_build(engine.get());
    if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_engine_build", st));
    SAY("model: GPT, %d layers, d_model %d, %d heads, context %d: %zu parameters in %zu tensors\n", mc.n_layer,
        mc.d_model, mc.n_head, mc.context, model.num_params(), model.tensors().size());

    gpt::BatchSampler sampler(shard, seq, o.seed, g_rank);
    if (!o.load_dir.empty()) {
        st = dsrt_engine_load_checkpoint(engine.get(), o.load_dir.c_str(), nullptr);
        if (st == DSRT_ERR_UNSUPPORTED) {
            SAY("checkpoint: not loaded: %s; starting from the initialization\n",
                gpt::dsrt_error("dsrt_engine_load_checkpoint", st).c_str());
        } else if (st != DSRT_OK) {
            return fail(gpt::dsrt_error(("loading a checkpoint from " + o.load_dir).c_str(), st));
        } else {
            const void *data = nullptr;
            uint64_t size = 0;
            ClientState cs;
            if (dsrt_engine_client_state(engine.get(), &data, &size) == DSRT_OK && size == sizeof cs &&
                std::memcmp(data, cs.magic, sizeof cs.magic) == 0) {
                std::memcpy(&cs, data, sizeof cs);
                sampler.set_position(cs.sampler_position);
            }
            int64_t step = 0;
            dsrt_engine_global_step(engine.get(), &step);
            SAY("checkpoint: resumed from %s at step %lld\n", o.load_dir.c_str(), static_cast<long long>(step));
        }
    }
    print_memory(engine.get(), static_cast<int64_t>(model.num_params()), config.get(), world);

    // --- Training ------------------------------------------------------------------------------
    SAY("training: %lld steps of %d x %d sequences x %d characters per rank (%lld tokens per step in all)\n",
        static_cast<long long>(o.steps), accumulation, micro_batch, seq,
        static_cast<long long>(accumulation) * micro_batch * seq * world);
    std::vector<int32_t> x(static_cast<size_t>(micro_batch) * seq), y(x.size());
    int64_t global_step = 0;
    dsrt_engine_global_step(engine.get(), &global_step);
    const int64_t first_step = global_step;
    double window_loss = 0, last_train_loss = NAN;
    int window_micro = 0;
    int64_t window_tokens = 0, total_tokens = 0;
    double model_seconds = 0, dsrt_seconds = 0;
    bool saving = !o.save_dir.empty();
    const Clock::time_point start = Clock::now();
    Clock::time_point window_start = start;
    double last_val = NAN;
    while (global_step < o.steps) {
        dsrt_step_result result;
        std::memset(&result, 0, sizeof result);
        result.struct_size = sizeof result;
        for (int micro = 0; micro < accumulation; ++micro) {
            Clock::time_point t = Clock::now();
            err = bridge.load_weights(model.params());
            if (!err.empty()) return fail(err);
            double loss_scale = 1.0;
            st = dsrt_engine_loss_scale(engine.get(), &loss_scale);
            if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_engine_loss_scale", st));
            dsrt_seconds += seconds_since(t);

            t = Clock::now();
            sampler.next(micro_batch, x.data(), y.data());
            const float loss = model.forward(x.data(), y.data(), micro_batch, seq);
            model.backward(static_cast<float>(loss_scale));
            model_seconds += seconds_since(t);

            t = Clock::now();
            err = bridge.store_gradients(model.grads());
            if (!err.empty()) return fail(err);
            st = dsrt_engine_step(engine.get(), &result);
            if (st != DSRT_OK) return fail(gpt::dsrt_error("dsrt_engine_step", st));
            dsrt_seconds += seconds_since(t);

            window_loss += loss;
            ++window_micro;
            window_tokens += static_cast<int64_t>(micro_batch) * seq;
        }
        if (!result.boundary) return fail("dsrt_engine_step: the last micro-step was not an accumulation boundary");
        global_step = result.global_step;
        if (result.overflow)
            SAY("step %lld skipped: non-finite gradients; loss scale now %g\n", static_cast<long long>(global_step),
                result.loss_scale);

        if (global_step % steps_per_print == 0 || global_step == o.steps) {
            const double elapsed = seconds_since(window_start);
            last_train_loss = window_loss / window_micro;
            SAY("step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tokens/s (%d rank(s)) | %.0f ms/step\n",
                static_cast<long long>(global_step), static_cast<long long>(o.steps), last_train_loss, result.lr,
                result.grad_norm, window_tokens * world / elapsed, world,
                1000.0 * elapsed * accumulation * micro_batch * seq / std::max<int64_t>(1, window_tokens));
            total_tokens += window_tokens;
            window_loss = 0;
            window_micro = 0;
            window_tokens = 0;
            window_start = Clock::now();
        }
        if (o.eval_every > 0 && global_step % o.eval_every == 0 && global_step < o.steps) {
            const Clock::time_point t = Clock::now();
            err = bridge.load_weights(model.params());
            if (!err.empty()) return fail(err);
            last_val = evaluate(model, val, seq, micro_batch, o.eval_batches);
            SAY("step %5lld | held-out loss %.4f (%.2f x ln V)\n", static_cast<long long>(global_step), last_val,
                last_val / uniform_loss);
            window_start += std::chrono::duration_cast<Clock::duration>(Clock::now() - t);  // not training time
        }
        if (saving && o.save_every > 0 && global_step % o.save_every == 0) {
            const Clock::time_point t = Clock::now();
            bool fatal = false;
            saving = save_checkpoint(engine.get(), o.save_dir, sampler, o.seed, &fatal);
            if (fatal) return 1;
            window_start += std::chrono::duration_cast<Clock::duration>(Clock::now() - t);
        }
    }
    total_tokens += window_tokens;
    const double train_seconds = seconds_since(start);

    // --- Results ---------------------------------------------------------------------------------
    err = bridge.load_weights(model.params());
    if (!err.empty()) return fail(err);
    last_val = evaluate(model, val, seq, micro_batch, o.eval_batches);
    SAY("done: %lld steps in %.1f s | %.0f tokens/s (%d rank(s)) | model math %.0f%%, dsrt %.0f%% of the time\n",
        static_cast<long long>(global_step - first_step), train_seconds,
        static_cast<double>(total_tokens) * world / std::max(train_seconds, 1e-9), world,
        100.0 * model_seconds / std::max(train_seconds, 1e-9), 100.0 * dsrt_seconds / std::max(train_seconds, 1e-9));
    SAY("final: training loss %.4f | held-out loss %.4f = %.2f x ln V (uniform guess %.4f)\n", last_train_loss,
        last_val, last_val / uniform_loss, uniform_loss);
    SAY("precision: working copies %s, gradient buffers %s, model math fp32\n",
        gpt::dtype_name(bridge.working_dtype()), gpt::dtype_name(bridge.gradient_dtype()));
    uint64_t digest = 0;
    err = bridge.master_digest(&digest);
    if (!err.empty()) return fail(err);
    SAY("fp32 master weights at step %lld: digest %016llx\n", static_cast<long long>(global_step),
        static_cast<unsigned long long>(digest));
    print_memory(engine.get(), static_cast<int64_t>(model.num_params()), config.get(), world);
    if (o.sample_chars > 0 && g_rank == 0)
        SAY("sample (temperature 0.8):\n----\n%s\n----\n",
            generate(model, corpus, "The ", o.sample_chars, o.seed).c_str());
    if (saving && (o.save_every == 0 || global_step % o.save_every != 0)) {
        bool fatal = false;
        save_checkpoint(engine.get(), o.save_dir, sampler, o.seed, &fatal);
        if (fatal) return 1;
    }
    if (o.require_val_loss_ratio > 0) {
        if (!(last_val < o.require_val_loss_ratio * uniform_loss)) {
            fail("held-out loss " + std::to_string(last_val) + " is not below " +
                 std::to_string(o.require_val_loss_ratio) + " x ln V = " +
                 std::to_string(o.require_val_loss_ratio * uniform_loss));
            return 3;
        }
        SAY("check passed: held-out loss %.4f < %.2f x ln V = %.4f\n", last_val, o.require_val_loss_ratio,
            o.require_val_loss_ratio * uniform_loss);
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    gpt::TrainOptions options;
    options.config_path = DSRT_GPT_DEFAULT_CONFIG;
    const std::string problem = gpt::parse_train_options(argc, argv, &options);
    if (problem == "help") {
        std::fputs(gpt::train_usage(), stdout);
        return 0;
    }
    if (!problem.empty()) {
        std::fprintf(stderr, "dsrt_gpt_demo: %s\n%s", problem.c_str(), gpt::train_usage());
        return 2;
    }
    if (dsrt_version_number() / 10000 != DSRT_VERSION_MAJOR)
        return fail(std::string("libdsrt ") + dsrt_version_string() + " does not match the header " +
                    DSRT_VERSION_STRING);
    try {
        return run(options);
    } catch (const std::exception &e) {
        return fail(e.what());
    }
}
