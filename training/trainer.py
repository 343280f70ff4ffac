"""`Seq2SeqTrainer` with the three things the paper's recipe needs and the stock Trainer lacks.

- Token-count batches (fairseq's --max-tokens) through `TokenBatchSampler`, rank-aware under Accelerate.
- Label smoothing computed inside the model's fused `cross_entropy(label_smoothing=...)` instead of the Trainer's
  `LabelSmoother`, which materialises a full log-softmax copy of the logits.
- Throughput in the logs (non-pad source and target tokens per second), a wall-clock budget, and a hard stop
  on a non-finite loss before the optimizer applies it.
"""

import logging
import time

import torch
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training.batching import TokenBatchSampler

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the weights were not updated with it."""


class TimeBudgetCallback(TrainerCallback):
    """Stops training (with a final save) once `max_minutes` of wall-clock time have passed."""

    def __init__(self, max_minutes: float):
        self.max_seconds = max_minutes * 60
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if time.monotonic() - self.start >= self.max_seconds:
            logger.info("Time budget of %.1f min reached at step %d", self.max_seconds / 60, state.global_step)
            control.should_training_stop = True
            control.should_save = True
        return control


class VaswaniTrainer(Seq2SeqTrainer):
    def __init__(self, *args, max_tokens: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens or None
        # The model applies label smoothing itself (see compute_loss); the stock smoother would pop the labels.
        self.label_smoother = None
        self._tokens_since_log = 0
        self._time_of_last_log = time.monotonic()

    # ---- token-count batches ------------------------------------------------------------------------------------

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens is None:
            return super().get_train_dataloader()
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        sampler = TokenBatchSampler(
            source_lengths=[len(ids) for ids in dataset["input_ids"]],
            target_lengths=[len(ids) for ids in dataset["labels"]],
            max_tokens=self.max_tokens,
            shuffle=True,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=self.args.world_size,
            rank=self.args.process_index,
        )
        dataloader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and torch.cuda.is_available(),
        )
        dataloader = self.accelerator.prepare(dataloader)
        # The sampler already gives each rank its own batches (the same number on every rank); the
        # BatchSamplerShard that `prepare` wraps around it would shard them a second time.
        prepared = getattr(dataloader, "batch_sampler", None)
        if prepared is not None and getattr(prepared, "batch_sampler", None) is sampler:
            prepared.num_processes = 1
            prepared.process_index = 0
        return dataloader

    # ---- loss ---------------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.args.label_smoothing_factor and "labels" in inputs:
            inputs = {**inputs, "label_smoothing": self.args.label_smoothing_factor}
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._tokens_since_log += int(inputs["attention_mask"].sum()) + int((inputs["labels"] != -100).sum())
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Checked before the optimizer step, so the weights (and every checkpoint) stay finite.
        if not torch.isfinite(loss).all():
            raise NonFiniteLossError(
                f"Training loss became {loss.item()} at step {self.state.global_step + 1}; stopping before the "
                f"update. The last checkpoint in {self.args.output_dir} is intact: lower the learning rate or "
                "check the data, then resume from it with --resume_from_checkpoint."
            )
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            now = time.monotonic()
            tokens = self._tokens_since_log * self.args.world_size  # each rank counts its own batches
            logs["tokens_per_second"] = round(tokens / max(now - self._time_of_last_log, 1e-9), 1)
            self._tokens_since_log, self._time_of_last_log = 0, now
        super().log(logs, start_time)


def paper_learning_rate(d_model: int, warmup_steps: float) -> float:
    """The peak of lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), reached at step = warmup (§5.3)."""
    if warmup_steps < 1:
        raise ValueError(
            f"--warmup_steps={warmup_steps} is a ratio; the paper's learning rate needs a number of steps "
            "(or give --learning_rate explicitly)"
        )
    return d_model**-0.5 * warmup_steps**-0.5
