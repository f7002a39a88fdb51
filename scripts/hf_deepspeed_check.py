#!/usr/bin/env python3
"""The Hugging Face Trainer (tests/hf/train_gpt2.py: a 2-layer GPT-2 from its config, synthetic
tokens, AdamW and WarmupDecayLR from the DeepSpeed config's "auto" values) once on the real
DeepSpeed and once on dsrt (`--dsrt_compat`), then each run's checkpoint-4 resumed by the other:
DeepSpeed's folder by dsrt's Trainer (load_checkpoint imports it), dsrt's folder exported with
`dsrt checkpoint export --module-from checkpoint-4/model.safetensors` (the tied LM head) and
resumed by DeepSpeed's Trainer. Run by scripts/check-hf-deepspeed.sh in an environment with torch
2.x, DeepSpeed, transformers and accelerate; prints a markdown table of every micro-step's loss.

transformers >= 4.50 refuses torch.load under torch < 2.6 (CVE-2025-32434), so rng_state.pth is
removed before a resume (the data order is fixed by a SequentialSampler; no dropout)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(REPO, "tests", "hf", "train_gpt2.py")
BUILD = os.environ.get("DSRT_BUILD_DIR", os.path.join(REPO, "build"))
ARGS = ["--warmup_steps", "2", "--weight_decay", "0.01", "--max_steps", "8", "--save_steps", "4"]


def config(stage):
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "gradient_clipping": "auto", "steps_per_print": 1000,
            "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                      "weight_decay": "auto", "torch_adam": True}},
            "scheduler": {"type": "WarmupDecayLR", "params": {
                "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                "total_num_steps": "auto", "warmup_type": "linear"}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(out, cfg, dsrt, *extra):
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               DSRT_LOG_LEVEL="error", CUDA_VISIBLE_DEVICES="", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", RANK="0",
               LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), ACCELERATE_TORCH_DEVICE="cpu",
               DS_ACCELERATOR="cpu")
    command = [sys.executable, SCRIPT, "--output_dir", out, "--deepspeed", cfg] + ARGS + list(extra)
    if dsrt:
        command.append("--dsrt_compat")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(command), done.stderr[-4000:]))
    with open(os.path.join(out, "losses.json")) as f:
        return [entry["loss"] for entry in json.load(f)]


def main():
    import transformers
    import accelerate
    import deepspeed
    import torch
    print("torch %s, transformers %s, accelerate %s, deepspeed %s" % (
        torch.__version__, transformers.__version__, accelerate.__version__, deepspeed.__version__))
    rows = ["| run | losses of micro-steps 1-8 (DeepSpeed / dsrt: relative difference per step) | result |",
            "|---|---|---|"]
    ok_all = True
    for stage in [int(x) for x in os.environ.get("DSRT_HF_STAGES", "2 3").split()]:
        tmp = tempfile.mkdtemp()
        cfg = os.path.join(tmp, "ds.json")
        with open(cfg, "w") as f:
            json.dump(config(stage), f)
        ds = train(os.path.join(tmp, "ds"), cfg, False)
        mine = train(os.path.join(tmp, "dsrt"), cfg, True)
        diffs = [abs(a - b) / abs(a) for a, b in zip(ds, mine)]
        ok = len(ds) == len(mine) == 8 and max(diffs) < 1e-5
        rows.append("| ZeRO-%d: DeepSpeed vs dsrt, 8 steps | %s | %s |" % (
            stage, " ".join("%.1e" % d for d in diffs), "yes" if ok else "NO"))
        ok_all = ok_all and ok
        # DeepSpeed's checkpoint-4 resumed by dsrt.
        os.remove(os.path.join(tmp, "ds", "checkpoint-4", "rng_state.pth"))
        r1 = train(os.path.join(tmp, "r1"), cfg, True, "--resume_from_checkpoint",
                   os.path.join(tmp, "ds", "checkpoint-4"))
        d1 = [abs(a - b) / abs(a) for a, b in zip(ds[4:], r1)]
        ok = len(r1) == 4 and max(d1) < 1e-5
        rows.append("| ZeRO-%d: DeepSpeed's checkpoint-4 resumed by dsrt, steps 5-8 vs DeepSpeed uninterrupted | %s "
                    "| %s |" % (stage, " ".join("%.1e" % d for d in d1), "yes" if ok else "NO"))
        ok_all = ok_all and ok
        # dsrt's checkpoint-4 exported and resumed by DeepSpeed.
        src, dst = os.path.join(tmp, "dsrt", "checkpoint-4"), os.path.join(tmp, "x", "checkpoint-4")
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("global_step*", "latest", "zero_to_fp32.py",
                                                                "rng_state.pth"))
        command = [os.path.join(BUILD, "bin", "dsrt"), "checkpoint", "export", src, dst]
        if os.path.exists(os.path.join(src, "model.safetensors")):  # below ZeRO-3 the Trainer saves the model too
            command += ["--module-from", os.path.join(src, "model.safetensors")]
        done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, DSRT_PYTHON=sys.executable))
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        r2 = train(os.path.join(tmp, "r2"), cfg, False, "--resume_from_checkpoint", dst)
        d2 = [abs(a - b) / abs(a) for a, b in zip(mine[4:], r2)]
        ok = len(r2) == 4 and max(d2) < 1e-5
        rows.append("| ZeRO-%d: dsrt's checkpoint-4 exported and resumed by DeepSpeed, steps 5-8 vs dsrt "
                    "uninterrupted | %s | %s |" % (stage, " ".join("%.1e" % d for d in d2), "yes" if ok else "NO"))
        ok_all = ok_all and ok
        shutil.rmtree(tmp, ignore_errors=True)
        print("\n".join(rows[-3:]), flush=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if os.environ.get("DSRT_HF_OUT"):
        with open(os.environ["DSRT_HF_OUT"], "w") as f:
            f.write(text)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
