#!/usr/bin/env python3
"""dsrt's PyTorch front on one device, every stage and offload mode (a smoke run, not a test): a
small residual-MLP language model, bf16, AdamW, clipping, 6 steps. The stages and offload modes are
the same training bit for bit, so every case must give the first case's losses exactly; the exit
status is 1 when one differs or fails.

    PYTHONPATH=build/python python3 scripts/gpu_front_smoke.py [--device cuda:0|cpu]"""
import argparse
import shutil
import sys
import tempfile
import time
import traceback

import torch

import dsrt.deepspeed as deepspeed

VOCAB = 512


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class LanguageModel(torch.nn.Module):
    def __init__(self, width=256, layers=4):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, width)
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(layers)])
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, ids):
        x = self.embedding(ids)
        for block in self.blocks:
            x = block(x)
        return torch.nn.functional.cross_entropy(self.head(x).float().view(-1, VOCAB), ids.view(-1))


def config(stage, **zero):
    return {"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "zero_optimization": dict(stage=stage, **zero), "steps_per_print": 1000000}


def train(device, ds_config, batches):
    torch.manual_seed(0)
    model = LanguageModel().to(device)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    losses = []
    for ids in batches:
        loss = engine(ids.to(device))
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(parser.parse_args().device)
    nvme = tempfile.mkdtemp(prefix="dsrt-smoke-nvme-")
    cpu, on_nvme = {"device": "cpu"}, {"device": "nvme", "nvme_path": nvme}
    cases = [("stage2", config(2)), ("stage3", config(3)),
             ("stage2 + optimizer offload", config(2, offload_optimizer=cpu)),
             ("stage3 + optimizer and parameter offload", config(3, offload_optimizer=cpu, offload_param=cpu)),
             ("stage3 + optimizer and parameters on NVMe", config(3, offload_optimizer=on_nvme,
                                                                   offload_param=on_nvme))]
    batches = [torch.randint(0, VOCAB, (8, 64), generator=torch.Generator().manual_seed(i)) for i in range(6)]
    first, failed = None, False
    try:
        for name, ds_config in cases:
            start = time.time()
            try:
                losses = train(device, ds_config, batches)
            except Exception:  # report every case, then fail
                print("FAIL %s on %s" % (name, device), flush=True)
                traceback.print_exc()
                failed = True
                continue
            same = first is None or losses == first
            first = first or losses
            failed = failed or not same
            print("%s %s on %s: losses %s (%.3f s)" % ("ok  " if same else "DIFF", name, device,
                                                       " ".join("%.4f" % x for x in losses), time.time() - start),
                  flush=True)
    finally:
        shutil.rmtree(nvme, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
