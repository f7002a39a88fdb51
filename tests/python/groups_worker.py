"""Parameter groups and host-driven hyperparameters of the low-level engine against torch.optim.

Run alone (one rank) or under mpirun (2-3 ranks: tensors straddle partitions at stages 1-2 and are
sharded at stage 3). Every rank computes the torch reference itself from the same seeded data.
Each case: tensors in 2-3 groups with different lr, weight decay (and betas / momentum), torch's
LambdaLR writing the groups' lr, and the same lr written into dsrt between steps with
dsrt_engine_set_group_hyper; the fp32 masters must match torch's to < 1e-5 relative after 20
steps. Optimizers torch does not have (Lamb, Lion) are checked group by group against an engine
that holds only that group's tensors with the group's values in its config section.

Usage: groups_worker.py SEED [case ...]   (cases: see CASES; default all). Exits non-zero on a
mismatch, printing the case, the tensor and the error.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("DSRT_BUILD_DIR", "build"), "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import dsrt  # noqa: E402

STEPS = 20
SHAPES = {"w1": (37, 29), "b1": (29,), "w2": (29, 7), "b2": (7,), "norm": (53,)}
GROUP_OF = {"w1": 0, "b1": 1, "w2": 0, "b2": 1, "norm": 2}


def lam(step):
    return 1.0 / (1.0 + 0.15 * step) if step % 3 else 0.5 + 0.02 * step


# name: (dsrt config optimizer, torch optimizer, per-group torch/dsrt values)
CASES = {
    "adamw": ({"type": "AdamW", "params": {"lr": 2e-2, "weight_decay": 0.1, "betas": [0.9, 0.99], "eps": 1e-8}},
              "AdamW",
              [{"lr": 2e-2, "weight_decay": 0.1, "betas": (0.9, 0.99)},
               {"lr": 5e-3, "weight_decay": 0.0, "betas": (0.8, 0.95)},
               {"lr": 1e-2, "weight_decay": 0.3, "eps": 1e-6, "betas": (0.9, 0.99)}]),
    "adam_l2": ({"type": "Adam", "params": {"lr": 1e-2, "weight_decay": 0.01, "adam_w_mode": False}},
                "Adam",
                [{"lr": 1e-2, "weight_decay": 0.01},
                 {"lr": 3e-2, "weight_decay": 0.0},
                 {"lr": 4e-3, "weight_decay": 0.2, "betas": (0.5, 0.9)}]),
    "sgd": ({"type": "SGD", "params": {"lr": 5e-2, "momentum": 0.9, "weight_decay": 1e-3}},
            "SGD",
            [{"lr": 5e-2, "momentum": 0.9, "weight_decay": 1e-3},
             {"lr": 1e-2, "momentum": 0.5, "weight_decay": 0.0, "dampening": 0.1},
             {"lr": 2e-2, "momentum": 0.8, "nesterov": True, "weight_decay": 0.01}]),
    "adagrad": ({"type": "Adagrad", "params": {"lr": 5e-2, "eps": 1e-10, "weight_decay": 0.0}},
                "Adagrad",
                [{"lr": 5e-2}, {"lr": 1e-2, "weight_decay": 0.05}, {"lr": 2e-2, "eps": 1e-6}]),
}
# Optimizers without a torch reference: group g against a one-group engine configured with its values.
SELF_CASES = {
    "lamb": ({"type": "Lamb", "params": {"lr": 1e-2, "weight_decay": 0.01, "max_coeff": 10.0, "min_coeff": 0.01}},
             [{}, {"lr": 3e-3, "weight_decay": 0.0, "max_coeff": 0.5, "min_coeff": 0.1},
              {"lr": 2e-2, "beta1": 0.8, "eps": 1e-6}]),
    "lion": ({"type": "Lion", "params": {"lr": 1e-3, "weight_decay": 0.1, "betas": [0.9, 0.99]}},
             [{}, {"lr": 3e-4, "weight_decay": 0.0}, {"lr": 2e-3, "beta1": 0.8, "beta2": 0.9}]),
}
STAGES = (0, 1, 2, 3)
OFFLOAD_CASES = {"adamw_cpu_offload": ("adamw", "cpu"), "sgd_nvme_offload": ("sgd", "nvme")}
DTYPE_CASES = {"adamw_fp16": ("adamw", "fp16"), "sgd_bf16": ("sgd", "bf16")}


def dsrt_values(torch_group):
    """A torch param group's values under dsrt's names."""
    out = {}
    for key, value in torch_group.items():
        if key == "betas":
            out["beta1"], out["beta2"] = value
        elif key == "nesterov":
            out["nesterov"] = 1.0 if value else 0.0
        else:
            out[key] = value
    return out


def make_data(seed):
    rng = np.random.default_rng(seed)
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    grads = [{n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()} for _ in range(STEPS)]
    return init, grads


OFFLOAD = None  # None, "cpu" or "nvme" (cases adamw_cpu_offload, sgd_nvme_offload)
DTYPE = "fp32"  # or "fp16" / "bf16" (cases adamw_fp16, sgd_bf16): 16-bit working copies and gradients
LOSS_SCALE = 1024.0  # static fp16 loss scale (a power of two: unscaling is exact)


def bf16_round(x):
    """float32 -> the nearest bfloat16 (ties to even), as float32 values and as bit patterns."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return (rounded.astype(np.uint32) << 16).view(np.float32), rounded


