#!/usr/bin/env python3
"""Step time side by side, DeepSpeed and dsrt's PyTorch front (a bench, not a test): the whole step
(forward, backward, step) and engine.step() alone, median over the steps after the first, each
engine in its own process through `deepspeed_parity.py run`, one rank, stage 2 and 3, with and
without CPU offload, on an MLP of 3 * width^2 parameters. Run by scripts/check-deepspeed.sh when
DSRT_PARITY_BENCH_WIDTH is set.

    deepspeed_bench.py [--width 1536] [--steps 6] [--out FILE]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from deepspeed_parity import IN, OUT, base, free_port


def bench(width, steps, out):
    """Step time side by side (a bench, not a test): the whole step (forward, backward, step) and
    engine.step() alone, median over the steps after the first, DeepSpeed and dsrt alternating,
    one rank, stage 2 and 3, with and without CPU offload, on a bench_model(width) MLP."""
    here = os.path.dirname(os.path.abspath(__file__))
    cpu_adam = {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}}
    cases = [
        ("stage2", base(2, optimizer={"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01,
                                                                  "torch_adam": True}})),
        ("stage3", base(3, optimizer={"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01,
                                                                  "torch_adam": True}})),
        ("stage2 + optimizer offload", base(2, optimizer=cpu_adam, zero_optimization={
            "stage": 2, "offload_optimizer": {"device": "cpu"}})),
        ("stage3 + optimizer and parameter offload", base(3, optimizer=cpu_adam, zero_optimization={
            "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}})),
    ]
    params = 3 * width * width + (IN + 2 + OUT) * width + OUT
    lines = ["| case (%.1fM parameters, 1 rank) | whole step DeepSpeed / dsrt (s) | ratio | engine.step() "
             "DeepSpeed / dsrt (s) | ratio |" % (params / 1e6), "| --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in cases:
            path = os.path.join(tmp, "bench.json")
            with open(path, "w") as f:
                json.dump(config, f)
            medians = {}
            for engine in ("deepspeed", "dsrt"):
                result = os.path.join(tmp, engine + ".out")
                env = dict(os.environ, DS_ACCELERATOR="cpu", DSRT_LOG_LEVEL="error", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                           LOCAL_WORLD_SIZE="1", DSRT_PARITY_BENCH_WIDTH=str(width))
                proc = subprocess.run([sys.executable, os.path.join(here, "deepspeed_parity.py"), "run", engine, path,
                                       str(steps), result], env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    sys.stderr.write("%s / %s failed:\n%s\n" % (name, engine, proc.stderr[-2000:]))
                    break
                with open(result) as f:
                    data = json.load(f)
                medians[engine] = (statistics.median(data["step_seconds"][1:]),
                                   statistics.median(data["engine_step_seconds"][1:]))
            if len(medians) < 2:
                lines.append("| %s | failed | - | failed | - |" % name)
            else:
                (dw, ds), (tw, ts) = medians["deepspeed"], medians["dsrt"]
                lines.append("| %s | %.3f / %.3f | %.2f | %.4f / %.4f | %.2f |" % (name, dw, tw, tw / dw, ds, ts, ts / ds))
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    sys.stdout.write("\n" + text)
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1536)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out")
    args = parser.parse_args()
    return 0 if bench(args.width, args.steps, args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
