"""A tiny Accelerate training loop: GPT-2 loaded with from_pretrained (weights the test saved from
a random init), synthetic tokens, Accelerator().prepare, accelerator.backward, then
accelerator.get_state_dict and save_pretrained. The same file runs on plain PyTorch and, with the
environment `accelerate launch --use_deepspeed` exports (ACCELERATE_USE_DEEPSPEED, a
deepspeed_config_file or the plugin's zero stage, offload, zero3_init and zero3_save_16bit_model),
on dsrt: the config's optimizer and scheduler through DummyOptim/DummyScheduler, or a torch AdamW
when the config has none.

    python accelerate_gpt2.py INIT_DIR OUT_DIR [--dsrt_compat]

Writes OUT_DIR/losses.json and OUT_DIR/final (save_pretrained).
"""

import json
import os
import sys

LR = 5e-3


def main():
    init_dir, out_dir = sys.argv[1], sys.argv[2]
    if "--dsrt_compat" in sys.argv:
        import dsrt.compat  # noqa: F401
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    accelerator = Accelerator()
    plugin = accelerator.state.deepspeed_plugin
    model = AutoModelForCausalLM.from_pretrained(init_dir, local_files_only=True)
    tokens = torch.randint(0, 96, (32, 16), generator=torch.Generator().manual_seed(99))
    tokens[:, 1::2] = tokens[:, 0::2]
    dataset = [{"input_ids": t, "labels": t} for t in tokens]
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=False)
    if plugin is not None and "optimizer" in plugin.deepspeed_config:
        from accelerate.utils import DummyOptim, DummyScheduler  # there only where DeepSpeed is
        optimizer = DummyOptim(model.parameters(), lr=LR)
        scheduler = DummyScheduler(optimizer)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        scheduler = None
    if scheduler is None:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    else:
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    model.train()
    for batch in loader:
        loss = model(**batch).loss
        losses.append(loss.item())
        accelerator.backward(loss)
        if plugin is None:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)  # DeepSpeed's gradient_clipping 1.0
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
    state = accelerator.get_state_dict(model)
    accelerator.unwrap_model(model).save_pretrained(os.path.join(out_dir, "final"),
                                                    is_main_process=accelerator.is_main_process,
                                                    save_function=accelerator.save, state_dict=state)
    with open(os.path.join(out_dir, "losses.json"), "w") as f:
        json.dump([{"loss": value} for value in losses], f)
    print("engine:", type(model).__module__, file=sys.stderr)


if __name__ == "__main__":
    main()
