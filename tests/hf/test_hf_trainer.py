"""The Hugging Face Trainer on dsrt, against the same script on plain PyTorch.

Run by scripts/test-hf.sh in a virtual environment over Debian's torch with transformers 4.37.2 and
accelerate 0.26.1 from PyPI. Each dsrt run goes through `--deepspeed ds_config.json` with the
pip-installed `deepspeed` stand-in (or `import dsrt.compat`), as a user would, on CPU ranks (a
torchrun-style environment of one rank, ACCELERATE_TORCH_DEVICE=cpu). Losses must equal the plain
run's to within fp32 rounding, resuming must continue the same trajectory, and the weights
saved by save_model, by zero_to_fp32 and by load_state_dict_from_zero_checkpoint must equal the
engine's.
"""

import copy
import csv
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "train_gpt2.py")
BUILD = os.environ.get("DSRT_BUILD_DIR", os.path.join(REPO, "build"))

LR = 5e-3  # train_gpt2.py's default learning rate
BASE_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 1000,
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    # The Trainer's lr_scheduler_type "constant" is WarmupLR with warmup_min_lr = warmup_max_lr. (The
    # Trainer's "linear" with warmup is not WarmupDecayLR step for step: DeepSpeed's schedules run
    # their first two optimizer steps at warmup_min_lr, dsrt's as DeepSpeed's.)
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": LR, "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto", "warmup_type": "linear"}},
    "zero_optimization": {"stage": 2},
}


def ds_config(tmp_path, stage, offload=False, offload_param=False, gather_on_save=False, drop=(), **sections):
    config = copy.deepcopy(BASE_CONFIG)
    config.update(sections)
    for key in drop:
        del config[key]
    zero = {"stage": stage, "stage3_param_persistence_threshold": 0}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    if gather_on_save:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config["zero_optimization"] = zero
    path = tmp_path / ("ds_zero%d.json" % stage)
    path.write_text(json.dumps(config))
    return str(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """The `deepspeed` stand-in, pip-installed into a folder of its own (added to PYTHONPATH for the
    dsrt runs only)."""
    import shutil

    target = tmp_path_factory.mktemp("standin")
    # Built from a copy: pip leaves its egg-info beside the setup.py it runs.
    source = tmp_path_factory.mktemp("standin_source") / "python"
    shutil.copytree(os.path.join(REPO, "bindings", "python"), source,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source / "deepspeed_compat")], check=True)
    return str(target)


def run(output_dir, *extra, deepspeed=None, standin=None, compat=False, expect_ok=True, ranks=1, cwd=None):
    """The script as one process, or as `ranks` processes in the environment torchrun gives them."""
    env = dict(os.environ)
    paths = [os.path.join(BUILD, "python")] + ([standin] if standin else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DSRT_LOG_LEVEL="warn",
               CUDA_VISIBLE_DEVICES="")
    if deepspeed:
        # CPU ranks as torchrun sets them up; Accelerate's DeepSpeed path needs LOCAL_RANK and
        # ACCELERATE_TORCH_DEVICE=cpu to stay on the CPU. (dsrt's ranks meet on MASTER_PORT + 1.)
        env.update(WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), ACCELERATE_TORCH_DEVICE="cpu")
    command = [sys.executable, SCRIPT, "--output_dir", str(output_dir)] + list(extra)
    if deepspeed:
        command += ["--deepspeed", deepspeed]
    if compat:
        command.append("--dsrt_compat")
    processes = []
    for rank in range(ranks):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank)) if deepspeed else env
        processes.append(subprocess.Popen(command, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, cwd=cwd))
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
        results.append(subprocess.CompletedProcess(command, process.returncode, out, err))
    for rank, done in enumerate(results):
        if expect_ok and done.returncode != 0:
            raise AssertionError("%s (rank %d) failed (%d):\n%s" % (" ".join(command), rank, done.returncode,
                                                                  done.stderr[-6000:]))
    return results[0]


def losses(output_dir, rank=0):
    name = "losses.json" if rank == 0 else "losses_rank%d.json" % rank
    with open(os.path.join(output_dir, name)) as f:
        return [entry["loss"] for entry in json.load(f)]


