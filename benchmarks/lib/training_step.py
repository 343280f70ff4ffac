"""The training step on the same batches: forward + backward + Adam step of both models on the SAME token-count
batches (`TokenBatchSampler`), with the same objective, label-smoothed cross-entropy (epsilon 0.1): ours fused in the
model with `loss_only=True`, Marian's logits through the same fused `F.cross_entropy(label_smoothing=0.1)`.
"""

from __future__ import annotations

import torch

from .harness import Stopwatch, interleaved, synchronize
from .mfu import training_flops
from .model_pairs import LABEL_SMOOTHING


def autocast(args):
    """bf16 autocast for training on an accelerator (fp32 master weights, as Trainer's --bf16 does)."""
    enabled = args.torch_dtype == torch.bfloat16
    return torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=enabled)


def training_step(model, batch, optimizer, args, is_ours: bool) -> None:
    """One optimizer step on the paper's objective, label-smoothed cross-entropy (epsilon 0.1, §5.4), for both.

    Ours computes it inside the model (fused, output layer at labelled positions only: `loss_only`, as
    `VaswaniTrainer` asks for it). MarianMTModel cannot smooth: its logits go through the same fused
    `F.cross_entropy(label_smoothing=0.1)`, the cheapest way to train Marian on that objective.
    """
    with autocast(args):
        if is_ours:
            loss = model(**batch, label_smoothing=LABEL_SMOOTHING, loss_only=True).loss
        else:
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}
            logits = model(**inputs).logits
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(),
                batch["labels"].flatten(),
                ignore_index=-100,
                label_smoothing=LABEL_SMOOTHING,
            )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def bench_training(models: dict, batches, args, config) -> dict:
    optimizers = {
        name: torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)
        for name, model in models.items()
    }
    for model in models.values():
        model.train()
    largest = max(batches, key=lambda b: b["input_ids"].numel() + b["labels"].numel())
    for name, model in models.items():  # first step: Adam state, allocator and kernel warm-up
        training_step(model, largest, optimizers[name], args, name == "ours")
    synchronize(args.device)
    target_tokens = sum(int((b["labels"] != -100).sum()) for b in batches)
    source_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].numel() + b["labels"].numel() for b in batches)
    flops = sum(training_flops(config, b) for b in batches)

    def run(name):
        with Stopwatch(args.device) as watch:
            for batch in batches:
                training_step(models[name], batch, optimizers[name], args, name == "ours")
        return watch

    timings = interleaved(list(models), args.repeats, run, "training step")
    result = {
        "batches": len(batches),
        "sentences": sum(int(b["input_ids"].shape[0]) for b in batches),
        "target_tokens": target_tokens,
        "source_tokens": source_tokens,
        "padding_fraction": 1 - (target_tokens + source_tokens) / padded,
        "flops": flops,
        "objective": "label-smoothed cross-entropy, epsilon 0.1, both (Marian's computed on its logits)",
    }
    for name, timing in timings.items():
        s = timing["seconds"]
        result[name] = {
            **timing,
            "target_tokens_per_s": target_tokens / s,
            "tokens_per_s": (target_tokens + source_tokens) / s,
            "cpu_tokens_per_s": (target_tokens + source_tokens) / timing["cpu_seconds"],
            "flop_per_s": flops / s,
        }
    return result