def as_sent(g):
    """The gradient as dsrt receives it in the working dtype, unscaled: what the reference steps with."""
    if DTYPE == "fp16":
        return (np.asarray(g * LOSS_SCALE, dtype=np.float16).astype(np.float32) / LOSS_SCALE).astype(np.float32)
    if DTYPE == "bf16":
        return bf16_round(g)[0]
    return g


def zero_config(stage, optimizer):
    # No clipping (DeepSpeed's default clips at 1.0): run_torch is plain torch.optim; the boundaries
    # case sets its own gradient_clipping and clips its reference the same way.
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "optimizer": optimizer,
              "zero_optimization": {"stage": stage, "reduce_bucket_size": 300, "allgather_bucket_size": 300,
                                    "stage3_param_persistence_threshold": 40}}
    if DTYPE == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": LOSS_SCALE}
    elif DTYPE == "bf16":
        config["bf16"] = {"enabled": True}
    if OFFLOAD == "cpu":
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    elif OFFLOAD == "nvme":
        import tempfile
        folder = os.path.join(tempfile.gettempdir(), "dsrt-groups-%d" % os.getpid())
        os.makedirs(folder, exist_ok=True)
        config["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": folder}
        config["zero_optimization"]["sub_group_size"] = 500  # sub-groups cut through tensors and groups
    return config


def run_dsrt(comm, config, init, grads, groups, names, schedule=True, steps=range(STEPS), load_from=None,
             save_to=None):
    """groups: per added group (index >= 1) its dsrt values; group 0 is the config's. With
    schedule, each group's lr follows lam() from the host between steps. load_from: a checkpoint
    folder loaded after build (the groups' values are set to others first, so that the load must
    restore them); save_to: saved after the last step."""
    engine = dsrt.Engine(config, comm)
    tensors = {n: engine.add_param(n, init=init[n]) for n in names}
    base = []
    for g, values in enumerate(groups):
        if g > 0:
            assert engine.add_group() == g
        for key, value in values.items():
            if key != "lr":
                engine.set_group_hyper(g, key, value)
        base.append(values.get("lr", engine.get_group_hyper(g, "lr")))
    for n in names:
        tensors[n].group = GROUP_OF[n]
    engine.build()
    if load_from is not None:
        for g in range(len(groups)):
            engine.set_group_hyper(g, "weight_decay", 0.77)
        engine.load_checkpoint(load_from)
        for g, values in enumerate(groups):
            assert engine.get_group_hyper(g, "weight_decay") == values.get("weight_decay", config["optimizer"][
                "params"].get("weight_decay", 0.0)), (g, engine.get_group_hyper(g, "weight_decay"))
    for step in steps:
        for g in range(len(groups)):
            engine.set_group_hyper(g, "lr", base[g] * (lam(step) if schedule else 1.0))
        world = comm.world_size
        for n in reversed(names):
            buf = tensors[n].grad().numpy()
            # Each rank holds its own part of the batch: the ranks' gradients average to grads[step].
            share = grads[step][n] * world * (comm.rank + 1) * 2.0 / (world * (world + 1))
            if DTYPE == "fp16":
                buf[...] = share * LOSS_SCALE
            elif DTYPE == "bf16":
                buf[...] = bf16_round(share)[1]
            else:
                buf[...] = share
            tensors[n].grad_ready()
        result = engine.step()
        assert result.boundary
        for g in range(len(groups)):
            expected = base[g] * (lam(step) if schedule else 1.0)
            got = engine.group_lr(g)
            assert abs(got - expected) <= 1e-12 * max(1.0, expected), (g, got, expected)
    if save_to is not None:
        engine.save_checkpoint(save_to)
    out = {n: tensors[n].read_fp32() for n in names}
    engine.close()
    return out


