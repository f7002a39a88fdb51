"""The low-level Python API end to end: errors, config, engine, zero-copy views, checkpoints."""
import gc
import os

import numpy as np
import pytest

import dsrt


def adamw_config(**extra):
    config = {"train_micro_batch_size_per_gpu": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}}
    config.update(extra)
    return config


def test_version_and_features():
    assert dsrt.version() == dsrt.__version__
    assert dsrt.capi.dsrt_version_number() == dsrt.capi.DSRT_VERSION_NUMBER
    assert dsrt.has_feature("mpi") in (True, False)
    assert dsrt.has_feature("no-such-feature") is False


def test_config_error_names_key_and_suggestion():
    with pytest.raises(dsrt.ConfigError) as info:
        dsrt.Config({"zero_optimization": {"stage": 2, "overlap_com": True}})
    assert "zero_optimization.overlap_com" in info.value.message
    assert "overlap_comm" in info.value.message
    assert info.value.status == dsrt.capi.DSRT_ERR_CONFIG
    assert isinstance(info.value, ValueError)


def test_config_bad_value_and_file_errors(tmp_path):
    with pytest.raises(dsrt.ConfigError) as info:
        dsrt.Config({"zero_optimization": {"stage": 5}})
    assert "zero_optimization.stage" in info.value.message
    with pytest.raises(dsrt.IOError) as info:
        dsrt.Config(str(tmp_path / "missing.json"))
    assert "missing.json" in info.value.message
    assert isinstance(info.value, OSError)


def test_config_auto_resolution_and_effective_json():
    with dsrt.Config({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
                      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                            "stage3_prefetch_bucket_size": "auto",
                                            "stage3_param_persistence_threshold": "auto"}}) as config:
        assert len(config.unresolved()) == 3
        config.set_hidden_size(64)
        assert config.unresolved() == []
        assert config.get_number("zero_optimization.reduce_bucket_size") == 64 * 64
        assert config.get_number("zero_optimization.stage3_param_persistence_threshold") == 640
        config.set("optimizer.params.betas", [0.8, 0.95])
        assert config.get_number("optimizer.params.betas.1") == 0.95
        effective = config.to_dict()
        assert effective["zero_optimization"]["stage"] == 3
    with pytest.raises(dsrt.StateError):
        config.to_json()  # closed


