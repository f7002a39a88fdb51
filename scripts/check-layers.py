#!/usr/bin/env python3
"""Every folder points down: a file may include headers of its own layer and of the layers below
it, never of a layer above, and tools/ reaches the library only through the public header (and
the aio layer). docs/architecture.md draws the map. Run by `make test` (ctest
check_layers); exits 1 listing each include that points up and each allow-list entry that no longer
matches anything.

Usage: scripts/check-layers.py [SOURCE_ROOT]
"""
import os
import re
import sys

# The layers, lowest first. A layer is a folder under src/ (or cuda/, tools/ at the top).
LAYERS = [
    "util",     # status, logging, half floats, aligned buffers
    "aio",      # asynchronous file I/O (io_uring, threads) with its own options
    "cuda",     # CUDA kernels and their launchers (config-free arguments)
    "device",   # CPU/CUDA devices, streams, memory
    "comm",     # communicators: comm/ (shared), mpi/, nccl/, staged/, gloo/
    "config",   # DeepSpeed JSON -> TrainConfig
    "monitor",  # DeepSpeed monitor events and the csv_monitor writer
    "optim",    # CPU optimizer kernels and the optimizer backends
    "quant",    # block quantization kernels (ZeRO++ qwZ/qgZ): reuse optim's vector types and ISA choice
    "offload",  # pinned pools, NVMe swapping of states and parameters
    "zero",     # partitioning, gradient reduction, parameter gathering
    "engine",   # the training step
    "ckpt",     # checkpoints
    "capi",     # the C ABI (include/dsrt.h)
    "tools",    # the dsrt command
]

# Layers that may not reach every layer below them: the dsrt command is a client of the public C
# API (include/dsrt.h); only its aio benchmark drives the aio layer directly.
ONLY = {
    "tools": {"tools", "aio"},
}

# Includes that point up (or past an ONLY rule) today, each with why it stays: (including file, included header, reason).
ALLOWED = [
    ("cuda/fused_optimizers.cu", "optim/step_constants.h",
     "the CUDA optimizer reads the CPU kernels' OptimizerHyper/OptimizerSlice and folds its per-step "
     "constants with their code, for identical bits (optim is being reworked for parameter groups, #17)"),
    ("tools/cmd_aio_bench.cpp", "util/aligned_buffer.h",
     "the aio benchmark uses the aio layer directly (allowed) and its aligned buffers"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".c", ".cu", ".cuh", ".inl")


def layer_of_file(rel):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("cuda", "tools"):
        return parts[0]
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rank = {name: i for i, name in enumerate(LAYERS)}
    used = set()
    problems = []
    checked = 0
    for top in ("src", "cuda", "tools"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                layer = layer_of_file(rel)
                if layer is None:
                    continue
                if layer not in rank:
                    problems.append(f"{rel}: folder '{layer}' is not in the layer list of scripts/check-layers.py")
                    continue
                checked += 1
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as text:
                    for number, line in enumerate(text, 1):
                        match = INCLUDE.match(line)
                        if not match or "/" not in match.group(1):
                            continue  # the public header dsrt.h, or a file next to this one
                        header = match.group(1)
                        target = header.split("/")[0]
                        if target not in rank:
                            continue
                        upward = rank[target] > rank[layer]
                        if not upward and (layer not in ONLY or target in ONLY[layer]):
                            continue
                        entry = next((a for a in ALLOWED if a[0] == rel and a[1] == header), None)
                        if entry is not None:
                            used.add((entry[0], entry[1]))
                            continue
                        if upward:
                            problems.append(f"{rel}:{number}: {layer} includes {header}, a header of the higher "
                                            f"layer {target} (order, lowest first: {', '.join(LAYERS)})")
                        else:
                            problems.append(f"{rel}:{number}: {layer} includes {header}, but {layer} may use only "
                                            f"the public header and {', '.join(sorted(ONLY[layer]))}")
    for path, header, _ in ALLOWED:
        if (path, header) not in used:
            problems.append(f"scripts/check-layers.py: the allowed include {path} -> {header} no longer exists; "
                            "remove it from ALLOWED")
    for problem in problems:
        print(problem)
    print(f"check-layers: {checked} files, {len(problems)} problem(s), {len(used)} allowed upward include(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