def assert_close(got, want, what, rtol=2e-5):
    assert len(got) == len(want), "%s: %d values, expected %d" % (what, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= rtol * abs(w), "%s[%d]: %r vs %r (relative %.2e)" % (what, i, g, w, abs(g - w) / abs(w))


def load_weights(folder):
    from safetensors.torch import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


def assert_weights_close(got, want, what, rtol=1e-4):
    """Every tensor of want in got, with a relative error (norm of the difference over the norm)
    within rtol; shared (tied) names may be missing from one side."""
    common = sorted(set(got) & set(want))
    assert len(common) >= len(want) - 1, "%s: names differ: %s" % (what, sorted(set(want) ^ set(got)))
    for name in common:
        a, b = got[name].float(), want[name].float()
        assert a.shape == b.shape, "%s %s: shape %s vs %s" % (what, name, tuple(a.shape), tuple(b.shape))
        error = (a - b).norm().item() / max(b.norm().item(), 1e-12)
        assert error <= rtol, "%s %s: relative error %.2e" % (what, name, error)


def assert_same_function(folder, reference, rtol=1e-5):
    from transformers import GPT2LMHeadModel

    tokens = torch.randint(0, 96, (4, 16), generator=torch.Generator().manual_seed(7))
    outputs = []
    for path in (folder, reference):
        model = GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True).eval()
        with torch.no_grad():
            outputs.append(model(tokens).logits.double())
    error = (outputs[0] - outputs[1]).norm().item() / outputs[1].norm().item()
    assert error <= rtol, "the model in %s computes logits %.2e away from %s's" % (folder, error, reference)


@pytest.fixture(scope="session")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain")
    run(out)
    return out


@pytest.mark.parametrize("stage,offload,offload_param", [(2, True, False), (3, False, False), (3, True, True)],
                         ids=["zero2-offload", "zero3", "zero3-offload-both"])
def test_trainer_matches_plain_pytorch_and_saves(tmp_path, plain, standin, stage, offload, offload_param):
    config = ds_config(tmp_path, stage, offload, offload_param, gather_on_save=True)
    out = tmp_path / "run"
    done = run(out, deepspeed=config, standin=standin)
    assert "engine: dsrt." in done.stderr  # the Trainer's engine is dsrt's
    want = losses(plain)
    assert_close(losses(out), want, "zero%d losses" % stage)

    # Checkpoints as DeepSpeed lays them out, with zero_to_fp32.py beside `latest`.
    checkpoint = out / "checkpoint-8"
    assert (checkpoint / "latest").read_text().strip() == "global_step8"
    assert os.access(checkpoint / "zero_to_fp32.py", os.X_OK)

    # save_model (the consolidated 16-bit state dict under ZeRO-3) against the plain run's model: the
    # same function (the key bias of attention has no effect on the output and gets only rounding
    # noise as gradient, which Adam amplifies, so the weights are compared through the outputs).
    final = load_weights(out / "final")
    assert_same_function(out / "final", plain / "final")

    # The checkpoint's fp32 weights, three ways: zero_to_fp32.py, get_fp32_state_dict_from_zero_checkpoint
    # and load_state_dict_from_zero_checkpoint into a fresh model.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(BUILD, "python"), standin]))
    subprocess.run([sys.executable, str(checkpoint / "zero_to_fp32.py"), str(checkpoint), str(tmp_path / "fp32.bin")],
                   env=env, check=True, capture_output=True)
    consolidated = torch.load(tmp_path / "fp32.bin", map_location="cpu")
    assert_weights_close(consolidated, final, "zero_to_fp32.py vs save_model", rtol=1e-6)
    code = """
import sys, torch
import deepspeed
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint, load_state_dict_from_zero_checkpoint
from transformers import GPT2Config, GPT2LMHeadModel
state = get_fp32_state_dict_from_zero_checkpoint(sys.argv[1])
config = GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=2)
model = load_state_dict_from_zero_checkpoint(GPT2LMHeadModel(config), sys.argv[1])
loaded = model.state_dict()
torch.save({"state": state, "loaded": {k: loaded[k] for k in state}}, sys.argv[2])
"""
    subprocess.run([sys.executable, "-c", code, str(checkpoint), str(tmp_path / "both.pt")], env=env, check=True,
                   capture_output=True)
    both = torch.load(tmp_path / "both.pt", map_location="cpu")
    assert_weights_close(both["state"], consolidated, "get_fp32_state_dict_from_zero_checkpoint", rtol=0)
    assert_weights_close(both["loaded"], consolidated, "load_state_dict_from_zero_checkpoint", rtol=0)


