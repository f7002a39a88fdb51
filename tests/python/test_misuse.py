"""Python misuse that used to corrupt data or fail with the wrong error: a NumPy view kept past
Tensor.release() at ZeRO-3, NUL characters and lone surrogates in strings passed to the library,
a non-bytes client state, an unknown export dtype, reserved checkpoint tags, and the contract of
Config.get_string on numeric keys."""
import os

import numpy as np
import pytest

import dsrt


def stage3_engine(tmp_path=None):
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine = dsrt.Engine(config)
    rng = np.random.default_rng(7)
    a = engine.add_param("a", init=rng.standard_normal((64, 8)).astype(np.float32))
    b = engine.add_param("b", init=rng.standard_normal((64, 8)).astype(np.float32))
    engine.build()
    return engine, a, b


def test_a_numpy_view_kept_past_release_never_aliases_a_later_gather():
    engine, a, b = stage3_engine()
    stale = a.acquire().numpy()
    a_values = stale.copy()
    a.release()
    view = b.acquire()
    fresh = view.numpy()
    b_values = fresh.copy()
    assert not np.shares_memory(stale, fresh)
    stale[...] = 12345.0  # a write through the released view
    np.testing.assert_array_equal(fresh, b_values)  # does not reach b's working copy
    b.release()
    # Gathered again, both tensors still hold their own values.
    with a as again:
        np.testing.assert_array_equal(again.numpy(), a_values)
    with b as again:
        np.testing.assert_array_equal(again.numpy(), b_values)
    engine.close()


def test_a_private_copy_is_reused_only_once_no_view_of_it_is_left():
    engine, a, b = stage3_engine()
    first = a.acquire().numpy()
    address, a_values = first.ctypes.data, first.copy()
    del first  # no view of a's copy is left: released, it is free for the next acquire
    a.release()
    held = b.acquire().numpy()
    b_values = held.copy()
    assert held.ctypes.data == address
    with a as again:  # b's view still holds that buffer: a gets another one
        assert again.numpy().ctypes.data != address
        np.testing.assert_array_equal(again.numpy(), a_values)
    np.testing.assert_array_equal(held, b_values)
    b.release()
    with b as again:
        np.testing.assert_array_equal(again.numpy(), b_values)
    engine.close()


def test_nested_acquires_share_one_view_of_the_gathered_tensor():
    engine, a, _ = stage3_engine()
    outer = a.acquire().numpy()
    inner = a.acquire().numpy()
    assert np.shares_memory(outer, inner)
    a.release()
    a.release()
    engine.close()


def test_nul_characters_raise_instead_of_truncating(tmp_path):
    with pytest.raises(dsrt.InvalidArgumentError, match="NUL"):
        dsrt.Config.from_json('{"train_batch_size": 8}\x00{"this": "was ignored"}')
    with pytest.raises(dsrt.InvalidArgumentError, match="NUL"):
        dsrt.Config(str(tmp_path / "ds_config.json\x00.txt"))
    engine = dsrt.Engine({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}})
    with pytest.raises(dsrt.InvalidArgumentError, match="NUL"):
        engine.add_param("layer\x00.weight", shape=(4,))
    engine.close()


def test_lone_surrogates_raise_dsrt_errors():
    with pytest.raises(dsrt.InvalidArgumentError, match="not valid Unicode"):
        dsrt.Config.from_json('{"train_batch_size": 8, "\ud800": 1}')
    config = dsrt.Config({"train_batch_size": 8})
    with pytest.raises(dsrt.InvalidArgumentError):
        config.get_number("\udcff")
    assert isinstance(dsrt.InvalidArgumentError(0, ""), ValueError)


def test_client_state_takes_bytes_like_values_only():
    engine = dsrt.Engine({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}})
    for bad in (12345, "text", 1.5, None):
        with pytest.raises(dsrt.InvalidArgumentError, match="bytes-like"):
            engine.client_state = bad
    assert engine.client_state == b""
    engine.client_state = bytearray(b"abc")
    assert engine.client_state == b"abc"
    engine.client_state = memoryview(b"xyz")
    assert engine.client_state == b"xyz"
    engine.close()


def test_checkpoint_export_dtype_and_reserved_tags(tmp_path):
    engine = dsrt.Engine({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}})
    engine.add_param("w", init=np.ones((3, 4), np.float32))
    engine.build()
    for tag in ("latest", "latest.tmp"):
        with pytest.raises(dsrt.InvalidArgumentError, match="reserved|latest"):
            engine.save_checkpoint(tmp_path, tag)
    engine.save_checkpoint(tmp_path, "t")
    engine.close()
    with dsrt.Checkpoint(tmp_path) as ckpt:
        for bad in ("int8", "float64", 7, -1):
            with pytest.raises(dsrt.InvalidArgumentError):
                ckpt.export_safetensors(tmp_path / "model.safetensors", dtype=bad)
        assert not os.path.exists(tmp_path / "model.safetensors.tmp")
        ckpt.export_safetensors(tmp_path / "model.safetensors", dtype="bf16")
        assert os.path.exists(tmp_path / "model.safetensors")


def test_get_string_of_a_numeric_key_gives_its_text():
    # The documented contract: numbers and booleans come back as text, so bindings read any
    # scalar one way.
    config = dsrt.Config({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.00025}},
                          "fp16": {"enabled": True}})
    assert config.get_string("optimizer.params.lr") == "0.00025"
    assert config.get_string("fp16.enabled") == "true"
    assert config.get_string("optimizer.type") == "AdamW"
    with pytest.raises(dsrt.ConfigError):
        config.get_string("no_such_key")


def test_a_shared_acquire_reuses_a_live_copy_only_while_the_shards_are_unchanged():
    engine, a, b = stage3_engine()
    kept = a.acquire().numpy()
    a.release()
    shared = a._acquire(True).numpy()  # the torch front's backward gather: the live copy is shared
    assert np.shares_memory(kept, shared)
    a.release()
    del shared
    values = np.arange(a.numel, dtype=np.float32).reshape(a.shape)
    a.write_fp32(values)  # the shards changed: the live copy is stale and never shared again
    fresh = a._acquire(True).numpy()
    assert not np.shares_memory(kept, fresh)
    np.testing.assert_array_equal(fresh, values)
    a.release()
    del kept, fresh
    shared = b._acquire(True).numpy()  # no live copy of b: copied
    b_values = shared.copy()
    b.release()
    del shared
    with b as again:
        np.testing.assert_array_equal(again.numpy(), b_values)
    engine.close()


def test_a_shared_acquire_always_copies_with_quantized_weights():
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                    "zero_quantized_weights": True}}
    engine = dsrt.Engine(config)
    a = engine.add_param("a", init=np.random.default_rng(8).standard_normal((64, 8)).astype(np.float32))
    engine.build()
    kept = a.acquire().numpy()
    a.release()
    again = a._acquire(True).numpy()
    assert not np.shares_memory(kept, again)
    a.release()
    engine.close()
