"""The three training paths the GPU benchmark compares, each as one pass over a fixed list of token batches, timed by a
`StepClock` (one mark per optimizer update):

- `trainer`: the recipe's own path: `VaswaniTrainer` with `VaswaniTrainingArguments` (label smoothing inside the
  model, fused AdamW with the paper's betas and epsilon, the inverse-square-root schedule), the recipe's collator,
  batches from its own `get_train_dataloader` (a new trainer with the same seed draws the same batches);
- `marian`: `MarianMTModel` configured alike under the stock `Seq2SeqTrainer` (`label_smoothing_factor=0.1`, the same
  optimizer and schedule), fed the same batches (one dataset row per token batch) through the stock
  `DataCollatorForSeq2Seq` (padded to a multiple of 8 on a GPU, as a stock user would);
- `lean`: our model in a bare loop: forward with the loss, backward, fused AdamW step, schedule; no Trainer; the
  recipe's batches and collator.
"""

from __future__ import annotations

import contextlib
import tempfile
import time

import torch
from transformers import (
    DataCollatorForSeq2Seq,
    MarianMTModel,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

from .machine import StepClock
from .model_pairs import LABEL_SMOOTHING, PAPER_OPTIMIZER, marian_config
from .wmt_data import features, paper_lr


class ClockCallback(TrainerCallback):
    def __init__(self, clock: StepClock):
        self.clock = clock

    def on_train_begin(self, args, state, control, **kwargs):
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.clock.mark():
            control.should_training_stop = True
        return control


def common_training_arguments(output_dir: str, cuda: bool, precision: str, compile_model: bool, steps: int,
                              accumulation: int, seed: int, d_model: int) -> dict:  # fmt: skip
    return dict(
        output_dir=output_dir,
        max_steps=steps,
        gradient_accumulation_steps=accumulation,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        torch_compile=compile_model,
        use_cpu=not cuda,
        learning_rate=paper_lr(d_model),
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=4000,
        **PAPER_OPTIMIZER,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        predict_with_generate=False,
    )


def recipe_collator(tokenizer, model, cuda: bool):
    """The recipe's collator as it runs on this device (training/recipe/train.py's make_data_collator)."""
    from hf_vaswani_training.recipe.train import make_data_collator

    return make_data_collator(tokenizer, model, pad_to_multiple_of=8 if cuda else None)


def vaswani_trainer(model, data, dataset, spec, clock: StepClock | None, output_dir: str):
    """A VaswaniTrainer as the recipe builds it, for `spec` (steps, accumulation, max_tokens, precision, ...)."""
    from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
    from hf_vaswani_training.recipe.trainer import VaswaniTrainer

    values = common_training_arguments(output_dir, spec["cuda"], spec["precision"], spec["compile"], spec["steps"],
                                       spec["accumulation"], spec["seed"], model.config.d_model)  # fmt: skip
    values.update(max_tokens=spec["max_tokens"], average_last_n=0)
    return VaswaniTrainer(
        model=model,
        args=VaswaniTrainingArguments(**values),
        train_dataset=dataset,
        processing_class=data.tokenizer,
        data_collator=recipe_collator(data.tokenizer, model, spec["cuda"]),
        callbacks=[ClockCallback(clock)] if clock is not None else [],
        max_tokens=spec["max_tokens"],
        batch_shapes=spec.get("batch_shapes", "auto"),
    )


def trainer_settings(trainer) -> dict:
    optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    return {
        "optimizer": f"{type(optimizer).__name__}(fused={optimizer.defaults.get('fused')}, "
        f"betas={optimizer.defaults.get('betas')}, eps={optimizer.defaults.get('eps')})",
        "dataloader_num_workers": trainer.args.dataloader_num_workers,
        "pin_memory": trainer.args.dataloader_pin_memory,
    }


def trainer_pass(model, data, dataset, spec, clock: StepClock, micro: list[list[int]]) -> dict:
    """One pass of the recipe's path: a new VaswaniTrainer, whose own sampler must give `micro` first (the same
    seed gives the pass before's batches; checked, so that "warm" is never a claim only)."""
    from .wmt_data import micro_batches, recipe_batching

    with tempfile.TemporaryDirectory() as output_dir:
        trainer = vaswani_trainer(model, data, dataset, spec, clock, output_dir)
        if micro_batches(recipe_batching(trainer)[0], len(micro)) != micro:
            raise RuntimeError("the trainer's own batches are not the planned ones: cold and warm would differ")
        clock.start()
        trainer.train()
        return trainer_settings(trainer)


class BatchRows:
    """A dataset whose row i is the i-th token batch: the stock Trainer (batch size 1) then runs the same batches."""

    def __init__(self, data, batches):
        self.data, self.batches = data, batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return features(self.data, self.batches[i])


def stock_collator(tokenizer, model, cuda: bool):
    return DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=8 if cuda else None
    )


