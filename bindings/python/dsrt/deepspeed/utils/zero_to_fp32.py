"""deepspeed.utils.zero_to_fp32 over dsrt checkpoints: the fp32 weights of a checkpoint folder
(the one holding `latest`, e.g. the HF Trainer's output_dir/checkpoint-N), at any world size and
ZeRO stage, without an engine.

    get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None) -> OrderedDict of fp32 tensors
    convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir, output_file, tag=None)  # torch.save
    load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None) -> model (on the CPU)

Each save_checkpoint of the PyTorch front writes a zero_to_fp32.py beside `latest` that runs main()
below, as DeepSpeed writes its own: `python zero_to_fp32.py . pytorch_model.bin`.
"""

import argparse
import collections
import os

_FROZEN_FILE = "frozen_parameters.pt"


def _tag(checkpoint_dir, tag):
    if tag is not None:
        return tag
    latest = os.path.join(checkpoint_dir, "latest")
    if not os.path.isfile(latest):
        raise ValueError("no 'latest' file in %s: pass tag= (the folder of one checkpoint, e.g. global_step10)"
                         % checkpoint_dir)
    with open(latest) as f:
        return f.read().strip()


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None, exclude_frozen_parameters=False):
    """The fp32 master value of every trained parameter, by name, as CPU tensors; the frozen
    parameters the checkpoint holds (requires_grad=False, stored by the front in fp32) too, unless
    exclude_frozen_parameters. Parameters tied to another (e.g. an LM head sharing the embedding)
    appear once, under the name the model registered first: load with strict=False, as
    load_state_dict_from_zero_checkpoint does."""
    import torch

    from ... import _core

    from ... import _ds_read

    checkpoint_dir = os.fspath(checkpoint_dir)
    tag = _tag(checkpoint_dir, tag)
    state = collections.OrderedDict()
    if _ds_read.is_deepspeed_tag(os.path.join(checkpoint_dir, tag)):  # written by DeepSpeed itself
        ds = _ds_read.read(checkpoint_dir, tag)
        for name, value in zip(ds.names, ds.master):
            state[name] = torch.from_numpy(value)
        if not exclude_frozen_parameters:
            for name, _, value in ds.frozen:
                state[name] = torch.from_numpy(value)
        return state
    with _core.Checkpoint(checkpoint_dir, tag) as reader:
        for name in reader.names():
            state[name] = torch.from_numpy(reader.read(name))
    frozen = os.path.join(checkpoint_dir, tag, _FROZEN_FILE)
    if not exclude_frozen_parameters and os.path.isfile(frozen):
        for name, value in torch.load(frozen, map_location="cpu", weights_only=True).items():
            state[name] = value
    return state


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir, output_file, tag=None, exclude_frozen_parameters=False):
    """torch.save of get_fp32_state_dict_from_zero_checkpoint (pytorch_model.bin style). For a
    safetensors file without torch, use `dsrt zero-to-fp32 DIR OUT.safetensors` instead."""
    import torch

    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag, exclude_frozen_parameters)
    torch.save(state, output_file)
    return state


def load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None):
    """Moves model to the CPU, loads the checkpoint's fp32 weights into it (strict=False) and
    returns it, as DeepSpeed's does. The model must not be in use by an engine any more."""
    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag)
    model = model.cpu()
    model.load_state_dict(state, strict=False)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description="Consolidate the fp32 weights of a dsrt checkpoint folder into "
                                                 "one torch.save file (DeepSpeed's zero_to_fp32.py interface)")
    parser.add_argument("checkpoint_dir", help="the folder holding 'latest' and the checkpoint tags")
    parser.add_argument("output_file", help="where to write the state dict (e.g. pytorch_model.bin)")
    parser.add_argument("-t", "--tag", default=None, help="the checkpoint tag (default: the one 'latest' names)")
    parser.add_argument("--exclude_frozen_parameters", action="store_true", help="leave frozen parameters out")
    parser.add_argument("-d", "--debug", action="store_true", help="accepted for DeepSpeed's interface")
    args = parser.parse_args(argv)
    state = convert_zero_checkpoint_to_fp32_state_dict(args.checkpoint_dir, args.output_file, args.tag,
                                                       args.exclude_frozen_parameters)
    print("wrote %d tensors (%d values) to %s" % (len(state), sum(t.numel() for t in state.values()),
                                                  args.output_file))
    return 0
