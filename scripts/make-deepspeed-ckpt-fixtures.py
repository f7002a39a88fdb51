#!/usr/bin/env python3
"""Writes the real DeepSpeed checkpoints under tests/data/deepspeed-ckpt/ that the import tests
(tests/python/test_ds_checkpoint.py) read. Run it in an environment with torch 2.x and DeepSpeed
(CPU accelerator, gloo); `make test` only reads what it wrote.

    make-deepspeed-ckpt-fixtures.py [OUT]        every case (default OUT: tests/data/deepspeed-ckpt)
    make-deepspeed-ckpt-fixtures.py run CASE OUT  one rank of one case (internal; RANK/WORLD_SIZE set)

Each case is a tiny model (two Linear layers, 75 parameters, a buffer) trained 3 steps by
DeepSpeed and saved (tag global_step3), then trained 2 steps more. Beside the checkpoint,
expected.pt holds what DeepSpeed itself reports through its own API, as plain tensors: the full fp32
masters and Adam moments of every parameter (deepspeed.utils.safe_get_full_fp32_param /
safe_get_full_optimizer_state), the step, lr and loss scale at the save, and the batches, losses
and final masters of the 2 steps after it. The fixtures drop DeepSpeed's copies of zero_to_fp32.py and zero_to_torch.py."""
import json
import os
import shutil
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
IN, HIDDEN, OUT, MICRO = 5, 8, 3, 2
SAVE_AT, MORE = 3, 2


def cases():
    """name -> (config, world, grouped)."""
    out = {}
    for precision in ("fp32", "bf16", "fp16"):
        for stage in (0, 1, 2, 3):
            for world in (1, 2):
                if precision == "fp16" and (world == 2 or stage == 0):
                    continue  # the loss scaler at each ZeRO stage, once
                if stage == 0 and world == 2:
                    continue  # stage 0 saves the same replicated files at any world size
                config = {
                    "train_micro_batch_size_per_gpu": MICRO,
                    "gradient_accumulation_steps": 1,
                    "gradient_clipping": 0.5,
                    "steps_per_print": 1000000,
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.02, "betas": [0.9, 0.99], "eps": 1e-8,
                                                              "weight_decay": 0.05, "torch_adam": True}},
                    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.02,
                                                                 "warmup_num_steps": 10}},
                    "zero_optimization": {"stage": stage},
                }
                if precision == "bf16":
                    config["bf16"] = {"enabled": True}
                if precision == "fp16":
                    config["fp16"] = {"enabled": True, "initial_scale_power": 8, "loss_scale_window": 2,
                                      "hysteresis": 2}
                out["%s-stage%d-w%d" % (precision, stage, world)] = (config, world, False)
    # Two parameter groups (no weight decay on biases), as the Hugging Face Trainer builds them.
    for stage in (2, 3):
        config = dict(out["bf16-stage%d-w2" % stage][0])
        out["groups-bf16-stage%d-w2" % stage] = (config, 2, True)
    return out


def make_model(torch):
    torch.manual_seed(4321)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(IN, HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, OUT)
            self.register_buffer("scale", torch.linspace(0.5, 1.5, HIDDEN))

        def forward(self, x):
            return self.fc2(torch.tanh(self.fc1(x)) * self.scale.to(x.dtype))

    model = Tiny()
    with torch.no_grad():  # fp16-representable start values, so fp16 masters equal the model
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


def batches(torch, world):
    """[step][rank] -> (x, y), fixed by seed."""
    g = torch.Generator().manual_seed(99)
    return [[(torch.randn(MICRO, IN, generator=g), torch.randn(MICRO, OUT, generator=g)) for _ in range(world)]
            for _ in range(SAVE_AT + MORE)]


def param_groups(model, grouped):
    if not grouped:
        return model.parameters()
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