def test_engine_rejects_unresolved_auto():
    config = dsrt.Config({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": "auto",
                          "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})
    with pytest.raises(dsrt.ConfigError) as info:
        dsrt.Engine(config)
    assert "gradient_clipping" in info.value.message


def test_out_of_order_calls_raise_state_error():
    with dsrt.Engine(adamw_config()) as engine:
        tensor = engine.add_param("w", shape=(4,))
        with pytest.raises(dsrt.StateError):
            engine.step()
        with pytest.raises(dsrt.StateError):
            tensor.grad()
        engine.build()
        with pytest.raises(dsrt.StateError):
            engine.add_param("late", shape=(2,))
        with pytest.raises(dsrt.InvalidArgumentError):
            tensor.write_fp32(np.ones(5))


def test_linear_regression_converges_with_zero_copy_views():
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    w_true = rng.standard_normal(8).astype(np.float32)
    y = x @ w_true
    with dsrt.Comm.local() as comm, dsrt.Engine(adamw_config(optimizer={"type": "AdamW", "params": {"lr": 0.05}}),
                                                comm) as engine:
        w = engine.add_param("w", init=np.zeros(8))
        engine.build()
        view = w.acquire().numpy()  # zero-copy: updated in place by every step
        first = None
        for _ in range(300):
            residual = x @ view - y
            loss = float(np.mean(residual ** 2))
            first = loss if first is None else first
            grad = w.grad().numpy()
            grad += 2.0 * x.T @ residual / len(x)
            w.grad_ready()
            result = engine.step()
        assert result.boundary and not result.overflow
        assert engine.global_step == 300
        assert loss < first * 1e-3
        np.testing.assert_allclose(w.read_fp32(), w_true, rtol=5e-2, atol=5e-2)
        w.release()


def test_frozen_param_keeps_its_value_and_refuses_gradients():
    rng = np.random.default_rng(77)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    base_value = rng.standard_normal(8).astype(np.float32)
    y = x @ (base_value + 1.0)
    with dsrt.Comm.local() as comm, dsrt.Engine(adamw_config(optimizer={"type": "AdamW", "params": {"lr": 0.05}}),
                                                comm) as engine:
        base = engine.add_frozen_param("base", init=base_value)
        delta = engine.add_param("delta", init=np.zeros(8))
        engine.build()
        assert "base" in engine.tensors and base.shape == (8,)
        b = base.acquire().numpy()
        d = delta.acquire().numpy()
        for _ in range(200):
            residual = x @ (b + d) - y
            delta.grad().numpy()[:] += 2.0 * x.T @ residual / len(x)
            delta.grad_ready()
            engine.step()
        np.testing.assert_array_equal(base.read_fp32(), base_value)  # bitwise: the optimizer never touched it
        np.testing.assert_allclose(delta.read_fp32(), np.ones(8), rtol=5e-2, atol=5e-2)
        with pytest.raises(dsrt.StateError) as info:
            base.grad()
        assert "'base'" in info.value.message and "frozen" in info.value.message
        base.release()
        delta.release()


def test_buffer_protocol_and_dlpack_share_memory():
    torch = pytest.importorskip("torch", reason="torch is not installed for this Python")
    with dsrt.Engine(adamw_config(bf16={"enabled": True})) as engine:
        t = engine.add_param("t", init=np.arange(6, dtype=np.float32).reshape(2, 3) + 1.5)
        engine.build()
        view = t.acquire()
        as_torch = view.torch()
        assert as_torch.dtype == torch.bfloat16 and tuple(as_torch.shape) == (2, 3)
        assert torch.allclose(as_torch.float(), torch.arange(6.0).reshape(2, 3) + 1.5)
        raw = view.memoryview()
        assert raw.format == "H" and raw.shape == (2, 3)
        as_torch[0, 0] = 42.0  # writes go straight into dsrt's working copy
        assert view.numpy()[0, 0] == torch.tensor([42.0], dtype=torch.bfloat16).view(torch.int16).item() & 0xFFFF
        del as_torch
        gc.collect()
        t.release()


def test_dlpack_protocol_keywords_of_numpy_2_and_torch_2():
    """torch.from_dlpack and numpy.from_dlpack call __dlpack__ themselves; newer releases pass the
    array API's max_version, dl_device and copy keywords."""
    with dsrt.Engine(adamw_config()) as engine:
        t = engine.add_param("t", init=np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5)
        engine.build()
        view = t.acquire()
        as_numpy = np.from_dlpack(view)
        np.testing.assert_array_equal(as_numpy, np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5)
        view.numpy()[2, 1] = 7.25  # NumPy marks DLPack imports read-only, but it is the same memory
        assert as_numpy[2, 1] == 7.25
        capsule = view.__dlpack__(max_version=(1, 0), dl_device=view.__dlpack_device__(), copy=False)
        assert type(capsule).__name__ == "PyCapsule"
        with pytest.raises(BufferError, match="views only"):
            view.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="DLPack device"):
            view.__dlpack__(dl_device=(2, 0))
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            as_torch = torch.from_dlpack(view)
            assert as_torch.data_ptr() == view.address and as_torch[2, 1].item() == 7.25
            del as_torch
        del as_numpy
        gc.collect()
        t.release()


def test_memory_stats_and_client_state():
    with dsrt.Engine(adamw_config()) as engine:
        engine.add_param("w", shape=(1000,))
        engine.build()
        memory = engine.memory()
        assert memory["master_params"][0] + memory["master_params"][1] >= 4000
        assert memory["optimizer_states"][0] + memory["optimizer_states"][1] >= 8000
        engine.client_state = b"hello"
        assert engine.client_state == b"hello"


def test_checkpoint_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    init = rng.standard_normal((5, 7)).astype(np.float32)
    grads = [rng.standard_normal((5, 7)).astype(np.float32) for _ in range(4)]

    def train(engine, tensor, steps):
        for g in steps:
            tensor.grad().numpy()[:] = g
            tensor.grad_ready()
            engine.step()

    with dsrt.Engine(adamw_config()) as a:
        ta = a.add_param("layer.weight", init=init)
        a.build()
        train(a, ta, grads[:2])
        a.client_state = b"epoch=3"
        a.save_checkpoint(tmp_path / "ckpt")
        train(a, ta, grads[2:])
        expected = ta.read_fp32()
    with dsrt.Engine(adamw_config()) as b:
        tb = b.add_param("layer.weight", shape=(5, 7))
        b.build()
        b.load_checkpoint(tmp_path / "ckpt")
        assert b.client_state == b"epoch=3"
        assert b.global_step == 2
        train(b, tb, grads[2:])
        np.testing.assert_array_equal(tb.read_fp32(), expected)
    with dsrt.Checkpoint(tmp_path / "ckpt") as ckpt:
        assert ckpt.names() == ["layer.weight"]
        assert ckpt.shape("layer.weight") == (5, 7)
        assert ckpt.read("layer.weight").shape == (5, 7)
        ckpt.export_safetensors(tmp_path / "model.safetensors", "bf16")
    assert os.path.getsize(tmp_path / "model.safetensors") > 5 * 7 * 2
    with pytest.raises(dsrt.CheckpointError):
        dsrt.Checkpoint(tmp_path / "nowhere")


def test_log_callback_receives_messages():
    lines = []
    dsrt.set_log_callback(lambda level, message: lines.append((level, message)))
    try:
        dsrt.Config({"zero_optimization": {"stage": 1, "cpu_offload": False}})  # deprecated alias warns
    finally:
        dsrt.set_log_callback(None)
    assert any("cpu_offload" in message for _, message in lines)


def test_nccl_comm_calls_report_what_is_missing():
    if dsrt.has_feature("nccl"):
        pytest.skip("a GPU with NCCL is present: joining a one-rank NCCL world is tested by the C++ suite")
    try:
        unique_id = dsrt.Comm.nccl_unique_id()
    except dsrt.UnsupportedError as error:
        # A build without NCCL says so, and joining is refused the same way.
        assert "NCCL" in str(error)
        unique_id = bytes(128)
        with pytest.raises(dsrt.UnsupportedError):
            dsrt.Comm.nccl(unique_id, 0, 1, 0)
    else:
        # Built with NCCL on a machine without a GPU: the id is made (it needs no GPU), joining names the GPU.
        assert isinstance(unique_id, bytes) and len(unique_id) == 128 and any(unique_id)
        with pytest.raises(dsrt.DeviceError, match="GPU"):
            dsrt.Comm.nccl(unique_id, 0, 1, 0)
    with pytest.raises(dsrt.InvalidArgumentError, match="128 bytes"):
        dsrt.Comm.nccl(b"short", 0, 1, 0)
    with pytest.raises(dsrt.InvalidArgumentError, match="rank 2"):
        dsrt.Comm.nccl(unique_id, 2, 2, 0)
