"""ZeRO-Offload++ (offload_optimizer.ratio): `dsrt estimate-memory --offload-ratio` against what an
engine reports in dsrt_engine_memory. A 4096-element partition in four sub-groups of 1024: ratio
0.5 keeps two of them (2048 elements: fp32 master and Adam's m and v, 12 bytes each) on the device,
the estimator's 12(1-R)P bytes; the host side falls by the same bytes (the estimator's host figure
carries DeepSpeed's 1.5 buffer factor)."""
import json
import os
import subprocess

import dsrt

P = 4096


def engine_memory(ratio):
    config = {"train_micro_batch_size_per_gpu": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "sub_group_size": 1024,
                                    "offload_optimizer": {"device": "cpu", "ratio": ratio}}}
    with dsrt.Engine(config, device="cpu") as engine:
        engine.add_param("w", shape=(P,))
        engine.build()
        m = engine.memory()
    device = m["master_params"][0] + m["optimizer_states"][0]
    host = m["master_params"][1] + m["optimizer_states"][1]
    return device, host


def estimate(ratio):
    cli = os.path.join(os.environ.get("DSRT_BUILD_DIR", "build"), "bin", "dsrt")
    out = subprocess.run([cli, "estimate-memory", "--params", str(P), "--largest-layer-params", str(P),
                          "--stage", "3", "--offload-optimizer", "cpu", "--offload-param", "none",
                          "--offload-ratio", str(ratio), "--json"], check=True, capture_output=True, text=True).stdout
    rows = [r for r in json.loads(out)["configurations"] if r["zero_init"]]
    assert len(rows) == 1, rows
    return rows[0]


def test_estimate_matches_engine_memory_for_the_split():
    dev_half, host_half = engine_memory(0.5)
    dev_one, host_one = engine_memory(1.0)
    assert dev_one == 0 and host_one == 12 * P
    assert dev_half == 12 * P // 2 and host_half == 12 * P // 2
    half, one = estimate(0.5), estimate(1.0)
    assert half["gpu_bytes"] - one["gpu_bytes"] == dev_half - dev_one
    assert one["host_bytes"] - half["host_bytes"] == int((host_one - host_half) * 1.5)


def test_estimate_refuses_a_ratio_without_cpu_offload_at_stage_3():
    cli = os.path.join(os.environ.get("DSRT_BUILD_DIR", "build"), "bin", "dsrt")
    bad = subprocess.run([cli, "estimate-memory", "--params", "1B", "--stage", "2", "--offload-optimizer", "cpu",
                          "--offload-ratio", "0.5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--offload-ratio" in bad.stderr