def run(case, out_dir):
    import torch
    import deepspeed
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    config, world, grouped = cases()[case]
    rank = int(os.environ["RANK"])
    deepspeed.init_distributed(dist_backend="gloo")
    if config.get("fp16", {}).get("enabled"):
        # DeepSpeed's CPU accelerator refuses fp16; bypass only that capability check.
        from deepspeed.accelerator import get_accelerator
        accelerator = get_accelerator()
        accelerator.is_fp16_supported = lambda: True
        accelerator.supported_dtypes = lambda: [torch.float, torch.half, torch.bfloat16]
    model = make_model(torch)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=param_groups(model, grouped),
                                                   config=config)
    dtype = torch.bfloat16 if "bf16" in config else torch.float16 if "fp16" in config else torch.float32
    data = batches(torch, world)

    def train_step(step):
        x, y = data[step][rank]
        loss = torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)
        engine.backward(loss)
        engine.step()
        return float(loss.detach())

    def full_state():
        masters, moments = {}, {"exp_avg": {}, "exp_avg_sq": {}}
        opt = engine.optimizer
        # Stage 0: the torch optimizer trains the parameters themselves (fp32) or the 16-bit
        # optimizer's fp32 copies (fp32_groups, in parameter order).
        plain = [m for g in opt.fp32_groups for m in g] if hasattr(opt, "fp32_groups") else None
        for index, (name, param) in enumerate(engine.module.named_parameters()):
            master = safe_get_full_fp32_param(param)
            if master is None:
                master = plain[index] if plain is not None else param
                masters[name] = master.detach().float().cpu().clone()
                state = getattr(opt, "optimizer", opt).state[master]
                for key in moments:
                    moments[key][name] = state[key].detach().float().cpu().clone()
                continue
            masters[name] = master.detach().float().cpu().clone()
            for key in [k for k in moments if moments[k] is not None]:
                try:
                    moments[key][name] = safe_get_full_optimizer_state(param, key).detach().float().cpu().clone()
                except ValueError:
                    # DeepSpeed 0.19.8 cannot gather the states of a rank holding no fragment of a
                    # group (several groups on 2 ranks): no moment reference for these cases.
                    moments[key] = None
        return masters, moments

    for step in range(SAVE_AT):
        train_step(step)
    ckpt = os.path.join(out_dir, "ckpt")
    engine.save_checkpoint(ckpt)
    masters, moments = full_state()
    scaler = getattr(engine.optimizer, "loss_scale", None)
    saved = {
        "names": [n for n, _ in engine.module.named_parameters()],
        "masters": masters, "exp_avg": moments["exp_avg"], "exp_avg_sq": moments["exp_avg_sq"],
        "global_steps": engine.global_steps, "skipped_steps": engine.skipped_steps,
        "lr": [float(g["lr"]) for g in optimizer.param_groups],
        "scheduler_last_batch_iteration": engine.lr_scheduler.last_batch_iteration,
        "loss_scale": float(scaler) if scaler is not None else 1.0,
        "batches": data, "world": world, "config": json.dumps(config), "grouped": grouped,
    }
    losses = [train_step(step) for step in range(SAVE_AT, SAVE_AT + MORE)]
    saved["continue_losses"] = losses  # this rank's
    saved["continue_masters"] = full_state()[0]
    all_losses = [None] * world
    torch.distributed.all_gather_object(all_losses, losses)
    saved["continue_losses"] = all_losses
    if rank == 0:
        torch.save(saved, os.path.join(out_dir, "expected.pt"))
        for script in ("zero_to_fp32.py", "zero_to_torch.py"):  # DeepSpeed's copies (not at stage 0)
            if os.path.exists(os.path.join(ckpt, script)):
                os.remove(os.path.join(ckpt, script))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        return run(sys.argv[2], sys.argv[3])
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(HERE), "tests", "data", "deepspeed-ckpt")
    selected = os.environ.get("DSRT_FIXTURE_CASES", "").split()
    for name, (_, world, _) in cases().items():
        if selected and name not in selected:
            continue
        target = os.path.join(out, name)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        port = str(free_port())
        procs = []
        for r in range(world):
            env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(world))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "run", name, target], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for proc in procs:
            text, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                sys.stderr.write(text[-4000:])
                sys.exit("case %s failed" % name)
        print("wrote", target)


if __name__ == "__main__":
    main()
