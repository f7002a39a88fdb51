"""The interval arithmetic of scripts/gpu_deepspeed_bench.py (the fraction of offload copies hidden
under GPU kernels), on hand-made intervals, random ones against a brute-force count, and a
synthetic torch.profiler chrome trace. Needs no GPU and no torch."""
import importlib.util
import json
import os

import pytest

_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts",
                       "gpu_deepspeed_bench.py")
_spec = importlib.util.spec_from_file_location("gpu_deepspeed_bench", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_merge_joins_touching_and_nested_intervals():
    assert bench.merge([(5, 7), (0, 2), (2, 3), (1, 1.5), (6, 9), (10, 10)]) == [(0, 3), (5, 9)]
    assert bench.merge([]) == []


def test_hand_made_overlap():
    # copy 0..10 under kernels 2..6 and 8..12: 6 of 10 hidden; exposed 0..2 and 6..8.
    got = bench.overlap_figures([(0, 10)], [(2, 4), (3, 6), (8, 12)])
    assert got["copy_total"] == 10 and got["copy_hidden"] == 6
    assert got["hidden_fraction"] == pytest.approx(0.6)
    assert got["copy_exposed"] == 4 and got["kernel_busy"] == 8
    # Two copies at once during one kernel: each counts its own time (hidden 2 + 2 of 4 + 4).
    got = bench.overlap_figures([(0, 4), (0, 4)], [(1, 3)])
    assert got["copy_hidden"] == 4 and got["copy_total"] == 8 and got["copy_exposed"] == 2
    # No kernel at all: nothing hidden, everything exposed; no copy: no fraction.
    got = bench.overlap_figures([(1, 4)], [])
    assert got["hidden_fraction"] == 0.0 and got["copy_exposed"] == 3
    assert bench.overlap_figures([], [(0, 1)])["hidden_fraction"] is None


def test_random_intervals_agree_with_brute_force():
    assert bench.self_check(trials=200) > 200


def test_trace_figures_reads_copies_and_kernels(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "kernel", "name": "add", "ts": 140.0, "dur": 30.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 90.0, "dur": 20.0,
         "args": {"bytes": 1000}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 160.0, "dur": 40.0,
         "args": {"bytes": 3000}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 0.0, "dur": 500.0},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 0.0, "dur": 500.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 80.0, "dur": 5.0},
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 0.0},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got = bench.trace_figures(str(path))
    assert got["counts"] == {"HtoD": 1, "DtoH": 1, "kernel": 2, "HtoD_bytes": 1000, "DtoH_bytes": 3000}
    # ms: copies 90..110 (10 us hidden) and 160..200 (10 us hidden); kernels 100..170.
    assert got["copy_total"] == pytest.approx(0.060)
    assert got["copy_hidden"] == pytest.approx(0.020)
    assert got["hidden_fraction"] == pytest.approx(1 / 3)
    assert got["copy_exposed"] == pytest.approx(0.040)
    assert got["kernel_busy"] == pytest.approx(0.070)