def run_torch(kind, init, grads, groups):
    params = {n: torch.nn.Parameter(torch.tensor(init[n])) for n in SHAPES}
    param_groups = [dict(values, params=[params[n] for n in SHAPES if GROUP_OF[n] == g])
                    for g, values in enumerate(groups)]
    opt = getattr(torch.optim, kind)(param_groups)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    for step in range(STEPS):
        for n, p in params.items():
            p.grad = torch.tensor(as_sent(grads[step][n]))
        opt.step()
        sched.step()
    return {n: p.detach().numpy() for n, p in params.items()}


WINDOWS = (3, 3, 2, 1, 3, 2)  # micro-steps per window: gas 3 in the config, short windows too


def run_boundaries(comm, stage, init, grads, mode):
    """The host decides every window's end (set_gradient_accumulation_boundary before each
    backward). mode "scaled": the host divides its loss by the window length and turns off
    scale_wrt_gas; "default": dsrt divides by gradient_accumulation_steps (3) whatever the
    window's length, as DeepSpeed does; "one_step": several backward passes per step() call
    (step() once per window, after the last backward). Returns the masters and grad norms."""
    names = list(SHAPES)
    config = zero_config(stage, {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.05}})
    config["gradient_accumulation_steps"] = 3
    config["gradient_clipping"] = 0.7
    engine = dsrt.Engine(config, comm)
    tensors = {n: engine.add_param(n, init=init[n]) for n in names}
    engine.build()
    if mode != "default":
        engine.set_scale_wrt_gas(False)
    world = comm.world_size
    norms = []
    micro = 0
    for window in WINDOWS:
        for i in range(window):
            engine.set_gradient_accumulation_boundary(i == window - 1)
            factor = 1.0 / window if mode != "default" else 1.0
            for n in reversed(names):
                buf = tensors[n].grad().numpy()
                buf[...] = grads[micro][n] * factor * world * (comm.rank + 1) * 2.0 / (world * (world + 1))
                tensors[n].grad_ready()
            micro += 1
            if mode != "one_step" or i == window - 1:
                result = engine.step()
                assert result.boundary == (i == window - 1), (mode, window, i, result)
        norms.append(result.grad_norm)
    out = {n: tensors[n].read_fp32() for n in names}
    engine.close()
    return out, norms


def torch_boundaries(init, grads, mode):
    params = {n: torch.nn.Parameter(torch.tensor(init[n], dtype=torch.float64)) for n in SHAPES}
    opt = torch.optim.AdamW(params.values(), lr=1e-2, weight_decay=0.05)
    norms = []
    micro = 0
    for window in WINDOWS:
        divisor = window if mode != "default" else 3
        for n, p in params.items():
            p.grad = sum(torch.tensor(grads[micro + i][n], dtype=torch.float64) for i in range(window)) / divisor
        micro += window
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), 0.7)))
        opt.step()
    return {n: p.detach().numpy() for n, p in params.items()}, norms


