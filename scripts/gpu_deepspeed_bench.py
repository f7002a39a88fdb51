#!/usr/bin/env python3
"""dsrt's PyTorch front against the real DeepSpeed on one GPT-2-class training job (a bench, not a
test): the same config file, the same model initialisation and the same token batches, each engine
in its own process, N warmup steps then the median step time (forward + backward + step, the device
synchronised), side by side with the ratio DeepSpeed time / dsrt time (above 1: dsrt is faster).

Cases (bf16, AdamW, gradient_clipping 1.0, one rank):
  zero2-offload  ZeRO-2, offload_optimizer cpu
  zero3-offload  ZeRO-3, offload_optimizer cpu + offload_param cpu
  zero3-nvme     ZeRO-3, offload_optimizer nvme + offload_param nvme (DeepSpeed's side needs its
                 async_io op: when it does not build, the row says why)

With --profile each process then runs --profile-steps more steps under torch.profiler (device
activities) and reports, from the trace: the time of every host<->device copy (HtoD + DtoH), the
part of it that overlaps a running GPU kernel (hidden fraction = overlapped / total), and the time
during which a copy runs while no kernel does (exposed), per step and as a fraction of the step's
wall time. CUPTI records the copies and kernels of the whole process, dsrt's own included.

    gpu_deepspeed_bench.py [--cases zero3-offload ...] [--layers 12 --hidden 768 --heads 12
                           --seq 1024 --batch 8] [--warmup 3 --steps 6] [--repeat 1] [--profile]
                           [--nvme-path DIR] [--deadline-s S] [--out FILE]
    gpu_deepspeed_bench.py --self-check          (the interval arithmetic against brute force)

The model is transformers' GPT2LMHeadModel built from a GPT2Config (no download; GPT-2 small by
default), or an equivalent plain-torch GPT when transformers is missing. dsrt is imported as
`import dsrt.deepspeed as deepspeed` (PYTHONPATH must reach dsrt's Python package), DeepSpeed as
`import deepspeed`, launched without its launcher (the process sets MASTER_ADDR/PORT, RANK,
WORLD_SIZE and LOCAL_RANK itself; nccl on a GPU, gloo on the CPU). Without a GPU it runs on the
CPU (DeepSpeed with DS_ACCELERATOR=cpu): use small sizes there."""
import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "zero2-offload": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    "zero3-offload": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                      "offload_param": {"device": "cpu", "pin_memory": True}},
    "zero3-nvme": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "NVME_PATH", "pin_memory": True},
                   "offload_param": {"device": "nvme", "nvme_path": "NVME_PATH", "pin_memory": True}},
}
ORDER = ["zero3-offload", "zero2-offload", "zero3-nvme"]
ENGINES = ("dsrt", "deepspeed")


# ---------------------------------------------------------------------------------------------
# Interval arithmetic on trace events: (start, end) pairs in one time unit.

def merge(intervals):
    """The union of intervals as sorted, disjoint (start, end) pairs (empty ones dropped)."""
    out = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def overlap_with(interval, union):
    """Length of interval's intersection with a merged union (sorted, disjoint)."""
    start, end = interval
    total = 0.0
    lo, hi = 0, len(union)
    while lo < hi:  # the first union piece that ends after start
        mid = (lo + hi) // 2
        if union[mid][1] <= start:
            lo = mid + 1
        else:
            hi = mid
    for s, e in union[lo:]:
        if s >= end:
            break
        total += min(e, end) - max(s, start)
    return total


