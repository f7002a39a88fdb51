"""A tiny Hugging Face Trainer script: a randomly initialised GPT-2 (from its config, no weights
downloaded) on synthetic tokens. The same file runs on plain PyTorch and with `--deepspeed
ds_config.json` (on dsrt, through the `deepspeed` stand-in or `import dsrt.compat`), so the
tests can compare the two runs step by step.

    python train_gpt2.py --output_dir OUT [--deepspeed ds_config.json] [--max_steps 8]
        [--save_steps 4] [--gradient_accumulation_steps 1] [--weight_decay 0.0]
        [--learning_rate 5e-3] [--lr_scheduler_type constant] [--warmup_steps 0]
        [--resume_from_checkpoint OUT/checkpoint-4] [--dsrt_compat]

It writes OUT/losses.json (every micro-step's loss on rank 0, full precision, with the optimizer
step it belongs to; other ranks write losses_rank<R>.json) and, at the end,
trainer.save_model(OUT/final). With WORLD_SIZE ranks the data has WORLD_SIZE times the samples, so
a run of R ranks at --micro_batch B sees the batches of one process at --micro_batch R*B.
"""

import argparse
import json
import os
import sys


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--deepspeed", default=None)
    parser.add_argument("--max_steps", type=int, default=8)
    parser.add_argument("--save_steps", type=int, default=4)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--micro_batch", type=int, default=4)
    parser.add_argument("--weight_decay", type=float, default=0.0)
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--lr_scheduler_type", default="constant")
    parser.add_argument("--warmup_steps", type=int, default=0)
    parser.add_argument("--resume_from_checkpoint", default=None)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--dsrt_compat", action="store_true", help="run `import dsrt.compat` first")
    return parser.parse_args()


def main():
    args = parse()
    if args.dsrt_compat:
        import dsrt.compat  # noqa: F401  (the one line that makes `deepspeed` mean dsrt)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    micro_batch, seq = args.micro_batch, 16
    world = int(os.environ.get("WORLD_SIZE", "1"))
    samples = micro_batch * args.gradient_accumulation_steps * args.max_steps * world
    generator = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, 96, (samples, seq), generator=generator)
    # A learnable pattern: every odd position repeats the token before it.
    tokens[:, 1::2] = tokens[:, 0::2]
    dataset = [{"input_ids": t, "labels": t} for t in tokens]

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=96, n_positions=seq, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)

    losses = []

    class RecordingTrainer(Trainer):
        def _get_train_sampler(self, *_dataset):  # newer transformers pass the dataset
            return torch.utils.data.SequentialSampler(self.train_dataset)

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):  # num_items_in_batch (newer)
            result = super().compute_loss(model, inputs, return_outputs, **kwargs)
            loss = result[0] if return_outputs else result
            losses.append({"step": self.state.global_step + 1, "loss": loss.detach().float().item()})
            return result

    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=args.gradient_accumulation_steps, max_steps=args.max_steps,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, lr_scheduler_type=args.lr_scheduler_type,
        weight_decay=args.weight_decay, max_grad_norm=1.0, logging_steps=1, save_steps=args.save_steps,
        save_strategy="steps", report_to=[], seed=42, dataloader_num_workers=0, deepspeed=args.deepspeed,
        disable_tqdm=True, bf16=args.bf16, use_cpu=args.bf16 and not args.deepspeed)
    trainer = RecordingTrainer(model=model, args=training_args, train_dataset=dataset)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(os.path.join(args.output_dir, "final"))
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(args.output_dir, "losses.json" if rank == 0 else "losses_rank%d.json" % rank), "w") as f:
        json.dump(losses, f)
    engine = getattr(trainer, "deepspeed", None)
    print("trained", len(losses), "micro-steps; engine:", type(engine).__module__ if engine is not None else None,
          file=sys.stderr)


if __name__ == "__main__":
    main()
