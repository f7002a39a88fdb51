#!/usr/bin/env python3
"""Checks `dsrt estimate-memory --json` against DeepSpeed's estimators, written out here from
DeepSpeed's definitions (deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs
and stage3.py estimate_zero3_model_states_mem_needs), plus the ZeRO paper's model for stages 0 and 1
and the command's exit codes and error messages.  Usage: check_estimate_memory.py PATH/TO/dsrt"""
import json
import subprocess
import sys

DSRT = sys.argv[1]
FAILURES = []


def ds_zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 4 * total_params + int(16 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def ds_zero3(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
             cpu_offload_params=True, zero_init=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def run(*args):
    proc = subprocess.run([DSRT, "estimate-memory", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def close(a, b):
    # Both sides truncate to whole bytes; allow one byte of float rounding on 1e12-scale values.
    return abs(a - b) <= max(2, 1e-12 * abs(b))


def estimates(params, world, gpn, largest=None, extra=()):
    args = ["--params", str(params), "--world-size", str(world), "--gpus-per-node", str(gpn), "--json", *extra]
    if largest is not None:
        args += ["--largest-layer-params", str(largest)]
    rc, out, err = run(*args)
    check(rc == 0, f"exit 0 for {args}: rc={rc} {err}")
    return json.loads(out)


CASES = [  # (params, world size, gpus per node, largest layer)
    (13_000_000_000, 8, 8, 325_000_000),   # DeepSpeed's documented example
    (3_000_000_000, 16, 8, 32_899_072),    # two nodes
    (123_456_789, 1, 1, 7_654_321),        # one GPU, odd sizes
    (70_000_000_000, 64, 4, 1_048_576_000),  # sixteen nodes
    (1_000_003, 3, 3, 999),
]

for params, world, gpn, largest in CASES:
    nodes = world // gpn
    data = estimates(params, world, gpn, largest)
    rows = data["configurations"]
    check(data["nodes"] == nodes, f"nodes {data['nodes']} != {nodes}")
    seen = set()
    for r in rows:
        stage, opt, par, zi = r["stage"], r["offload_optimizer"], r["offload_param"], r["zero_init"]
        seen.add((stage, opt, par, zi))
        if stage == 2 or (stage == 1 and opt == "cpu"):
            cpu, gpu = ds_zero2(params, gpn, nodes, cpu_offload=(opt == "cpu"))
            check(close(r["gpu_bytes"], gpu), f"{r}: gpu {r['gpu_bytes']} != DeepSpeed {gpu}")
            check(close(r["host_bytes"], cpu), f"{r}: host {r['host_bytes']} != DeepSpeed {cpu}")
        elif stage == 3 and "nvme" not in (opt, par):
            cpu, gpu = ds_zero3(params, largest, gpn, nodes, cpu_offload=(opt == "cpu"),
                                cpu_offload_params=(par == "cpu"), zero_init=zi)
            check(close(r["gpu_bytes"], gpu), f"{r}: gpu {r['gpu_bytes']} != DeepSpeed {gpu}")
            check(close(r["host_bytes"], cpu), f"{r}: host {r['host_bytes']} != DeepSpeed {cpu}")
            check(r["nvme_bytes"] == 0, f"{r}: nvme bytes without nvme")
        elif stage == 3:
            # NVMe takes exactly the share DeepSpeed counts on the host for the state it holds, and
            # the GPU side is DeepSpeed's figure for the same placement on the CPU.
            cpu_same, gpu_same = ds_zero3(params, largest, gpn, nodes, cpu_offload=True,
                                          cpu_offload_params=(par != "none"), zero_init=True)
            check(close(r["gpu_bytes"], gpu_same), f"{r}: gpu {r['gpu_bytes']} != DeepSpeed cpu-offload {gpu_same}")
            nvme_factor = (16 if opt == "nvme" else 0) + (2 if par == "nvme" else 0)
            host_factor = (16 if opt == "cpu" else 0) + (2 if par == "cpu" else 0)
            check(close(r["nvme_bytes"], int(params * nvme_factor / nodes)), f"{r}: nvme bytes")
            if zi:
                check(close(r["host_bytes"] + r["nvme_bytes"] * 1.5, cpu_same),
                      f"{r}: host + 1.5*nvme {r['host_bytes']}+{r['nvme_bytes']} != DeepSpeed host {cpu_same}")
                check(close(r["host_bytes"], int(params * host_factor / nodes * 1.5)), f"{r}: host bytes")
        elif stage == 1:  # ZeRO paper: 2Ψ + 2Ψ + 12Ψ/W
            check(close(r["gpu_bytes"], 4 * params + int(12 * params / world)), f"{r}: stage-1 gpu")
        elif stage == 0:  # ZeRO paper: (2 + 2 + 12)Ψ
            check(close(r["gpu_bytes"], 16 * params), f"{r}: stage-0 gpu")
            check(close(r["host_bytes"], int(params * 4 * gpn * 1.5)), f"{r}: stage-0 host")
    for combo in [(0, "none", "none", True), (1, "cpu", "none", True), (1, "none", "none", True),
                  (2, "cpu", "none", True), (2, "none", "none", True), (3, "cpu", "cpu", True),
                  (3, "cpu", "cpu", False), (3, "cpu", "none", True), (3, "none", "none", False),
                  (3, "nvme", "nvme", True), (3, "nvme", "cpu", True)]:
        check(combo in seen, f"configuration {combo} missing for {params} params")

# DeepSpeed's documented figures for its 13B example, as it prints them (GB = 2**30 bytes).
doc = {(r["offload_optimizer"], r["offload_param"], r["zero_init"]): r
       for r in estimates(13e9, 8, 8, 325e6, ["--stage", "3"])["configurations"]}
for (opt, par, zi), (cpu_gb, gpu_gb) in {("cpu", "cpu", True): (326.90, 1.21), ("cpu", "cpu", False): (581.15, 1.21),
                                         ("none", "none", True): (14.53, 28.45)}.items():
    r = doc[(opt, par, zi)]
    check(abs(r["host_bytes"] / 2**30 - cpu_gb) < 0.006, f"13B doc example host {r['host_bytes'] / 2**30:.2f} != {cpu_gb}")
    check(abs(r["gpu_bytes"] / 2**30 - gpu_gb) < 0.006, f"13B doc example gpu {r['gpu_bytes'] / 2**30:.2f} != {gpu_gb}")

# Suffixes: 7B == 7e9 == 7000000000.
a = estimates("7B", 4, 4, "100M")
b = estimates("7000000000", 4, 4, "1e8")
check(a["configurations"] == b["configurations"], "7B/100M suffixes give the same figures as the plain numbers")

# Filters: one stage and one placement.
rows = estimates(1e9, 2, 2, None, ["--stage", "2", "--offload-optimizer", "cpu"])["configurations"]
check(len(rows) == 1 and rows[0]["stage"] == 2 and rows[0]["offload_optimizer"] == "cpu", f"filtered rows {rows}")

# --gpu-memory: a fit line, and exit 1 when nothing shown fits.
rc, out, _ = run("--params", "7B", "--world-size", "8", "--gpu-memory", "80G")
check(rc == 0 and "Fits a 80.00 GiB GPU" in out and "stage 2 + offload_optimizer=cpu" in out, f"fit line: rc={rc}\n{out}")
check("stage 0" not in out.split("Fits a")[1], "stage 0 (104 GiB for 7B) must not fit 80G")
rc, out, _ = run("--params", "7B", "--stage", "0", "--gpu-memory", "80G")
check(rc == 1 and "none of the configurations shown" in out, f"nothing fits -> exit 1: rc={rc}\n{out}")
fits = estimates(7e9, 8, 8, None, ["--gpu-memory", "40G"])["configurations"]
for r in fits:
    check(r["fits"] == (r["gpu_bytes"] <= 40 * 2**30), f"fits flag for {r}")

# Frozen parameters (--trainable-params T): the figures for T trainable parameters plus 2 bytes
# per frozen parameter on the GPU (/W at stage 3) and, where the host figure is the fp32 loading
# copy (no optimizer offload at stages 0-2, stage 3 without zero_init), 4 bytes per frozen
# parameter per GPU of the host, times 1.5. With offload_param at stage 3 the frozen shards move
# instead: 2 bytes per frozen parameter per node to the host (times 1.5) or to NVMe, none on the GPU.
for params, trainable, world, gpn, largest in [(7_000_000_000, 40_000_000, 8, 8, 32_000_000),
                                               (1_000_003, 1_001, 3, 3, 999)]:
    frozen = params - trainable
    full = {(r["stage"], r["offload_optimizer"], r["offload_param"], r["zero_init"]): r
            for r in estimates(params, world, gpn, largest, ["--trainable-params", str(trainable)])["configurations"]}
    base = {(r["stage"], r["offload_optimizer"], r["offload_param"], r["zero_init"]): r
            for r in estimates(trainable, world, gpn, largest)["configurations"]}
    check(set(full) == set(base), "the same configurations with frozen parameters")
    for key, r in full.items():
        stage, opt, par, zi = key
        nodes = world // gpn
        nvme_extra = 0
        if stage == 3 and par != "none":
            gpu_extra = 0
            host_extra = int(2 * frozen / nodes * 1.5) if par == "cpu" else 0
            nvme_extra = int(2 * frozen / nodes) if par == "nvme" else 0
        else:
            gpu_extra = int(2 * frozen / world) if stage == 3 else 2 * frozen
            host_extra = int(frozen * 4 * gpn * 1.5) if opt == "none" and (stage < 3 or not zi) else 0
        check(close(r["gpu_bytes"], base[key]["gpu_bytes"] + gpu_extra), f"frozen {key}: gpu {r['gpu_bytes']}")
        check(close(r["host_bytes"], base[key]["host_bytes"] + host_extra), f"frozen {key}: host {r['host_bytes']}")
        check(close(r["nvme_bytes"], base[key]["nvme_bytes"] + nvme_extra), f"frozen {key}: nvme {r['nvme_bytes']}")
    # A 7B base with 40M trainable at stage 3 without offload: per-GPU bytes fall with the GPU count.
    if params == 7_000_000_000:
        one = estimates(params, 1, 1, largest, ["--trainable-params", str(trainable), "--stage", "3",
                                                "--offload-optimizer", "none"])["configurations"][0]
        eight = full[(3, "none", "none", True)]
        check(eight["gpu_bytes"] < one["gpu_bytes"] / 4, f"frozen base at stage 3: {eight['gpu_bytes']} vs {one['gpu_bytes']}")
data = estimates(5000, 1, 1, None, ["--trainable-params", "5000"])
check(data["trainable_params"] == 5000 and data["configurations"] == estimates(5000, 1, 1)["configurations"],
      "--trainable-params N equals no flag")

# hpZ: every stage-3 row grows by the secondary partition, 2T/K bytes per GPU (K at most the world);
# other stages are unchanged.
for params, trainable, world, k in [(7_000_000_000, 7_000_000_000, 16, 8), (1_300_000_000, 300_000_000, 8, 16)]:
    base = estimates(params, world, world, 250_000_000, ["--trainable-params", str(trainable)])
    hpz = estimates(params, world, world, 250_000_000, ["--trainable-params", str(trainable), "--hpz", str(k)])
    check(hpz["hpz_partition_size"] == min(k, world), f"hpz size {hpz['hpz_partition_size']}")
    for a, b in zip(base["configurations"], hpz["configurations"]):
        extra = (2 * trainable) // min(k, world) if a["stage"] == 3 else 0
        check(b["hpz_secondary_bytes"] == extra and b["gpu_bytes"] - a["gpu_bytes"] == extra
              and b["host_bytes"] == a["host_bytes"], f"hpz {k} on {world} GPUs, {a} -> {b}")

# Bad command lines: exit 2 and a message naming the problem.
for args, needle in [((), "--params N is required"), (("--params", "abc"), "--params"),
                     (("--params", "1B", "--stage", "5"), "--stage"),
                     (("--params", "1B", "--stage", "3"), "--largest-layer-params"),
                     (("--params", "1B", "--world-size", "6", "--gpus-per-node", "4"), "multiple"),
                     (("--params", "1B", "--stage", "2", "--offload-optimizer", "nvme"), "stage 3"),
                     (("--params", "1B", "--offload-param", "disk"), "--offload-param"),
                     (("--params", "1B", "--bogus", "1"), "unknown option"),
                     (("--params", "1B", "--gpu-memory", "lots"), "--gpu-memory"),
                     (("--params", "1B", "--trainable-params", "2B"), "--trainable-params exceeds"),
                     (("--params", "1B", "--trainable-params", "x"), "--trainable-params"),
                     (("--params", "1B", "--world-size", "8", "--hpz", "3"), "--hpz must divide"),
                     (("--params", "1B", "--world-size", "8", "--stage", "2", "--hpz", "2"), "--hpz needs stage 3"),
                     (("--params", "1B", "--hpz", "0"), "--hpz")]:
    rc, out, err = run(*args)
    check(rc == 2 and needle in err, f"{args}: rc={rc} (want 2), stderr={err!r} (want {needle!r})")

# The lower-memory bf16 mode: DeepSpeed's formulas with 2 bytes per parameter less for bf16 masters
# (6 with bf16 optimizer states too) on the optimizer side; only the configurations that run it.
P, W = 10**9, 4
for flags, saved in ((("--bf16-master-weights",), 2), (("--bf16-master-weights", "--bf16-optimizer-states"), 6)):
    rc, out, err = run("--json", "--params", "1B", "--world-size", str(W), "--largest-layer-params", "100M", *flags)
    check(rc == 0, f"{flags}: rc={rc} {err}")
    rows = json.loads(out)["configurations"] if rc == 0 else []
    check(all(r["stage"] > 0 for r in rows), f"{flags}: stage 0 shown")
    check(any(r["offload_optimizer"] == "nvme" for r in rows), f"{flags}: no nvme row")
    check(any(r["offload_optimizer"] == "none" for r in rows) == (saved == 6), f"{flags}: rows without offload")
    for r in rows:
        s, opt = r["stage"], r["offload_optimizer"]
        if s in (1, 2) and opt == "cpu":
            want_host = int(P * max(4 * W, 16 - saved) * 1.5)
            check(r["host_bytes"] == want_host, f"{flags} stage {s} cpu: host {r['host_bytes']} want {want_host}")
        elif s == 1:
            check(r["gpu_bytes"] == 4 * P + int((12 - saved) * P / W), f"{flags} stage 1: {r}")
        elif s == 2:
            check(r["gpu_bytes"] == 4 * P + int((16 - saved) * P / W), f"{flags} stage 2: {r}")
        elif s == 3 and opt == "none":
            check(r["gpu_bytes"] == 4 * 10**8 + int((18 - saved) * P / W), f"{flags} stage 3: {r}")
        elif s == 3 and opt == "cpu" and r["offload_param"] == "cpu" and r["zero_init"]:
            check(r["host_bytes"] == int(P * (16 - saved + 2) * 1.5), f"{flags} stage 3 cpu: {r}")
        elif s == 3 and opt == "nvme" and r["offload_param"] == "nvme":
            check(r["nvme_bytes"] == int(P * (16 - saved + 2)), f"{flags} stage 3 nvme: {r}")
for args, needle in ((("--params", "1B", "--bf16-optimizer-states"), "--bf16-master-weights"),
                     (("--params", "1B", "--stage", "0", "--bf16-master-weights"), "stage 1, 2 or 3"),
                     (("--params", "1B", "--stage", "2", "--offload-optimizer", "none", "--bf16-master-weights"),
                      "--offload-optimizer cpu or nvme")):
    rc, out, err = run(*args)
    check(rc == 2 and needle in err, f"{args}: rc={rc} (want 2), stderr={err!r} (want {needle!r})")

rc, out, _ = run("--help")
check(rc == 0 and "usage: dsrt estimate-memory" in out and "exit codes" in out, "--help")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("estimate-memory: all checks passed")