def overlap_figures(copies, kernels):
    """copies, kernels: (start, end) intervals. Returns a dict: copy_total (the sum of the copies'
    durations), copy_hidden (the part of each copy during which some kernel runs, summed over the
    copies), hidden_fraction (copy_hidden / copy_total, None without copies), copy_exposed (the
    length of the time during which some copy runs and no kernel does) and kernel_busy (the length
    of the kernels' union)."""
    kernel_union = merge(kernels)
    copy_total = sum(max(0.0, e - s) for s, e in copies)
    copy_hidden = sum(overlap_with((s, e), kernel_union) for s, e in copies if e > s)
    copy_union = merge(copies)
    covered = sum(overlap_with(piece, kernel_union) for piece in copy_union)
    exposed = sum(e - s for s, e in copy_union) - covered
    return {"copy_total": copy_total, "copy_hidden": copy_hidden,
            "hidden_fraction": copy_hidden / copy_total if copy_total > 0 else None,
            "copy_exposed": exposed, "kernel_busy": sum(e - s for s, e in kernel_union)}


def _brute_force(copies, kernels, tick):
    """The same figures on a grid of step `tick` (integer endpoints), for the self-check."""
    lo = min(s for s, _ in copies + kernels)
    hi = max(e for _, e in copies + kernels)
    in_any = lambda t, ivs: any(s <= t < e for s, e in ivs)
    hidden = exposed = busy = 0.0
    t = lo
    while t < hi:
        k = in_any(t + tick / 2, kernels)
        busy += tick if k else 0.0
        hidden += tick * sum(1 for s, e in copies if s <= t + tick / 2 < e) if k else 0.0
        exposed += tick if (not k and in_any(t + tick / 2, copies)) else 0.0
        t += tick
    return hidden, exposed, busy


def self_check(trials=300):
    """overlap_figures against a brute-force count on random integer intervals; raises on a mismatch."""
    rng = random.Random(1234)
    cases = [([(0, 10)], [(2, 4), (3, 6), (8, 12)]), ([(0, 5), (3, 9)], [(4, 7)]), ([(1, 2)], []),
             ([], [(0, 3)]), ([(0, 4), (0, 4)], [(1, 3)]), ([(5, 5), (2, 6)], [(6, 9)])]
    for _ in range(trials):
        copies = [(a, a + rng.randint(0, 15)) for a in (rng.randint(0, 60) for _ in range(rng.randint(1, 6)))]
        kernels = [(a, a + rng.randint(0, 20)) for a in (rng.randint(0, 60) for _ in range(rng.randint(0, 8)))]
        cases.append((copies, kernels))
    for copies, kernels in cases:
        got = overlap_figures(copies, kernels)
        assert got["copy_total"] == sum(e - s for s, e in copies), (copies, got)
        if not copies or not kernels:
            want_hidden = 0.0
            want_exposed = sum(e - s for s, e in merge(copies)) if not kernels else 0.0
            want_busy = sum(e - s for s, e in merge(kernels))
        else:
            want_hidden, want_exposed, want_busy = _brute_force(copies, kernels, 1)
        for key, want in (("copy_hidden", want_hidden), ("copy_exposed", want_exposed), ("kernel_busy", want_busy)):
            assert abs(got[key] - want) < 1e-9, "%s: %s vs %s for copies %s kernels %s" % (key, got[key], want,
                                                                                       copies, kernels)
        if got["copy_total"] > 0:
            assert 0.0 <= got["hidden_fraction"] <= 1.0
    return len(cases)


