"""A DeepSpeed training script in its usual shape, ported by changing one import.

It follows the classic script layout: init_distributed(), argparse with add_config_arguments(),
initialize(args=..., model=..., model_parameters=..., training_data=...), load_checkpoint() to
resume when a checkpoint exists, then engine(x) / engine.backward(loss) / engine.step() over the
returned dataloader, and save_checkpoint() at the end. The config it is run with by default is
the seeds' classifier config (ZeRO-3, fp16, parameters and optimizer offloaded to the CPU, WarmupLR).

    python3 deepspeed_script.py --deepspeed --deepspeed_config ds_config_classifier.json
    mpirun -np 2 python3 deepspeed_script.py --deepspeed --deepspeed_config ...
    torchrun --nproc-per-node 2 deepspeed_script.py --deepspeed --deepspeed_config ...

Prints one line per rank: the mean loss of the first and last quarter of the steps, the global
step reached, and a checksum of the fp32 weights that every rank must agree on.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

import dsrt as deepspeed  # was: import deepspeed


def parse_arguments():
    parser = argparse.ArgumentParser(description="deepspeed training script")
    parser.add_argument("--local_rank", type=int, default=-1, help="local rank passed from distributed launcher")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint_dir", default="checkpoints")
    parser.add_argument("--compute_dtype", choices=["auto", "fp16", "bf16"], default="auto",
                        help="replace the config's fp16 by bf16 when this torch has no fp16 matmul on the CPU")
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


class Classifier(torch.nn.Module):
    def __init__(self, features, classes, hidden=64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, hidden), torch.nn.ReLU())
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.body(x))


class TeacherDataset(torch.utils.data.Dataset):
    """Random inputs labelled by a fixed random linear teacher: learnable, and the same on every rank."""

    def __init__(self, features, classes, count):
        generator = torch.Generator().manual_seed(1234)
        self.x = torch.randn(count, features, generator=generator)
        self.y = (self.x @ torch.randn(features, classes, generator=generator)).argmax(dim=1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def half_matmul_works():
    try:
        torch.ones(2, 2, dtype=torch.float16) @ torch.ones(2, 2, dtype=torch.float16)
        return True
    except RuntimeError:
        return False


def main():
    args = parse_arguments()
    deepspeed.init_distributed()
    import torch.distributed as dist

    # The config goes in through args (as DeepSpeed scripts do) unless it must be adjusted.
    config_source = {}
    if args.compute_dtype == "bf16" or (args.compute_dtype == "auto" and not half_matmul_works()):
        with open(args.deepspeed_config) as f:
            config_source = {"config": _with_bf16(json.load(f))}

    torch.manual_seed(0)
    model = Classifier(features=16, classes=4)
    dataset = TeacherDataset(features=16, classes=4, count=4096)
    engine, optimizer, training_dataloader, lr_scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=dataset, **config_source)

    load_path, client_state = engine.load_checkpoint(args.checkpoint_dir)
    first_step = client_state["step"] if client_state else 0

    engine.train()
    losses = []
    step = first_step
    for step, (data, label) in enumerate(training_dataloader, start=first_step + 1):
        data = data.to(device=engine.device, dtype=torch.float16)
        label = label.to(device=engine.device, dtype=torch.long).reshape(-1)
        outputs = engine(data)
        loss = F.cross_entropy(outputs.float(), label)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
        if step - first_step >= args.steps:
            break
    engine.save_checkpoint(args.checkpoint_dir, client_state={"step": step})

    quarter = max(1, len(losses) // 4)
    checksum = sum(float(engine.get_fp32_param(name).double().abs().sum()) for name, _ in model.named_parameters())
    sums = [None] * dist.get_world_size()
    dist.all_gather_object(sums, checksum)
    agree = all(s == sums[0] for s in sums)
    print("rank %d of %d: resumed %s, first quarter loss %.4f, last quarter loss %.4f, global step %d, "
          "weights checksum %.6f, ranks agree %s"
          % (dist.get_rank(), dist.get_world_size(), "yes" if load_path else "no",
             sum(losses[:quarter]) / quarter, sum(losses[-quarter:]) / quarter, engine.global_steps, checksum, agree))
    engine.close()
    return 0 if agree else 1


def _with_bf16(config):
    fp16 = config.pop("fp16", {})
    config["bf16"] = {"enabled": bool(fp16.get("enabled", False))}
    return config


if __name__ == "__main__":
    sys.exit(main())