def marian_model(ours_config):
    return MarianMTModel._from_config(marian_config(ours_config), attn_implementation="sdpa")


def marian_pass(marian, data, micro, spec, clock: StepClock) -> dict:
    """MarianMTModel under the stock Seq2SeqTrainer over `micro` (a new trainer each pass, the same batches)."""
    collator = stock_collator(data.tokenizer, marian, spec["cuda"])
    with tempfile.TemporaryDirectory() as output_dir:
        values = common_training_arguments(output_dir, spec["cuda"], spec["precision"], spec["compile"], spec["steps"],
                                           spec["accumulation"], spec["seed"], marian.config.d_model)  # fmt: skip
        values.update(per_device_train_batch_size=1, train_sampling_strategy="sequential", remove_unused_columns=False)
        trainer = Seq2SeqTrainer(
            model=marian,
            args=Seq2SeqTrainingArguments(**values),
            train_dataset=BatchRows(data, micro),
            processing_class=data.tokenizer,
            data_collator=lambda rows: collator(rows[0]),
            callbacks=[ClockCallback(clock)],
        )
        clock.start()
        trainer.train()
    return {"batches": "the recipe's token batches, one dataset row each", "label_smoothing": "LabelSmoother"}


class LeanLoop:
    """Forward with the loss, backward, fused AdamW, schedule: the floor a Trainer's overhead is measured against.
    Its optimizer and compiled forward persist from one pass to the next."""

    def __init__(self, model, spec, device, collate, warmup: int = 4000, lr: float | None = None):
        self.model, self.spec, self.device, self.collate = model.to(device), spec, device, collate
        model.train()
        d_model = model.config.d_model
        fused = device.type == "cuda"
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr or paper_lr(d_model, warmup), betas=(0.9, 0.98),
                                           eps=1e-9, weight_decay=0.0, fused=fused)  # fmt: skip
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min((step + 1) ** -0.5, (step + 1) * warmup**-1.5) * warmup**0.5
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=spec["precision"] == "fp16")
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec["precision"])
        self.step_fn = torch.compile(model) if spec["compile"] else model

    def run(self, data, micro, clock: StepClock, stop_after_s: float | None = None) -> dict:
        from torch.utils.data import DataLoader

        cuda = self.device.type == "cuda"
        loader = DataLoader(
            micro, batch_size=None, collate_fn=lambda indices: self.collate(features(data, indices)),
            pin_memory=cuda, num_workers=2 if cuda else 0,
        )  # fmt: skip
        accumulation = self.spec["accumulation"]
        clock.start()
        for index, batch in enumerate(loader):
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                loss = self.step_fn(**batch, label_smoothing=LABEL_SMOOTHING, loss_only=True).loss
            self.scaler.scale(loss / accumulation).backward()
            if (index + 1) % accumulation:
                continue
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.schedule.step()
            if clock.mark():
                break
        return {"optimizer": f"AdamW(fused={self.device.type == 'cuda'})", "dataloader_num_workers": 2 if cuda else 0}


def dynamo_counts() -> dict:
    """Graphs compiled and graph breaks so far in this process (torch._dynamo's counters)."""
    with contextlib.suppress(Exception):
        from torch._dynamo.utils import counters

        return {
            "unique_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values())),
        }
    return {"unique_graphs": 0, "graph_breaks": 0}


def elapsed_since(started: float) -> float:
    return time.perf_counter() - started