def test_resume_from_checkpoint_continues_the_same_trajectory(tmp_path, plain, standin):
    config = ds_config(tmp_path, 2, offload=True)
    first = tmp_path / "first"
    run(first, deepspeed=config, standin=standin)
    # A new process resumes from the step-4 checkpoint the first run wrote, into its own folder.
    second = tmp_path / "second"
    import shutil

    shutil.copytree(first / "checkpoint-4", second / "checkpoint-4")
    run(second, "--resume_from_checkpoint", str(second / "checkpoint-4"), deepspeed=config, standin=standin)
    resumed = losses(second)
    assert len(resumed) == 4
    assert_close(resumed, losses(first)[4:], "resumed losses vs the uninterrupted run", rtol=1e-6)
    assert_close(resumed, losses(plain)[4:], "resumed losses vs plain PyTorch")


def test_one_line_compat_without_the_standin(tmp_path, plain):
    """`import dsrt.compat` at the top of the script instead of the pip-installed stand-in."""
    out = tmp_path / "compat"
    done = run(out, deepspeed=ds_config(tmp_path, 3), compat=True)
    assert "engine: dsrt." in done.stderr
    assert_close(losses(out), losses(plain), "zero3 losses (dsrt.compat)")


def test_without_dsrt_the_trainer_refuses_deepspeed(tmp_path):
    """The control: neither the stand-in nor the line, so transformers finds no DeepSpeed."""
    done = run(tmp_path / "none", deepspeed=ds_config(tmp_path, 2), expect_ok=False)
    assert done.returncode != 0
    assert "deepspeed" in done.stderr.lower()


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_see_the_batches_of_one_process(tmp_path, standin, stage):
    """Two CPU ranks (dsrt's TCP communicator) at micro-batch 4 against one plain process at 8: each
    step's mean of the ranks' losses is the plain loss, and the saved models compute the same."""
    plain_out = tmp_path / "plain"
    run(plain_out, "--micro_batch", "8")
    out = tmp_path / "dsrt"
    monitor = {"enabled": True, "output_path": str(tmp_path / "csv"), "job_name": "two"}
    config = ds_config(tmp_path, stage, offload=stage == 2, gather_on_save=True, csv_monitor=monitor)
    run(out, deepspeed=config, standin=standin, ranks=2)
    mean = [(a + b) / 2 for a, b in zip(losses(out, 0), losses(out, 1))]
    assert_close(mean, losses(plain_out), "zero%d 2-rank mean losses" % stage)
    assert losses(out, 0) != losses(out, 1)  # the ranks trained on different samples
    # csv_monitor: rank 0 writes, as DeepSpeed's monitor does: its own losses at the global sample count.
    with open(tmp_path / "csv" / "two" / "Train_Samples_train_loss.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [int(step) for step, _ in rows] == [8 * k for k in range(8)]  # 2 ranks x micro-batch 4
    assert [float(value) for _, value in rows] == pytest.approx(losses(out, 0), rel=1e-6)
    assert_same_function(out / "final", plain_out / "final")


def test_gradient_accumulation(tmp_path, standin):
    plain_out = tmp_path / "plain"
    run(plain_out, "--gradient_accumulation_steps", "2")
    out = tmp_path / "dsrt"
    run(out, "--gradient_accumulation_steps", "2", deepspeed=ds_config(tmp_path, 2, offload=True), standin=standin)
    assert_close(losses(out), losses(plain_out), "zero2 losses with 2 micro-steps per step")


def test_trainers_own_two_group_adamw_and_schedule(tmp_path, standin):
    plain_out = tmp_path / "plain"
    run(plain_out, "--weight_decay", "0.1")
    out = tmp_path / "dsrt"
    run(out, "--weight_decay", "0.1", deepspeed=ds_config(tmp_path, 2, drop=("optimizer", "scheduler")),
        standin=standin)
    assert_close(losses(out), losses(plain_out), "zero2 losses with the Trainer's AdamW and schedule")


def test_config_optimizer_with_the_trainers_schedule(tmp_path, standin):
    """A config with an "optimizer" section and no "scheduler": the Trainer hands deepspeed.initialize
    a function that builds its linear warmup-and-decay LambdaLR on the optimizer; dsrt steps it after
    every optimizer step, and a resumed run continues the schedule where the checkpoint left it."""
    schedule = ("--lr_scheduler_type", "linear", "--warmup_steps", "3")
    plain_out = tmp_path / "plain"
    run(plain_out, *schedule)
    config = ds_config(tmp_path, 2, drop=("scheduler",))
    out = tmp_path / "dsrt"
    run(out, *schedule, deepspeed=config, standin=standin)
    assert_close(losses(out), losses(plain_out), "zero2 losses with the Trainer's linear schedule")
    second = tmp_path / "second"
    shutil.copytree(out / "checkpoint-4", second / "checkpoint-4")
    run(second, *schedule, "--resume_from_checkpoint", str(second / "checkpoint-4"), deepspeed=config,
        standin=standin)
    assert_close(losses(second), losses(plain_out)[4:], "resumed losses vs plain PyTorch")


ACCELERATE_SCRIPT = os.path.join(HERE, "accelerate_gpt2.py")


def run_accelerate(init_dir, out, launch_env=None, standin=None):
    """accelerate_gpt2.py as one process; launch_env is what `accelerate launch --use_deepspeed`
    exports (its torchrun cannot start workers with Debian's torch 1.13, so the test sets it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(BUILD, "python")] + ([standin] if standin else [])),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DSRT_LOG_LEVEL="warn", CUDA_VISIBLE_DEVICES="")
    if launch_env:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), ACCELERATE_TORCH_DEVICE="cpu", ACCELERATE_USE_DEEPSPEED="true",
                   **launch_env)
    os.makedirs(out, exist_ok=True)
    done = subprocess.run([sys.executable, ACCELERATE_SCRIPT, str(init_dir), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-6000:]
    return done


@pytest.fixture(scope="session")
def accelerate_plain(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    init_dir = tmp_path_factory.mktemp("init")
    torch.manual_seed(8)
    GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0)).save_pretrained(str(init_dir))
    out = tmp_path_factory.mktemp("accelerate_plain")
    run_accelerate(init_dir, out)
    return init_dir, out


def test_accelerate_with_a_deepspeed_config_file(tmp_path, accelerate_plain, standin):
    """deepspeed_config_file with optimizer and scheduler sections: DummyOptim and DummyScheduler."""
    init_dir, plain_out = accelerate_plain
    config = copy.deepcopy(BASE_CONFIG)
    config["gradient_clipping"] = 1.0
    # Accelerate fills lr and weight_decay from DummyOptim; the rest must be written out.
    config["optimizer"]["params"].update(betas=[0.9, 0.999], eps=1e-8)
    config["scheduler"]["params"]["warmup_max_lr"] = LR
    config["zero_optimization"] = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "dsrt"
    done = run_accelerate(init_dir, out, {"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(path)}, standin=standin)
    assert "engine: dsrt." in done.stderr
    assert_close(losses(out), losses(plain_out), "Accelerate zero2 losses")
    assert_same_function(out / "final", plain_out / "final")


def test_accelerate_plugin_zero3_init_and_16bit_save(tmp_path, accelerate_plain, standin):
    """The plugin without a file (zero stage 3, zero3_init: from_pretrained under deepspeed.zero.Init
    and GatheredParameters; zero3_save_16bit_model), a torch AdamW as the optimizer."""
    init_dir, plain_out = accelerate_plain
    out = tmp_path / "dsrt"
    done = run_accelerate(init_dir, out, {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_GRADIENT_CLIPPING": "1.0",
                                          "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
                                          "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
                                          "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu"}, standin=standin)
    assert "engine: dsrt." in done.stderr
    assert "zero.Init" in done.stderr  # from_pretrained ran under deepspeed.zero.Init
    assert_close(losses(out), losses(plain_out), "Accelerate zero3 losses")
    assert_same_function(out / "final", plain_out / "final")


def test_the_documented_config_follows_deepspeeds_schedule(tmp_path, standin):
    """examples/python/ds_config_hf_trainer.json (the README's command): WarmupDecayLR with the
    Trainer's "auto" values, and csv_monitor. The learning rate the Trainer logs after step k is
    DeepSpeed's WarmupDecayLR at iteration k - 1 (warmup_num_steps 0 counts as 2, linear warmup
    from 0, then linear decay to 0 at total_num_steps 8), written out here from DeepSpeed's
    documented formula."""
    out = tmp_path / "run"
    config = os.path.join(REPO, "examples", "python", "ds_config_hf_trainer.json")
    # csv_monitor's output_path "monitor" is relative to the working directory.
    run(out, "--lr_scheduler_type", "linear", deepspeed=config, standin=standin, cwd=tmp_path)

    def deepspeed_lr(iteration, warmup=2, total=8):
        if iteration < warmup:
            return LR * iteration / warmup
        return LR * max(0.0, (total - iteration) / (total - warmup))

    with open(out / "checkpoint-8" / "trainer_state.json") as f:
        logged = [entry["learning_rate"] for entry in json.load(f)["log_history"] if "learning_rate" in entry]
    assert logged == pytest.approx([deepspeed_lr(k - 1) for k in range(1, 9)], rel=1e-12, abs=1e-15)
    with open(tmp_path / "monitor" / "hf_trainer" / "Train_Samples_train_loss.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "train_loss"] and [int(r[0]) for r in rows[1:]] == [4 * k for k in range(8)]
    assert [float(r[1]) for r in rows[1:]] == pytest.approx(losses(out), rel=1e-6)


def test_zero3_save_model_without_gathering_writes_a_checkpoint(tmp_path, plain, standin):
    """save_model at ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the Trainer catches
    Accelerate's ValueError, removes its empty model file and calls save_checkpoint on the output
    folder; that folder's zero_to_fp32.py recovers the weights, as the Trainer's warning says."""
    out = tmp_path / "run"
    run(out, deepspeed=ds_config(tmp_path, 3), standin=standin)
    final = out / "final"
    assert not (final / "model.safetensors").exists()
    assert (final / "latest").read_text().strip() == "global_step8"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(BUILD, "python"), standin]))
    subprocess.run([sys.executable, str(final / "zero_to_fp32.py"), str(final), str(tmp_path / "fp32.bin")],
                   env=env, check=True, capture_output=True)
    from safetensors.torch import save_file

    state = torch.load(tmp_path / "fp32.bin", map_location="cpu")
    recovered = tmp_path / "recovered"
    recovered.mkdir()
    shutil.copy(final / "config.json", recovered / "config.json")
    save_file(state, str(recovered / "model.safetensors"), metadata={"format": "pt"})  # from_pretrained re-ties lm_head
    assert_same_function(recovered, plain / "final")


def test_bf16_follows_the_fp32_trajectory_to_bf16_precision(tmp_path, plain, standin):
    """--bf16 with bf16.enabled "auto": dsrt keeps bf16 working weights (the model computes in
    bf16) and fp32 masters; each loss is the fp32 run's to bf16's precision (8 bits: a relative
    spacing of 2^-7 near these values), and the losses are not the fp32 ones."""
    config = ds_config(tmp_path, 2, bf16={"enabled": "auto"})
    out = tmp_path / "run"
    run(out, "--bf16", deepspeed=config, standin=standin)
    got, want = losses(out), losses(plain)
    assert_close(got, want, "bf16 losses vs fp32", rtol=1e-2)
    assert all(torch.tensor(v).to(torch.bfloat16).item() == v for v in got)  # computed in bf16
    assert got != want
