#!/usr/bin/env python3
"""Trains the same job with DeepSpeed and with dsrt's PyTorch front and compares them: the loss of
every micro-step and the final fp32 master of every parameter. Run by scripts/check-deepspeed.sh
(inside an environment with torch 2.x and deepspeed); not part of `make test`.

    deepspeed_parity.py table [--cases NAMES] [--out FILE]   every case, one process per engine
    deepspeed_parity.py run ENGINE CASE OUT                   one engine on one case (internal)

A case is a DeepSpeed config plus a number of optimizer steps. Both engines read the same config
file, build the same model from the same seed and see the same batches; each runs in its own
process (DeepSpeed with DS_ACCELERATOR=cpu and gloo, dsrt on its CPU engine)."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

IN, HIDDEN, OUT, MICRO = 16, 48, 8, 4
STEPS = 6


def base(stage, gas=1, clip=0.5, optimizer=None, **extra):
    """clip None: no gradient_clipping key (both engines' default, 1.0 in DeepSpeed 0.19)."""
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": clip,
        "steps_per_print": 1000000,
        "optimizer": optimizer or {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
    }
    if clip is None:
        del config["gradient_clipping"]
    config.update(extra)
    return config


def case_list():
    """(name, config, steps, world): the matrix, smallest first."""
    cases = []
    for precision in ("fp32", "bf16"):
        for stage in (0, 1, 2, 3):
            for gas in (1, 4):
                config = {
                    "train_micro_batch_size_per_gpu": MICRO,
                    "gradient_accumulation_steps": gas,
                    "gradient_clipping": 0.5,
                    "steps_per_print": 1000000,
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.99], "eps": 1e-8,
                                                              "weight_decay": 0.05, "torch_adam": True}},
                    "zero_optimization": {"stage": stage},
                }
                if precision == "bf16":
                    config["bf16"] = {"enabled": True}
                cases.append(("%s-stage%d-gas%d" % (precision, stage, gas), config, STEPS, 1))
    # No clipping, SGD with momentum, a schedule.
    cases.append(("fp32-stage2-noclip", {
        "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
        "steps_per_print": 1000000, "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0, "torch_adam": True}}}, STEPS))
    cases.append(("fp32-stage1-warmupdecay", {
        "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
        "steps_per_print": 1000000, "zero_optimization": {"stage": 1},
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "torch_adam": True}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.02,
                                                          "warmup_num_steps": 3, "total_num_steps": 8,
                                                          "warmup_type": "linear"}}}, 8))
    cases = [c if len(c) == 4 else c + (1,) for c in cases]
    # No gradient_clipping key: both engines clip at their default, 1.0 (this job's gradient norms
    # are 1.3-2.2, so every step is clipped); stage 0 and the partitioned stages clip in different
    # places in DeepSpeed, and the bf16 row is recomputed in float64 with the same default.
    for precision, stage in (("fp32", 0), ("fp32", 2), ("bf16", 1)):
        cases.append(("%s-stage%d-clip-default" % (precision, stage),
                      base(stage, clip=None, **({"bf16": {"enabled": True}} if precision == "bf16" else {})),
                      STEPS, 1))
    # Optimizers both have (DeepSpeed's CPU builds of its fused kernels where it has them).
    cases.append(("fp32-stage1-adam-l2", base(1, optimizer={"type": "Adam", "params": {
        "lr": 0.01, "weight_decay": 0.05, "adam_w_mode": False, "torch_adam": True}}), STEPS, 1))
    cases.append(("fp32-stage2-sgd-momentum", base(2, optimizer={"type": "SGD", "params": {
        "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}, zero_allow_untested_optimizer=True), STEPS, 1))
    cases.append(("fp32-stage1-lamb", base(1, optimizer={"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01}}),
                  STEPS, 1))
    cases.append(("fp32-stage1-lion", base(1, optimizer={"type": "Lion", "params": {"lr": 0.001, "weight_decay": 0.01}}),
                  STEPS, 1))
    cases.append(("fp32-stage1-adagrad", base(1, optimizer={"type": "Adagrad", "params": {"lr": 0.05}}), STEPS, 1))
    # Every DeepSpeed schedule.
    sched = lambda kind, **p: {"type": kind, "params": p}
    cases.append(("fp32-stage2-warmuplr-log", base(2, scheduler=sched(
        "WarmupLR", warmup_min_lr=0.0, warmup_max_lr=0.02, warmup_num_steps=4)), 8, 1))
    cases.append(("fp32-stage2-warmupcosine", base(2, scheduler=sched(
        "WarmupCosineLR", total_num_steps=8, warmup_num_steps=3, warmup_min_ratio=0.1, cos_min_ratio=0.01)), 8, 1))
    cases.append(("fp32-stage2-onecycle-adam", base(2, optimizer={"type": "Adam", "params": {
        "lr": 0.01, "weight_decay": 0.0, "torch_adam": True}},
                                                    scheduler=sched("OneCycle", cycle_min_lr=0.001, cycle_max_lr=0.02,
                                                                    cycle_first_step_size=3)), 8, 1))
    cases.append(("fp32-stage2-onecycle-sgd", base(2, optimizer={"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}},
                                                   zero_allow_untested_optimizer=True,
                                                   scheduler=sched("OneCycle", cycle_min_lr=0.001, cycle_max_lr=0.02,
                                                                   cycle_first_step_size=3)), 8, 1))
    cases.append(("fp32-stage1-lrrangetest", base(1, scheduler=sched(
        "LRRangeTest", lr_range_test_min_lr=0.001, lr_range_test_step_size=2, lr_range_test_step_rate=2.0)), 8, 1))
    # CPU offload of the optimizer (DeepSpeed's CPU Adam) and of the parameters.
    cpu_adam = {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}}
    cases.append(("fp32-stage2-offload-optimizer", base(2, gas=2, optimizer=cpu_adam, zero_optimization={
        "stage": 2, "offload_optimizer": {"device": "cpu"}}), STEPS, 1))
    cases.append(("fp32-stage3-offload-both", base(3, optimizer=cpu_adam, zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}), STEPS, 1))
    cases.append(("fp32-stage3-nvme-both", base(3, optimizer=cpu_adam, zero_optimization={
        "stage": 3, "sub_group_size": 10000, "offload_optimizer": {"device": "nvme", "nvme_path": "NVME_PATH"},
        "offload_param": {"device": "nvme", "nvme_path": "NVME_PATH"}},
        aio={"block_size": 262144, "queue_depth": 8, "single_submit": False, "overlap_events": True}), STEPS, 1))
    cases.append(("bf16-stage3-offload-both", base(3, optimizer=cpu_adam, bf16={"enabled": True}, zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}), STEPS, 1))
    # DeepSpeed's lower-memory bf16 mode: bf16 masters (CPU Adam with fp32 moments needs ZeRO-Offload),
    # and bf16 moments too (on ZeRO-Offload's CPU Adam, or on the device's optimizer).
    low = lambda states: {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": states}
    cases.append(("bf16-stage2-offload-bf16-master", base(2, optimizer=cpu_adam, bf16=low(False), zero_optimization={
        "stage": 2, "offload_optimizer": {"device": "cpu"}}), STEPS, 1))
    cases.append(("bf16-stage2-offload-bf16-master-states", base(2, optimizer=cpu_adam, bf16=low(True),
                                                                 zero_optimization={
        "stage": 2, "offload_optimizer": {"device": "cpu"}}), STEPS, 1))
    cases.append(("bf16-stage3-offload-bf16-master-states", base(3, optimizer=cpu_adam, bf16=low(True),
                                                                 zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu"}}), STEPS, 1))
    cases.append(("bf16-stage3-nvme-bf16-master", base(3, optimizer=cpu_adam, bf16=low(False), zero_optimization={
        "stage": 3, "sub_group_size": 10000, "offload_optimizer": {"device": "nvme", "nvme_path": "NVME_PATH"}},
        aio={"block_size": 262144, "queue_depth": 8, "single_submit": False, "overlap_events": True}), STEPS, 1))
    cases.append(("bf16-stage1-bf16-master-states", base(1, bf16=low(True)), STEPS, 1))
    cases.append(("bf16-stage2-offload-bf16-master-states-2ranks", base(2, gas=2, optimizer=cpu_adam, bf16=low(True),
                                                                        zero_optimization={
        "stage": 2, "offload_optimizer": {"device": "cpu"}}), STEPS, 2))
    # Two ranks (torchrun-style gloo processes for DeepSpeed, mpirun for dsrt).
    for stage in (0, 1, 2, 3):
        cases.append(("fp32-stage%d-gas2-2ranks" % stage, base(stage, gas=2), STEPS, 2))
    cases.append(("bf16-stage2-2ranks", base(2, gas=2, bf16={"enabled": True}), STEPS, 2))
    cases.append(("fp32-stage3-offload-both-2ranks", base(3, gas=2, optimizer=cpu_adam, zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}), STEPS, 2))
    # fp16 (DeepSpeed's CPU capability check bypassed on its side), a dynamic scale that overflows.
    for stage, gas in ((0, 1), (1, 1), (2, 1), (3, 1), (2, 2)):
        cases.append(("fp16-stage%d-gas%d" % (stage, gas), base(stage, gas=gas, fp16={
            "enabled": True, "initial_scale_power": 16, "loss_scale_window": 2, "hysteresis": 1}), 8, 1))
    # Save at step 10, resume in fresh processes, compare at step 20 (the losses are those after the resume).
    for stage in (2, 3):
        cases.append(("fp32-stage%d-resume-at-10" % stage, base(stage, gas=2, scheduler={
            "type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 15}}),
            20, 1, 10))
    return [c if len(c) == 5 else c + (0,) for c in cases]


def make_model(torch):
    torch.manual_seed(1234)
    if os.environ.get("DSRT_PARITY_BENCH_WIDTH"):
        return bench_model(torch, int(os.environ["DSRT_PARITY_BENCH_WIDTH"]))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(IN, HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, OUT)
            # A floating-point buffer (as a rotary inv_freq): both engines keep it in fp32.
            self.register_buffer("freq", 1.0 / (10.0 ** (torch.arange(HIDDEN, dtype=torch.float32) / HIDDEN)))

        def forward(self, x):
            h = torch.tanh(self.fc1(x)) * (1.0 + 0.1 * torch.cos(self.freq)).to(x.dtype)
            return self.fc2(h)

    return Net()


def rank():
    return int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))


def bench_model(torch, width):
    """scripts/deepspeed_bench.py's MLP: IN -> width -> width -> width -> OUT (2 * width^2 parameters and change)."""
    return torch.nn.Sequential(torch.nn.Linear(IN, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                               torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(),
                               torch.nn.Linear(width, OUT))


def batch(torch, step, micro):
    g = torch.Generator().manual_seed(1000 * step + micro + 100000 * rank())
    return torch.randn(MICRO, IN, generator=g), torch.randn(MICRO, OUT, generator=g)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(engine, command, world, env, timeout, tail, forward=()):
    """Runs `command` (a `run` of this script) on `world` ranks and waits: one process with one rank,
    DeepSpeed's ranks as torch.distributed processes (a free port), dsrt's through mpirun (which
    passes on the variables the ranks need, plus `forward`). Returns "" or the last `tail`
    characters of each failed process's stderr."""
    if world == 1:
        env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0",
                   WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    elif engine == "deepspeed":
        port = str(free_port())
        procs = [subprocess.Popen(command, env=dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r),
                                                    LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                                                    LOCAL_WORLD_SIZE=str(world)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
    else:
        flags = ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
        if os.getuid() == 0:
            flags.append("--allow-run-as-root")
        names = ("PYTHONPATH", "DSRT_BUILD_DIR", "DSRT_LOG_LEVEL", "OMP_NUM_THREADS") + tuple(forward)
        procs = [subprocess.Popen(["mpirun"] + flags + ["-np", str(world)] + [x for name in names for x in ("-x", name)] +
                                  command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    failed = ""
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            failed += err[-tail:]
    return failed


def run(engine_name, config_path, steps, out_path, resume_at=0, phase=0, checkpoint=""):
    """phase 1: train resume_at steps and save a checkpoint; phase 2: load it in this fresh process
    and train on to `steps` (only these losses are recorded). phase 0: train `steps` at once."""
    import torch
    with open(config_path) as f:
        config = json.load(f)
    gas = config["gradient_accumulation_steps"]
    model = make_model(torch)
    if config.get("fp16", {}).get("enabled"):
        # DeepSpeed builds its fp32 masters from the fp16-cast model at every stage (dsrt from the
        # fp32 values): start from fp16-representable weights, so the rows compare loss scaling.
        with torch.no_grad():
            for param in model.parameters():
                param.copy_(param.half().float())
    names = [name for name, _ in model.named_parameters()]
    if engine_name == "float64":
        return run_float64(torch, config, model, names, steps, out_path)
    if engine_name.startswith("lamb-"):
        return run_lamb(torch, config, model, names, steps, out_path, engine_name == "lamb-partition")
    if engine_name == "deepspeed":
        import deepspeed
        from deepspeed.utils import safe_get_full_fp32_param
        deepspeed.init_distributed(dist_backend="gloo")
        if config.get("fp16", {}).get("enabled"):
            # DeepSpeed's CPU accelerator refuses fp16; bypass only that capability check.
            from deepspeed.accelerator import get_accelerator
            accelerator = get_accelerator()
            accelerator.is_fp16_supported = lambda: True
            accelerator.supported_dtypes = lambda: [torch.float, torch.half, torch.bfloat16]
        engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                       config=config_path)
    else:
        import dsrt
        engine, optimizer, _, _ = dsrt.initialize(model=model, model_parameters=model.parameters(), config=config_path)
    dtype = (torch.bfloat16 if config.get("bf16", {}).get("enabled") else
             torch.float16 if config.get("fp16", {}).get("enabled") else torch.float32)
    losses, times, lrs, moms, step_times, scales = [], [], [], [], [], []
    cpu_times, step_cpu_times = [], []  # this process's CPU time (all its threads), for loaded machines
    first, last = 0, steps
    if phase == 1:
        last = resume_at
    elif phase == 2:
        engine.load_checkpoint(checkpoint, tag="parity")
        first = resume_at
    for step in range(first, last):
        start, cpu_start = time.perf_counter(), time.process_time()
        for micro in range(gas):
            x, y = batch(torch, step, micro)
            loss = torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)
            engine.backward(loss)
            step_start, step_cpu_start = time.perf_counter(), time.process_time()
            engine.step()
            step_times.append(time.perf_counter() - step_start)
            step_cpu_times.append(time.process_time() - step_cpu_start)
            losses.append(float(loss.detach()))
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        lrs.append(float(engine.get_lr()[0]))
        scale = (engine.optimizer.loss_scale if engine_name == "deepspeed" and
                 hasattr(engine.optimizer, "loss_scale") else getattr(engine, "loss_scale", 1.0))
        # DeepSpeed's stage-0 fp32 optimizer (clipping on) has a loss_scale method, not a scale: none.
        scales.append(1.0 if callable(scale) else float(scale))
        group = optimizer.param_groups[0]
        moms.append(float(group["betas"][0]) if "betas" in group else float(group.get("momentum", 0.0)))
    if phase == 1:
        engine.save_checkpoint(checkpoint, tag="parity")
        return
    masters = {}
    # The bench (deepspeed_bench.py) reads only the times: writing tens of millions of masters as
    # JSON text would take longer than the steps.
    for name, param in ([] if os.environ.get("DSRT_PARITY_BENCH_WIDTH") else engine.module.named_parameters()):
        if engine_name == "deepspeed":
            value = safe_get_full_fp32_param(param)
            masters[name] = (value if value is not None else param.detach()).float().cpu().double().tolist()
        else:
            masters[name] = engine.get_fp32_param(name).double().tolist()
    if rank() == 0:
        with open(out_path, "w") as f:
            json.dump({"losses": losses, "masters": masters, "names": names, "step_seconds": times, "lrs": lrs,
                       "momentums": moms, "engine_step_seconds": step_times, "loss_scales": scales,
                       "step_cpu_seconds": cpu_times, "engine_step_cpu_seconds": step_cpu_times}, f)


def run_float64(torch, config, model, names, steps, out_path):
    """The exact-math run: the same AdamW job in float64 with plain torch (loss / gas accumulated,
    clipping by the global norm with DeepSpeed's max_norm / (norm + 1e-6)), for the 16-bit rows."""
    gas = config["gradient_accumulation_steps"]
    params = config["optimizer"]["params"]
    model = model.double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params["lr"], betas=tuple(params.get("betas", (0.9, 0.999))),
                                  eps=params.get("eps", 1e-8), weight_decay=params.get("weight_decay", 0.0),
                                  foreach=False)
    losses = []
    for step in range(steps):
        for micro in range(gas):
            x, y = batch(torch, step, micro)
            loss = torch.nn.functional.mse_loss(model(x.double()), y.double())
            (loss / gas).backward()
            losses.append(float(loss.detach()))
        clip = config.get("gradient_clipping", 1.0)  # DeepSpeed 0.19's default
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
    masters = {name: param.detach().tolist() for name, param in model.named_parameters()}
    with open(out_path, "w") as f:
        json.dump({"losses": losses, "masters": masters, "names": names, "step_seconds": []}, f)


def run_lamb(torch, config, model, names, steps, out_path, per_partition):
    """Lamb in float64 with dsrt's formulas (update = m / (sqrt(v) + eps) + wd * w, step size
    lr * sqrt(1 - b2^t) / (1 - b1^t) times the trust ratio ||w|| / ||update|| clamped to
    [min_coeff, max_coeff]): the trust ratio per tensor (the paper's Lamb, dsrt's), or one over the
    whole flattened partition, as DeepSpeed's fused Lamb computes it at stages 1-3 (one rank: one
    partition). DeepSpeed's CPU accelerator has no Lamb kernel, so this stands in for its side."""
    gas = config["gradient_accumulation_steps"]
    p = config["optimizer"]["params"]
    lr, (b1, b2) = p["lr"], tuple(p.get("betas", (0.9, 0.999)))
    eps, wd = p.get("eps", 1e-8), p.get("weight_decay", 0.0)
    lo, hi = p.get("min_coeff", 0.01), p.get("max_coeff", 10.0)
    model = model.double()
    params = list(model.parameters())
    m = [torch.zeros_like(w) for w in params]
    v = [torch.zeros_like(w) for w in params]
    losses = []
    for step in range(steps):
        for micro in range(gas):
            x, y = batch(torch, step, micro)
            loss = torch.nn.functional.mse_loss(model(x.double()), y.double())
            (loss / gas).backward()
            losses.append(float(loss.detach()))
        clip = config.get("gradient_clipping", 1.0)  # DeepSpeed 0.19's default
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        t = step + 1
        size = lr * (1 - b2 ** t) ** 0.5 / (1 - b1 ** t)
        with torch.no_grad():
            updates = []
            for i, w in enumerate(params):
                m[i].mul_(b1).add_(w.grad, alpha=1 - b1)
                v[i].mul_(b2).addcmul_(w.grad, w.grad, value=1 - b2)
                updates.append(m[i] / (v[i].sqrt() + eps) + wd * w)

            def trust(w_norm, u_norm):
                return 1.0 if w_norm == 0 or u_norm == 0 else min(max(w_norm / u_norm, lo), hi)
            if per_partition:
                ratio = trust(float(torch.cat([w.flatten() for w in params]).norm()),
                              float(torch.cat([u.flatten() for u in updates]).norm()))
                ratios = [ratio] * len(params)
            else:
                ratios = [trust(float(w.norm()), float(u.norm())) for w, u in zip(params, updates)]
            for w, u, r in zip(params, updates, ratios):
                w.sub_(size * r * u)
                w.grad = None
    masters = {name: param.detach().tolist() for name, param in model.named_parameters()}
    with open(out_path, "w") as f:
        json.dump({"losses": losses, "masters": masters, "names": names, "step_seconds": []}, f)


def flat(torch, values):
    return torch.tensor(values, dtype=torch.float64).flatten()


def compare(torch, a, b):
    loss_a, loss_b = torch.tensor(a["losses"], dtype=torch.float64), torch.tensor(b["losses"], dtype=torch.float64)
    loss_err = float(((loss_a - loss_b).abs() / loss_a.abs().clamp_min(1e-12)).max()) if len(loss_a) == len(loss_b) else float("inf")
    master_err = 0.0
    for name in a["names"]:
        x, y = flat(torch, a["masters"][name]), flat(torch, b["masters"][name])
        master_err = max(master_err, float((x - y).norm() / x.norm()))
    return loss_err, master_err, float(loss_a[0]), float(loss_b[0])


def table(selected, out):
    import torch
    cases = [c for c in case_list() if not selected or c[0] in selected]
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, steps, world, resume_at in cases:
            config_path = os.path.join(tmp, name + ".json")
            with open(config_path, "w") as f:
                # NVMe offload: each engine's swap folder under this run's temporary folder.
                f.write(json.dumps(config).replace("NVME_PATH", os.path.join(tmp, "nvme")))
            os.makedirs(os.path.join(tmp, "nvme"), exist_ok=True)
            results = {}
            # bf16 rows with AdamW and no schedule get a float64 recompute to measure both against
            # (fp16 rows skip steps on overflow, which a float64 run does not).
            engines = ["deepspeed", "dsrt"]
            if "lamb" in name:
                # DeepSpeed's CPU accelerator has no Lamb: its per-partition trust ratio is emulated,
                # and the per-tensor emulation checks the emulation against dsrt.
                engines = ["lamb-partition", "dsrt", "lamb-tensor"]
            elif (name.startswith("bf16") and world == 1 and "scheduler" not in config
                    and config["optimizer"]["type"] == "AdamW"):
                engines.append("float64")
            for engine in engines:
                result = os.path.join(tmp, "%s.%s.out" % (name, engine))
                command = [sys.executable, os.path.join(here, "deepspeed_parity.py"), "run", engine, config_path,
                           str(steps), result]
                if resume_at:
                    checkpoint = os.path.join(tmp, "%s.%s.ckpt" % (name, engine))
                    env = dict(os.environ, DS_ACCELERATOR="cpu", DSRT_LOG_LEVEL="error", OMP_NUM_THREADS="1",
                               MASTER_ADDR="127.0.0.1", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
                    env.pop("DSRT_PARITY_BENCH_WIDTH", None)
                    failed = ""
                    for phase in (1, 2):
                        proc = subprocess.run(command + ["--resume-at", str(resume_at), "--phase", str(phase),
                                                         "--checkpoint", checkpoint],
                                              env=dict(env, MASTER_PORT=str(free_port())), capture_output=True, text=True)
                        if proc.returncode != 0:
                            failed += proc.stderr[-3000:]
                            break
                    if failed:
                        results[engine] = None
                        sys.stderr.write("%s / %s failed:\n%s\n" % (name, engine, failed))
                    else:
                        with open(result) as f:
                            results[engine] = json.load(f)
                    continue
                env = dict(os.environ, DS_ACCELERATOR="cpu", DSRT_LOG_LEVEL="error", OMP_NUM_THREADS="1")
                env.pop("DSRT_PARITY_BENCH_WIDTH", None)  # the parity job's own model
                failed = run_ranks(engine, command, world, env, 900, 3000)
                if failed:
                    results[engine] = None
                    sys.stderr.write("%s / %s failed:\n%s\n" % (name, engine, failed))
                else:
                    with open(result) as f:
                        results[engine] = json.load(f)
            first = engines[0]
            if results[first] is None or results["dsrt"] is None:
                rows.append((name, None))
            elif "lamb" in name:
                row = compare(torch, results["lamb-partition"], results["dsrt"])
                rows.append((name + " (DeepSpeed side: per-partition emulation; dsrt vs per-tensor emulation "
                             "%.1e)" % compare(torch, results["lamb-tensor"], results["dsrt"])[1], row))
            else:
                row = compare(torch, results["deepspeed"], results["dsrt"])
                if name.startswith("fp16"):
                    # The dynamic loss scale after every step, which must be the same history.
                    same = results["deepspeed"]["loss_scales"] == results["dsrt"]["loss_scales"]
                    name += " (loss scales %s: %s)" % ("equal" if same else "DIFFER",
                                                       " ".join("%g" % x for x in results["dsrt"]["loss_scales"]))
                    if not same:
                        row = row[:1] + (float("inf"),) + row[2:]
                if results.get("float64") is not None:
                    row = row + (compare(torch, results["float64"], results["deepspeed"])[1],
                                 compare(torch, results["float64"], results["dsrt"])[1])
                rows.append((name, row))
            print(format_row(rows[-1]), flush=True)
    text = "\n".join(["| case | loss rel. err (max over micro-steps) | master rel. err (max over tensors) | "
                      "first loss DeepSpeed / dsrt | masters vs float64: DeepSpeed / dsrt | within tolerance |",
                      "| --- | --- | --- | --- | --- | --- |"] + [format_row(r) for r in rows]) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    sys.stdout.write("\n" + text)
    return all(r[1] is not None and within(r[0], *r[1][:2], *r[1][4:6]) for r in rows)


def within(name, loss_err, master_err, ds_exact=None, dsrt_exact=None):
    """fp32: 1e-5 relative. 16-bit: 1e-2 apart, and dsrt no farther from the float64 run than
    DeepSpeed (5% slack) where that run exists."""
    tolerance = 1e-5 if name.startswith("fp32") else 1e-2
    ok = loss_err < tolerance and master_err < tolerance
    if ds_exact is not None:
        ok = ok and dsrt_exact <= 1.05 * ds_exact
    return ok


def format_row(row):
    name, result = row
    if result is None:
        return "| %s | failed | failed | - | - | no |" % name
    loss_err, master_err, first_a, first_b = result[:4]
    exact = "%.2e / %.2e" % result[4:6] if len(result) > 4 else "-"
    return "| %s | %.2e | %.2e | %.6f / %.6f | %s | %s |" % (name, loss_err, master_err, first_a, first_b, exact,
                                                            "yes" if within(name, loss_err, master_err, *result[4:6])
                                                            else "NO")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table")
    t.add_argument("--cases", nargs="*")
    t.add_argument("--out")
    r = sub.add_parser("run")
    r.add_argument("engine", choices=("deepspeed", "dsrt", "float64", "lamb-tensor", "lamb-partition"))
    r.add_argument("config")
    r.add_argument("steps", type=int)
    r.add_argument("out")
    r.add_argument("--resume-at", type=int, default=0)
    r.add_argument("--phase", type=int, default=0)
    r.add_argument("--checkpoint", default="")
    args = parser.parse_args()
    if args.command == "run":
        run(args.engine, args.config, args.steps, args.out, args.resume_at, args.phase, args.checkpoint)
        return 0
    return 0 if table(args.cases, args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
