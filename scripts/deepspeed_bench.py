#!/usr/bin/env python3
"""Step time side by side, DeepSpeed and dsrt's PyTorch front (a bench, not a test): the whole step
(forward, backward, step) and engine.step() alone, median over the steps after the first, each
engine in its own processes through `deepspeed_parity.py run`, at stage 2 and 3, with and without
CPU offload (stage 3's offload moves the parameters too), on an MLP of 2 * width^2 parameters and
change, at one or more widths and rank counts. The two engines alternate (which one goes first
flips from one pair of runs to the next) and each figure is the median over the repetitions. Both engines get the
same OMP_NUM_THREADS: --threads when given, else 1 per rank with several ranks and the default
(all cores) with one. On a shared machine the wall times move with its load; the CPU-time
columns (rank 0's process, all its threads) move less. Run by scripts/check-deepspeed.sh when
DSRT_PARITY_BENCH_WIDTH is set.

    deepspeed_bench.py [--width 1536 ...] [--ranks 1 ...] [--steps 6] [--repeat 1] [--threads N]
                       [--cases NAME ...] [--out FILE] [--flip]"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from deepspeed_parity import IN, OUT, base, run_ranks

CPU_ADAM = {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}}
TORCH_ADAM = {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01, "torch_adam": True}}
CASES = [
    ("stage2", base(2, optimizer=TORCH_ADAM)),
    ("stage3", base(3, optimizer=TORCH_ADAM)),
    ("stage2 + optimizer offload", base(2, optimizer=CPU_ADAM, zero_optimization={
        "stage": 2, "offload_optimizer": {"device": "cpu"}})),
    ("stage3 + optimizer and parameter offload", base(3, optimizer=CPU_ADAM, zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}})),
]


def parameters(width):
    # deepspeed_parity.bench_model: IN -> width -> width -> width -> OUT, i.e. two width x width
    # layers plus the input and output layers, with biases.
    return 2 * width * width + (IN + 3 + OUT) * width + OUT


def load():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return float("nan")


def run_engine(engine, config_path, steps, world, width, threads, tmp):
    """Medians over the steps after the first of one run of one engine: (whole step, engine.step()) in
    wall seconds, then the same in rank 0's process CPU seconds; or None (stderr told why)."""
    here = os.path.dirname(os.path.abspath(__file__))
    result = os.path.join(tmp, engine + ".out")
    if os.path.exists(result):
        os.remove(result)
    command = [sys.executable, os.path.join(here, "deepspeed_parity.py"), "run", engine, config_path, str(steps), result]
    env = dict(os.environ, DS_ACCELERATOR="cpu", DSRT_LOG_LEVEL="error", DSRT_PARITY_BENCH_WIDTH=str(width))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    elif world > 1:
        env["OMP_NUM_THREADS"] = "1"  # the ranks share the cores
    failed = run_ranks(engine, command, world, env, 1800, 2000, forward=("DSRT_PARITY_BENCH_WIDTH",))
    if failed:
        sys.stderr.write("%s failed:\n%s\n" % (engine, failed))
        return None
    with open(result) as f:
        data = json.load(f)
    return tuple(statistics.median(data[key][1:]) for key in ("step_seconds", "engine_step_seconds",
                                                                "step_cpu_seconds", "engine_step_cpu_seconds"))


def bench(widths, ranks, steps, repeat, threads, selected, out, flip_first=False):
    header = ["| ranks | parameters | case | whole step DeepSpeed / dsrt (s) | ratio | engine.step() DeepSpeed / "
              "dsrt (s) | ratio | CPU s: whole step ratio | CPU s: engine.step() ratio | load (1 min) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines = list(header)
    print("\n".join(header), flush=True)
    ok = True
    runs_started = 1 if flip_first else 0  # --flip: dsrt goes first in the first pair
    with tempfile.TemporaryDirectory() as tmp:
        for width in widths:
            for world in ranks:
                for name, config in CASES:
                    if selected and name not in selected:
                        continue
                    path = os.path.join(tmp, "bench.json")
                    with open(path, "w") as f:
                        json.dump(config, f)
                    runs = {"deepspeed": [], "dsrt": []}
                    loads = [load()]
                    for _ in range(repeat):
                        # Which engine goes first flips from one pair of runs to the next.
                        flip = runs_started % 2
                        runs_started += 1
                        order = ("dsrt", "deepspeed") if flip else ("deepspeed", "dsrt")
                        for engine in order:
                            timing = run_engine(engine, path, steps, world, width, threads, tmp)
                            if timing is not None:
                                runs[engine].append(timing)
                        loads.append(load())
                    label = "| %d | %.1fM | %s |" % (world, parameters(width) / 1e6, name)
                    if not runs["deepspeed"] or not runs["dsrt"]:
                        lines.append(label + " failed | - | failed | - | - | - | - |")
                        ok = False
                    else:
                        dw, ds, dcw, dcs = (statistics.median(r[i] for r in runs["deepspeed"]) for i in range(4))
                        tw, ts, tcw, tcs = (statistics.median(r[i] for r in runs["dsrt"]) for i in range(4))
                        lines.append(label + " %.3f / %.3f | %.2f | %.4f / %.4f | %.2f | %.3f / %.3f = %.2f | "
                                     "%.4f / %.4f = %.2f | %.1f-%.1f |" % (
                                         dw, tw, tw / dw, ds, ts, ts / ds, dcw, tcw, tcw / dcw, dcs, tcs, tcs / dcs,
                                         min(loads), max(loads)))
                    print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    sys.stdout.write("\n" + text)
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, nargs="+", default=[1536])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine and case (alternating order)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every process (both engines)")
    parser.add_argument("--cases", nargs="*", help="a subset of: " + ", ".join(name for name, _ in CASES))
    parser.add_argument("--out")
    parser.add_argument("--flip", action="store_true", help="dsrt first in the first pair (a second invocation "
                        "with --flip evens out the order)")
    args = parser.parse_args()
    return 0 if bench(args.width, args.ranks, args.steps, args.repeat, args.threads, args.cases, args.out,
                      args.flip) else 1


if __name__ == "__main__":
    sys.exit(main())