def trace_figures(trace_path):
    """overlap_figures over a torch.profiler chrome trace: HtoD and DtoH copies against kernels, in
    milliseconds; plus the counts of each."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    copies, kernels = [], []
    counts = {"HtoD": 0, "DtoH": 0, "kernel": 0, "HtoD_bytes": 0, "DtoH_bytes": 0}
    for ev in events:
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        span = (float(ev["ts"]) / 1e3, (float(ev["ts"]) + float(ev["dur"])) / 1e3)  # us -> ms
        if cat == "kernel":
            kernels.append(span)
            counts["kernel"] += 1
        elif cat == "gpu_memcpy":
            for kind in ("HtoD", "DtoH"):
                if kind in name:
                    copies.append(span)
                    counts[kind] += 1
                    counts[kind + "_bytes"] += int((ev.get("args") or {}).get("bytes", 0))
    figures = overlap_figures(copies, kernels)
    figures["counts"] = counts
    return figures


# ---------------------------------------------------------------------------------------------
# The model (the same in both processes: same seed, same code)

def build_model(args):
    import torch

    torch.manual_seed(args.seed)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return PlainGPT.build(args), "plain-torch GPT (transformers missing)"
    config = GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=args.hidden, n_layer=args.layers,
                        n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    import transformers

    return GPT2LMHeadModel(config), "transformers %s GPT2LMHeadModel" % transformers.__version__


class PlainGPT:
    """A GPT-2-shaped model in plain torch (pre-norm blocks, causal attention, GELU MLP, tied
    embedding head), used when transformers is missing."""

    @staticmethod
    def build(args):
        import torch
        import torch.nn.functional as F

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_1 = torch.nn.LayerNorm(args.hidden)
                self.attn = torch.nn.Linear(args.hidden, 3 * args.hidden)
                self.proj = torch.nn.Linear(args.hidden, args.hidden)
                self.ln_2 = torch.nn.LayerNorm(args.hidden)
                self.fc = torch.nn.Linear(args.hidden, 4 * args.hidden)
                self.fc_out = torch.nn.Linear(4 * args.hidden, args.hidden)

            def forward(self, x):
                b, t, c = x.shape
                q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
                shape = (b, t, args.heads, c // args.heads)
                q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
                x = x + self.proj(y)
                return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

        class GPT(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = torch.nn.Embedding(args.vocab, args.hidden)
                self.wpe = torch.nn.Embedding(args.seq, args.hidden)
                self.h = torch.nn.ModuleList(Block() for _ in range(args.layers))
                self.ln_f = torch.nn.LayerNorm(args.hidden)
                self.lm_head = torch.nn.Linear(args.hidden, args.vocab, bias=False)
                self.lm_head.weight = self.wte.weight
                for name, p in self.named_parameters():
                    if p.dim() == 2:
                        torch.nn.init.normal_(p, std=0.02)

            def forward(self, input_ids, labels=None):
                pos = torch.arange(input_ids.shape[1], device=input_ids.device)
                x = self.wte(input_ids) + self.wpe(pos)
                for block in self.h:
                    x = block(x)
                logits = self.lm_head(self.ln_f(x))
                return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                       labels[:, 1:].reshape(-1))

        return GPT()


# ---------------------------------------------------------------------------------------------
# One engine, one case (a child process)

def child(args):
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())), ("RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    result = {"engine": args.engine, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
              "torch": torch.__version__}
    with open(args.config) as f:
        uses_nvme = "nvme" in f.read()
    if args.engine == "deepspeed":
        try:  # DeepSpeed's op probes import distutils, which Python 3.12 gets from setuptools
            import setuptools  # noqa: F401
        except ImportError:
            pass
        import deepspeed

        result["version"] = deepspeed.__version__
        if uses_nvme:
            reason = deepspeed_aio_missing()
            if reason:
                result["skipped"] = reason
                return result
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    else:
        import dsrt.deepspeed as deepspeed  # one rank: dsrt's engine needs no process group

        result["version"] = "dsrt %s" % deepspeed.dsrt_version
    model, result["model"] = build_model(args)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    model = model.to(device)
    generator = torch.Generator().manual_seed(args.seed + 1)
    total = args.warmup + args.steps + (args.profile_steps if args.profile else 0)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator) for _ in range(total)]
    t0 = time.perf_counter()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=args.config)
    result["init_s"] = time.perf_counter() - t0
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(ids):
        ids = ids.to(device, non_blocking=False)
        out = engine(ids, labels=ids)
        loss = out.loss if hasattr(out, "loss") else out
        engine.backward(loss)
        engine.step()
        return loss

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        loss = step(batches[i])
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach().float().item()))
    result["step_s"] = times
    result["losses"] = losses
    result["median_step_s"] = statistics.median(times[args.warmup:])
    result["tokens_per_s"] = args.batch * args.seq / result["median_step_s"]
    if cuda:
        result["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        first = args.warmup + args.steps
        with profile(activities=activities) as prof:
            sync()
            t0 = time.perf_counter()
            for i in range(first, total):
                step(batches[i])
            sync()
            wall = time.perf_counter() - t0
        trace = args.result + ".trace.json"
        prof.export_chrome_trace(trace)
        figures = trace_figures(trace)
        if not args.keep_trace:
            os.remove(trace)
        figures["wall_ms"] = wall * 1e3
        figures["steps"] = args.profile_steps
        result["profile"] = figures
    return result


def calibrate(args):
    """The profiler and the interval arithmetic on a known case: a 256 MiB pinned host-to-device copy
    on a side stream while matmuls run on the default stream (expected: almost all hidden), then the
    same copy on the default stream after them (expected: none hidden)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    device = torch.device("cuda", 0)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    host = torch.empty(64 * 2**20, dtype=torch.float32).pin_memory()
    dst = torch.empty(host.shape, dtype=host.dtype, device=device)
    side = torch.cuda.Stream()
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    result = {"engine": "calibrate", "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, stream in (("side_stream", side), ("same_stream", torch.cuda.current_stream())):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                a @ a
            with torch.cuda.stream(stream):
                dst.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
        trace = "%s.%s.trace.json" % (args.result, name)
        prof.export_chrome_trace(trace)
        result[name] = trace_figures(trace)
        os.remove(trace)
    return result


def deepspeed_aio_missing():
    """Why DeepSpeed's async_io op cannot be used here, or None when it loads."""
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder

        builder = AsyncIOBuilder()
        if not builder.is_compatible(verbose=True):
            return "DeepSpeed's async_io op is not compatible here (libaio headers/library not found)"
        builder.load(verbose=False)
    except Exception as exc:  # a failed JIT build: report and skip the row
        return "DeepSpeed's async_io op did not build: %s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200])
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The parent: configs, alternating runs, the table

def make_config(case, args, nvme_dir):
    zero = json.loads(json.dumps(CASES[case]).replace("NVME_PATH", nvme_dir))
    config = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                    "weight_decay": 0.01}},
        "zero_optimization": zero,
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }
    if "nvme" in case:
        config["aio"] = {"block_size": 1048576, "queue_depth": 8, "single_submit": False, "overlap_events": True}
    return config


