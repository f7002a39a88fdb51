"""Run under mpirun -np 2 [SHARED_DIR]: a DeepSpeed-style script on 2 ranks (each its own data
shard) gives the weights of plain PyTorch trained on both shards with AdamW + clip_grad_norm_,
a WarmupLR schedule computed here from DeepSpeed's formula and gradient accumulation over 2
micro-steps, at every ZeRO stage. With SHARED_DIR, the ranks' DataLoader shards are also checked:
disjoint, and together the whole data set. Exits non-zero on any mismatch."""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("DSRT_BUILD_DIR", "build"), "python"))
import torch  # noqa: E402

import dsrt  # noqa: E402

GAS = 2
WARMUP, MAX_LR = 3, 0.01


def warmup_lr(step):
    """DeepSpeed's WarmupLR (linear, warmup_min_lr 0): step 0 runs at the min lr, and the scheduler
    stepped after step k gives min(1, k / warmup_num_steps) of the max for step k + 1."""
    return 0.0 if step == 0 else MAX_LR * min(1.0, (step - 1) / WARMUP)


def check_weights(comm, stage):
    rank, world = comm.rank, comm.world_size
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 31), torch.nn.Tanh(), torch.nn.Linear(31, 3))
    reference = copy.deepcopy(model)
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": GAS, "gradient_clipping": 0.3,
              "optimizer": {"type": "AdamW", "params": {"lr": MAX_LR, "weight_decay": 0.05}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": MAX_LR,
                                                            "warmup_num_steps": WARMUP, "warmup_type": "linear"}},
              "zero_optimization": {"stage": stage, "reduce_bucket_size": 100,
                                    "stage3_param_persistence_threshold": 20}}
    engine, *_ = dsrt.initialize(model=model, config=config, comm=comm)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=MAX_LR, weight_decay=0.05)
    generator = torch.Generator().manual_seed(123)
    for step in range(5):
        for micro in range(GAS):
            shards = [(torch.randn(4, 10, generator=generator), torch.randn(4, 3, generator=generator))
                      for _ in range(world)]
            x, y = shards[rank]
            engine.backward(torch.nn.functional.mse_loss(engine(x), y))
            engine.step()
            ref_loss = sum(torch.nn.functional.mse_loss(reference(sx), sy) for sx, sy in shards) / (world * GAS)
            ref_loss.backward()
        for group in ref_opt.param_groups:
            group["lr"] = warmup_lr(step)
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.3)
        ref_opt.step()
        ref_opt.zero_grad()
    failures = 0
    for name, param in reference.named_parameters():
        ours = engine.get_fp32_param(name)
        err = float((ours - param.detach()).norm() / param.detach().norm())
        if not err < 1e-5:
            print("rank %d stage %d %s: relative error %g" % (rank, stage, name, err), file=sys.stderr)
            failures += 1
    engine.close()
    return failures


def check_frozen(comm):
    """A LoRA-style model at ZeRO-3: the frozen base (requires_grad=False) is a dsrt frozen tensor,
    each rank holds half of it, its value is unchanged by training, and the adapter trains as plain
    PyTorch does on both ranks' data."""
    rank, world = comm.rank, comm.world_size
    torch.manual_seed(5)
    model = torch.nn.ModuleDict({"base": torch.nn.Linear(24, 16, bias=False), "a": torch.nn.Linear(24, 3, bias=False),
                                 "b": torch.nn.Linear(3, 16, bias=False)})
    torch.nn.init.normal_(model["b"].weight, std=0.2)
    model["base"].requires_grad_(False)

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner["base"](x) + self.inner["b"](self.inner["a"](x))

    wrapped, reference = Wrapper(model), Wrapper(copy.deepcopy(model))
    base_before = model["base"].weight.detach().clone()
    config = {"train_micro_batch_size_per_gpu": 4,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, *_ = dsrt.initialize(model=wrapped, config=config, comm=comm)
    failures = 0
    if model["base"].weight.numel() != 0:
        print("rank %d: the frozen base is whole outside use at stage 3" % rank, file=sys.stderr)
        failures += 1
    # Per rank: the adapters' shards plus half of the base (fp32), beside an engine without the base.
    working = engine.memory()["working_params"][0]
    expected_base = (24 * 16 + world - 1) // world * 4
    trainable = [p for n, p in reference.named_parameters() if p.requires_grad]
    ref_opt = torch.optim.AdamW(trainable, lr=0.01, weight_decay=0.05)
    generator = torch.Generator().manual_seed(9)
    for _ in range(4):
        shards = [(torch.randn(4, 24, generator=generator), torch.randn(4, 16, generator=generator))
                  for _ in range(world)]
        x, y = shards[rank]
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        (sum(torch.nn.functional.mse_loss(reference(sx), sy) for sx, sy in shards) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for name, param in reference.named_parameters():
        ours = engine.get_fp32_param(name)
        if param.requires_grad:
            err = float((ours - param.detach()).norm() / param.detach().norm())
            ok = err < 1e-5
        else:
            ok = torch.equal(ours, base_before)
        if not ok:
            print("rank %d frozen model %s: mismatch" % (rank, name), file=sys.stderr)
            failures += 1
    engine.close()
    # The same adapters without the base: the difference is this rank's half of the base.
    torch.manual_seed(5)
    bare = torch.nn.ModuleDict({"a": torch.nn.Linear(24, 3, bias=False), "b": torch.nn.Linear(3, 16, bias=False)})
    engine, *_ = dsrt.initialize(model=bare, config=config, comm=comm)
    bare_working = engine.memory()["working_params"][0]
    engine.close()
    if working - bare_working != expected_base:
        print("rank %d: the frozen base takes %d bytes, expected %d" % (rank, working - bare_working, expected_base),
              file=sys.stderr)
        failures += 1
    return failures


def check_shards(comm, shared_dir):
    """Each rank's DataLoader sees its own part of the data; together, all of it, once."""
    data = torch.utils.data.TensorDataset(torch.arange(22))
    engine, _, loader, _ = dsrt.initialize(model=torch.nn.Linear(1, 1), training_data=data, comm=comm,
                                           config={"train_micro_batch_size_per_gpu": 3,
                                                   "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}})
    mine = sorted(int(i) for (batch,) in loader for i in batch)
    with open(os.path.join(shared_dir, "shard%d" % comm.rank), "w") as f:
        f.write(" ".join(map(str, mine)))
    comm.barrier()
    shards = []
    for rank in range(comm.world_size):
        with open(os.path.join(shared_dir, "shard%d" % rank)) as f:
            shards.append([int(v) for v in f.read().split()])
    engine.close()
    # DistributedSampler pads to an equal share per rank: 22 over 2 ranks has no padding.
    union = sorted(v for shard in shards for v in shard)
    if union != list(range(22)) or len(set(shards[0]) & set(shards[1])) != 0 or len(shards[0]) != 11:
        print("rank %d: shards overlap or miss data: %r" % (comm.rank, shards), file=sys.stderr)
        return 1
    return 0


def main():
    comm = dsrt.Comm.from_env()
    assert comm.world_size == 2, "run me with mpirun -np 2"
    failures = sum(check_weights(comm, stage) for stage in (0, 1, 2, 3))
    failures += check_frozen(comm)
    if len(sys.argv) > 1:
        failures += check_shards(comm, sys.argv[1])
    rank = comm.rank
    comm.close()
    print("rank %d: %s" % (rank, "ok" if failures == 0 else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
