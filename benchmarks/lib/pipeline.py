"""The training pipelines: `VaswaniTrainer` (token batches, fused label smoothing) against a stock
`Seq2SeqTrainer` running Marian with 64-sentence batches and `label_smoothing_factor=0.1`, both on the whole
training set for the optimizer steps that make about `--pipeline-tokens` real tokens (counted in the batches they
trained on).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import tempfile

import numpy as np
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
from hf_vaswani_training.recipe.trainer import VaswaniTrainer

from .harness import Stopwatch, interleaved
from .model_pairs import make_dataset, token_batches, trainer_arguments


class CountingCollator:
    """A data collator that records the real (non-pad) source and target tokens of every batch it makes."""

    def __init__(self, collator):
        self.collator = collator
        self.counts: list[tuple[int, int]] = []

    def __call__(self, features):
        batch = self.collator(features)
        self.counts.append((int(batch["attention_mask"].sum()), int((batch["labels"] != -100).sum())))
        return batch

    def tokens(self, batches: int) -> tuple[int, int]:
        """Tokens of the first `batches` batches (the DataLoader may have made one more ahead of time)."""
        used = self.counts[:batches]
        return sum(c[0] for c in used), sum(c[1] for c in used)


def bench_pipeline(ours, marian, tokenizer, ids, args) -> dict:
    """Both Trainers on the whole training set, each for the number of optimizer steps that makes about
    `--pipeline-tokens` real tokens; throughput is the tokens of the batches they trained on over `train()`'s time."""
    dataset = make_dataset(ids, range(len(ids["source"])))
    lengths = np.array([len(s) for s in ids["source"]]) + np.array([len(t) for t in ids["target"]])
    sampler_batches = token_batches(ids, args.max_tokens, None, args.seed)
    tokens_per_batch = {
        "ours": lengths.sum() / len(sampler_batches),
        "marian": lengths.mean() * 64,
    }
    max_steps = {name: max(2, round(args.pipeline_tokens / per_batch)) for name, per_batch in tokens_per_batch.items()}

    tokens = {}  # real (source, target) tokens of the batches each trained on

    def run(name):
        model = copy.deepcopy(ours if name == "ours" else marian).train()
        collator = CountingCollator(DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100))
        with tempfile.TemporaryDirectory() as output_dir:
            common = dict(model=model, train_dataset=dataset, processing_class=tokenizer, data_collator=collator)
            if name == "ours":  # token batches
                arguments_class, batching = VaswaniTrainingArguments, {"max_tokens": args.max_tokens}
            else:  # the stock sentence-count batches
                arguments_class, batching = Seq2SeqTrainingArguments, {"per_device_train_batch_size": 64}
            training_args = trainer_arguments(arguments_class, args, output_dir, max_steps=max_steps[name], **batching)
            if name == "ours":
                trainer = VaswaniTrainer(args=training_args, max_tokens=args.max_tokens, **common)
            else:
                trainer = Seq2SeqTrainer(args=training_args, **common)
            with Stopwatch(args.device) as watch, contextlib.redirect_stdout(io.StringIO()):
                trainer.train()  # the stdout it writes is its final metrics line
            steps = trainer.state.global_step
        del trainer, model
        gc.collect()
        tokens[name] = collator.tokens(steps)
        return watch

    timings = interleaved(["ours", "marian"], args.repeats, run, "pipeline")
    result = {
        "data": f"all {len(dataset)} training pairs, the first optimizer steps of an epoch",
        "ours_batching": f"VaswaniTrainer: TokenBatchSampler max_tokens={args.max_tokens}, fused label smoothing",
        "marian_batching": "Seq2SeqTrainer: 64 sentences, stock LabelSmoother (label_smoothing_factor=0.1)",
    }
    for name, timing in timings.items():
        source_tokens, target_tokens = tokens[name]
        s = timing["seconds"]
        result[name] = {
            **timing,
            "optimizer_steps": max_steps[name],
            "source_tokens": source_tokens,
            "target_tokens": target_tokens,
            "target_tokens_per_s": target_tokens / s,
            "tokens_per_s": (source_tokens + target_tokens) / s,
            "cpu_tokens_per_s": (source_tokens + target_tokens) / timing["cpu_seconds"],
        }
    return result