def run_child(engine, case, config_path, args, tmp, time_left):
    result_path = os.path.join(tmp, "%s.%s.json" % (case, engine))
    if os.path.exists(result_path):
        os.remove(result_path)
    command = [sys.executable, os.path.abspath(__file__), "--engine", engine, "--config", config_path,
               "--result", result_path]
    for key in ("layers", "hidden", "heads", "seq", "batch", "vocab", "warmup", "steps", "profile_steps", "seed"):
        command += ["--" + key.replace("_", "-"), str(getattr(args, key))]
    command += ["--profile"] * args.profile + ["--cpu"] * args.cpu + ["--keep-trace"] * args.keep_trace
    env = dict(os.environ, DSRT_LOG_LEVEL=os.environ.get("DSRT_LOG_LEVEL", "error"), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    if args.cpu:
        env["DS_ACCELERATOR"] = "cpu"
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    log_path = os.path.join(args.log_dir or tmp, "%s.%s.log" % (case, engine))
    limit = max(1, min(args.timeout, time_left))
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout after %d s" % limit
    took = time.perf_counter() - t0
    if rc == 0 and os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
        result["process_s"] = took
        return result
    with open(log_path) as f:
        tail = [line.rstrip() for line in f.readlines()[-40:]]
    error = next((line for line in reversed(tail) if "Error" in line or "error" in line), tail[-1] if tail else "")
    return {"engine": engine, "failed": "rc %s: %s (log %s)" % (rc, error.strip()[:300], log_path), "process_s": took}


def fmt(value, spec, scale=1.0):
    return "-" if value is None else format(value * scale, spec)


def per_step(result, key):
    prof = result.get("profile") if result else None
    return prof[key] / prof["steps"] if prof else None


def hidden(result):
    prof = result.get("profile") if result else None
    return prof["hidden_fraction"] if prof else None


def exposed_fraction(result):
    prof = result.get("profile") if result else None
    return prof["copy_exposed"] / prof["wall_ms"] if prof and prof["wall_ms"] > 0 else None


def table(rows, args):
    lines = ["| case | DeepSpeed step (ms) | dsrt step (ms) | ratio DeepSpeed / dsrt | DeepSpeed tokens/s | "
             "dsrt tokens/s | first-step loss DeepSpeed / dsrt | last loss DeepSpeed / dsrt |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    for case, runs in rows:
        med = {}
        for engine in ENGINES:
            ok = [r for r in runs[engine] if "median_step_s" in r]
            med[engine] = statistics.median(r["median_step_s"] for r in ok) if ok else None
            for r in runs[engine]:
                if "skipped" in r:
                    notes.append("%s, %s: not run: %s" % (case, engine, r["skipped"]))
                elif "failed" in r:
                    notes.append("%s, %s: failed: %s" % (case, engine, r["failed"]))
        first = {e: next((r for r in runs[e] if "losses" in r), None) for e in ENGINES}
        ratio = med["deepspeed"] / med["dsrt"] if med["deepspeed"] and med["dsrt"] else None
        tokens = args.batch * args.seq
        lines.append("| %s | %s | %s | %s | %s | %s | %s / %s | %s / %s |" % (
            case, fmt(med["deepspeed"], ".1f", 1e3), fmt(med["dsrt"], ".1f", 1e3), fmt(ratio, ".2f"),
            fmt(tokens / med["deepspeed"] if med["deepspeed"] else None, ".0f"),
            fmt(tokens / med["dsrt"] if med["dsrt"] else None, ".0f"),
            fmt(first["deepspeed"] and first["deepspeed"]["losses"][0], ".4f"),
            fmt(first["dsrt"] and first["dsrt"]["losses"][0], ".4f"),
            fmt(first["deepspeed"] and first["deepspeed"]["losses"][-1], ".4f"),
            fmt(first["dsrt"] and first["dsrt"]["losses"][-1], ".4f")))
    if args.profile:
        lines += ["", "Offload transfers (HtoD + DtoH copies) against GPU kernels, from the profiled steps:", "",
                  "| case | engine | copies per step (ms) | hidden under kernels | exposed per step (ms) | "
                  "exposed / step wall | kernel busy per step (ms) | step wall (ms, profiled) | copies HtoD / DtoH "
                  "/ kernels | MB per step HtoD / DtoH |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for case, runs in rows:
            for engine in ENGINES:
                r = next((r for r in runs[engine] if "profile" in r), None)
                if r is None:
                    continue
                p = r["profile"]
                lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d / %d / %d | %.0f / %.0f |" % (
                    case, engine, fmt(per_step(r, "copy_total"), ".2f"),
                    fmt(hidden(r), ".1%"), fmt(per_step(r, "copy_exposed"), ".2f"), fmt(exposed_fraction(r), ".1%"),
                    fmt(per_step(r, "kernel_busy"), ".2f"), fmt(per_step(r, "wall_ms"), ".1f"),
                    p["counts"]["HtoD"], p["counts"]["DtoH"], p["counts"]["kernel"],
                    p["counts"].get("HtoD_bytes", 0) / 1e6 / p["steps"], p["counts"].get("DtoH_bytes", 0) / 1e6 / p["steps"]))
    return lines + ([""] + ["- " + n for n in notes] if notes else [])


def parent(args):
    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="gpu-ds-bench-")
    nvme_dir = args.nvme_path or os.path.join(tmp, "nvme")
    os.makedirs(nvme_dir, exist_ok=True)
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    cases = args.cases or ORDER
    header = ("model: %d layers, hidden %d, %d heads, seq %d, batch %d, vocab %d; %d warmup + %d timed steps "
              "(median), repeat %d%s" % (args.layers, args.hidden, args.heads, args.seq, args.batch, args.vocab,
                                          args.warmup, args.steps, args.repeat,
                                          ", %d profiled steps" % args.profile_steps if args.profile else ""))
    print(header, flush=True)
    rows = []
    pair = 0
    device = "unknown"
    check = []
    if args.profile and not args.cpu:
        r = run_child("calibrate", "profiler", "-", args, tmp, 120)
        if "side_stream" in r:
            check = ["profiler check (a 256 MiB pinned HtoD copy against bf16 matmuls): hidden %s on a side stream "
                     "(expected near 100%%), %s on the same stream after them (expected 0%%); copy %.2f ms" % (
                         fmt(r["side_stream"]["hidden_fraction"], ".1%"), fmt(r["same_stream"]["hidden_fraction"], ".1%"),
                         r["side_stream"]["copy_total"])]
        else:
            check = ["profiler check: %s" % (r.get("failed") or r)]
        print(check[0], flush=True)
    for case in cases:
        config_path = os.path.join(tmp, case + ".json")
        with open(config_path, "w") as f:
            json.dump(make_config(case, args, os.path.join(nvme_dir, case)), f, indent=1)
        os.makedirs(os.path.join(nvme_dir, case), exist_ok=True)
        runs = {e: [] for e in ENGINES}
        for _ in range(args.repeat):
            order = ENGINES if pair % 2 == 0 else ENGINES[::-1]
            pair += 1
            for engine in order:
                left = args.deadline_s - (time.perf_counter() - start) if args.deadline_s else args.timeout
                if left < 15:
                    runs[engine].append({"engine": engine, "skipped": "the bench's --deadline-s was spent"})
                    continue
                r = run_child(engine, case, config_path, args, tmp, int(left))
                runs[engine].append(r)
                summary = r.get("skipped") or r.get("failed") or "%.1f ms/step, losses %s, init %.1f s, process %.1f s" % (
                    r["median_step_s"] * 1e3, " ".join("%.4f" % x for x in r["losses"][:2] + r["losses"][-1:]),
                    r["init_s"], r["process_s"])
                if "profile" in r:
                    summary += ", hidden %s" % fmt(hidden(r), ".1%")
                print("%s %s: %s" % (case, engine, summary), flush=True)
                if "device" in r:
                    device = "%s, torch %s, %s" % (r["device"], r["torch"], r.get("model", ""))
                if args.out:
                    with open(args.out + ".json", "w") as f:
                        json.dump({"args": vars(args), "rows": rows + [(case, runs)]}, f, indent=1)
        rows.append((case, runs))
    lines = ["", header, "device: %s" % device] + check + [""] + table(rows, args)
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(args.out + ".json", "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="*", choices=sorted(CASES), help="default: %s" % " ".join(ORDER))
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeat", type=int, default=1, help="pairs of runs per case (engines alternate first)")
    p.add_argument("--profile", action="store_true", help="then --profile-steps steps under torch.profiler")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--keep-trace", action="store_true")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--cpu", action="store_true", help="run on the CPU even where a GPU is visible")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for both engines (default: unset)")
    p.add_argument("--nvme-path", default="", help="folder for the NVMe cases (default: a temporary folder)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per engine process")
    p.add_argument("--deadline-s", type=float, default=0, help="stop starting runs after this many seconds")
    p.add_argument("--log-dir", default="", help="keep each process's log here")
    p.add_argument("--out", default="", help="also write the table here (and the raw figures to OUT.json)")
    p.add_argument("--self-check", action="store_true", help="check the interval arithmetic and exit")
    p.add_argument("--engine", choices=ENGINES + ("calibrate",), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.self_check:
        print("interval arithmetic: %d cases agree with brute force" % self_check())
        return 0
    if args.engine:
        result = calibrate(args) if args.engine == "calibrate" else child(args)
        with open(args.result, "w") as f:
            json.dump(result, f)
        return 0
    if not args.cpu:
        try:
            import torch

            args.cpu = not torch.cuda.is_available()
        except ImportError:
            args.cpu = True
    self_check(50)
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