def relative(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


def main():
    seed = int(sys.argv[1])
    wanted = sys.argv[2:] or list(CASES) + list(SELF_CASES) + list(OFFLOAD_CASES) + list(DTYPE_CASES) + ["boundaries"]
    comm = dsrt.Comm.from_env()
    init, grads = make_data(seed)
    failures = 0
    names = list(SHAPES)
    global OFFLOAD, DTYPE
    for case in wanted:
        OFFLOAD = None
        DTYPE = "fp32"
        if case == "ckpt_save":
            # The first half of the adamw case at stage 2, saved for test_param_groups to resume
            # at another world size and stage.
            optimizer, kind, groups = CASES["adamw"]
            run_dsrt(comm, zero_config(2, optimizer), init, grads, [dsrt_values(g) for g in groups], names,
                     steps=range(STEPS // 2), save_to=os.environ["DSRT_GROUPS_CKPT"])
            continue
        if case == "boundaries":
            for stage in STAGES:
                for mode in ("scaled", "default", "one_step"):
                    ours, our_norms = run_boundaries(comm, stage, init, grads, mode)
                    theirs, their_norms = torch_boundaries(init, grads, mode)
                    for n in names:
                        err = relative(ours[n], theirs[n])
                        if not err < 1e-5:
                            failures += 1
                            print("rank %d boundaries %s stage %d tensor %s: relative error %g (seed %d)"
                                  % (comm.rank, mode, stage, n, err, seed), file=sys.stderr)
                    for k, (a, b) in enumerate(zip(our_norms, their_norms)):
                        if not abs(a - b) <= 1e-5 * b:
                            failures += 1
                            print("rank %d boundaries %s stage %d window %d: grad norm %r, torch %r (seed %d)"
                                  % (comm.rank, mode, stage, k, a, b, seed), file=sys.stderr)
            continue
        if case in OFFLOAD_CASES:
            case, OFFLOAD = OFFLOAD_CASES[case]
        if case in DTYPE_CASES:
            case, DTYPE = DTYPE_CASES[case]
        for stage in STAGES:
            if OFFLOAD and stage == 0:
                continue  # optimizer offload needs ZeRO 1-3
            if case in CASES:
                optimizer, kind, groups = CASES[case]
                ours = run_dsrt(comm, zero_config(stage, optimizer), init, grads,
                                [dsrt_values(g) for g in groups], names)
                theirs = run_torch(kind, init, grads, groups)
                pairs = [(n, ours[n], theirs[n]) for n in names]
            else:
                optimizer, groups = SELF_CASES[case]
                ours = run_dsrt(comm, zero_config(stage, optimizer), init, grads, groups, names)
                pairs = []
                for g, values in enumerate(groups):
                    members = [n for n in names if GROUP_OF[n] == g]
                    alone = {"type": optimizer["type"], "params": dict(optimizer["params"])}
                    for key, value in values.items():
                        if key in ("beta1", "beta2"):
                            betas = list(alone["params"].get("betas", [0.9, 0.999]))
                            betas[0 if key == "beta1" else 1] = value
                            alone["params"]["betas"] = betas
                        else:
                            alone["params"][key] = value
                    saved = dict(GROUP_OF)
                    for n in members:
                        GROUP_OF[n] = 0
                    try:
                        ref = run_dsrt(comm, zero_config(stage, alone), init, grads, [{}], members)
                    finally:
                        GROUP_OF.update(saved)
                    pairs += [(n, ours[n], ref[n]) for n in members]
            for n, a, b in pairs:
                err = relative(a, b)
                if not err < 1e-5:
                    failures += 1
                    print("rank %d case %s stage %d tensor %s (group %d): relative error %g (seed %d)"
                          % (comm.rank, case, stage, n, GROUP_OF[n], err, seed), file=sys.stderr)
    comm.close()
    if OFFLOAD_CASES:
        import shutil
        import tempfile
        shutil.rmtree(os.path.join(tempfile.gettempdir(), "dsrt-groups-%d" % os.getpid()), ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
