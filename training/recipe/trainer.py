"""`Seq2SeqTrainer` with the three things the paper's recipe needs and the stock Trainer lacks.

- Token-count batches (fairseq's --max-tokens) through `TokenBatchSampler`, rank-aware under Accelerate.
- Label smoothing computed inside the model's fused `cross_entropy(label_smoothing=...)` instead of the Trainer's
  `LabelSmoother`, which materialises a full log-softmax copy of the logits.
- Throughput in the logs (non-pad source and target tokens per second), a wall-clock budget, and a hard stop
  on a non-finite loss or gradient before the optimizer applies it.
- Evaluation that decodes the validation split the way `translate` does (training/decoding.py: length-sorted
  batches of at most --eval_max_tokens source tokens, outputs back in input order) instead of the stock
  predict_with_generate loop (8 sentences a batch in dataset order, padded to the longest of each), and scores
  it with the project's sacreBLEU/chrF metric; eval_loss still comes from the stock loop.

And crash-safe checkpoints: the stock Trainer writes `checkpoint-N` file by file, so a run killed during a save
leaves a half-written folder that `get_last_checkpoint` picks, and every resume then dies on it (FileNotFoundError
for trainer_state.json, or a safetensors header error) until someone deletes it by hand. Here a checkpoint is
written to `.tmp-checkpoint-N` and renamed to `checkpoint-N` once every file is on disk, and resuming skips or
refuses, naming the file, folders that are incomplete anyway (older runs, copies). What a complete checkpoint is
and how it is written lives in training/checkpoints.py.
"""

import logging
import math
import os
import shutil
import time

import torch
from accelerate.utils import gather_object
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.distributed.fsdp import is_fsdp_managed_module
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import SaveStrategy, rotate_checkpoints

from ..data.batching import TokenBatchSampler
from ..data.cache import sequence_lengths
from ..serving.decoding import translate_ids
from .checkpoints import (
    checkpoint_name,
    checkpoint_problem,
    last_complete_checkpoint,
    publish,
    staging_dir_for,
    stale_staging_dirs,
)

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the weights were not updated with it."""


class NonFiniteGradientError(NonFiniteLossError):
    """The loss was finite but its gradients were not (an overflow in the backward pass); no update was made."""


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


class _TokenBatchSummary(logging.Filter):
    """Rewrites the stock Trainer's "batch size per device" lines into the token budget that token batches have."""

    def __init__(self, max_tokens: int, accumulation: int, processes: int):
        super().__init__()
        self.per_device = f"  Tokens per batch per device <= {max_tokens:,} (padded, each side; --max_tokens)"
        per_update = max_tokens * accumulation * processes
        self.per_update = (
            f"  Tokens per update <= {per_update:,} per side (--max_tokens {max_tokens:,} x "
            f"gradient accumulation {accumulation} x {processes} processes)"
        )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "Instantaneous batch size per device" in message:
            record.msg, record.args = self.per_device, None
        elif "Total train batch size" in message:
            record.msg, record.args = self.per_update, None
        elif "Training with DataParallel so batch size" in message:
            return False
        return True


class VaswaniTrainer(Seq2SeqTrainer):
    def __init__(self, *args, max_tokens: int | None = None, translation_metric=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens or None
        # The `evaluate` module of training/metrics; with predict_with_generate it makes evaluation decode through
        # training/decoding.py (see evaluation_loop) instead of compute_metrics on the stock generated tokens.
        self.translation_metric = translation_metric
        self._decoding_evaluation = False
        if self.args.label_names is None:
            # The stock guess takes every forward argument named like a label, here also `label_smoothing`, which
            # no batch holds: evaluation then saw no labels and never reported eval_loss.
            self.label_names = ["labels"]
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
            # From the Arrow offsets: walking 4.5M rows of ids in Python took minutes at WMT size.
            source_lengths=sequence_lengths(dataset, "input_ids"),
            target_lengths=sequence_lengths(dataset, "labels"),
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
        if "labels" in inputs:
            # Smoothed in training only: eval_loss stays the plain cross-entropy, as Seq2SeqTrainer's own
            # predict_with_generate step computes it (a log-perplexity comparable across smoothing settings).
            if self.args.label_smoothing_factor and model.training:
                inputs = {**inputs, "label_smoothing": self.args.label_smoothing_factor}
            if not return_outputs:  # a training step needs only the loss: no logits for padding positions
                inputs = {**inputs, "loss_only": True}
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._tokens_since_log += int(inputs["attention_mask"].sum()) + int((inputs["labels"] != -100).sum())
        loss = super().training_step(model, inputs, num_items_in_batch)
        # Checked before the optimizer step, so the weights (and every checkpoint) stay finite.
        if not torch.isfinite(loss).all():
            raise NonFiniteLossError(
                f"Training loss became {loss.item()} at step {self.state.global_step + 1}; {self._how_to_recover()}"
            )
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        # A finite loss can still have non-finite gradients (an overflow in the backward pass), and one Adam step
        # with them writes NaN into the weights. The stock loop computes this norm before every optimizer step.
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        # Under fp16 the gradient scaler expects inf/NaN now and then: it skips that step and lowers the scale.
        if grad_norm is not None and getattr(self.accelerator, "scaler", None) is None:
            value = float(grad_norm)
            if not math.isfinite(value):
                raise NonFiniteGradientError(
                    f"Gradient norm became {value} at step {self.state.global_step + 1} (the loss was finite); "
                    f"{self._how_to_recover()}"
                )
        return grad_norm

    def _how_to_recover(self) -> str:
        last = last_complete_checkpoint(self.args.output_dir)
        if last is None:
            return (
                f"stopping before the update. No checkpoint was saved in {self.args.output_dir} before it: lower "
                "the learning rate or check the data and start again."
            )
        return (
            f"stopping before the update. The last checkpoint, {last}, is intact: lower the learning rate or check "
            "the data, then resume from it with --resume_from_checkpoint."
        )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            now = time.monotonic()
            tokens = self._tokens_since_log * self.args.world_size  # each rank counts its own batches
            logs["tokens_per_second"] = round(tokens / max(now - self._time_of_last_log, 1e-9), 1)
            self._tokens_since_log, self._time_of_last_log = 0, now
        super().log(logs, start_time)

    # ---- evaluation: decoded like translate() ---------------------------------------------------------------------

    def _decodes_for_metrics(self) -> bool:
        if not self.args.predict_with_generate or self.translation_metric is None or self.args.prediction_loss_only:
            return False
        # generate() under ZeRO-3/FSDP needs every rank in every step (synced_gpus); the stock loop does that.
        return not (is_deepspeed_zero3_enabled() or is_fsdp_managed_module(self.model))

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs):
        self._decoding_evaluation = self._decodes_for_metrics()
        try:
            return super().evaluate(
                eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **gen_kwargs
            )
        finally:
            self._decoding_evaluation = False

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """The stock loop for eval_loss (forward passes only), then BLEU and chrF of the split decoded by
        `decoding.translate_ids`, the function behind `translate` and the final evaluation.

        Several processes shard the decoding: every rank takes every world_size-th of the same length-sorted
        batches, the hypotheses are gathered (`gather_object`) and every rank scores the whole split, so all of
        them log and return the same metrics.
        """
        if not self._decoding_evaluation:
            return super().evaluation_loop(
                dataloader,
                description,
                prediction_loss_only,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
        output = super().evaluation_loop(
            dataloader,
            description,
            prediction_loss_only=True,
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        dataset = dataloader.dataset
        if "labels" not in getattr(dataset, "column_names", ()):
            return output  # nothing to score against
        # Lists, not datasets' lazy Column: translate_ids indexes the sources batch by batch.
        hypotheses = self.decode_for_evaluation(list(dataset["input_ids"]))
        labels = list(dataset["labels"])
        # The references the stock compute_metrics scored against: the labels detokenized.
        pad = self.processing_class.pad_token_id
        references = self.processing_class.batch_decode(
            [[pad if token == -100 else token for token in ids] for ids in labels], skip_special_tokens=True
        )
        scores = self.translation_metric.compute(predictions=hypotheses, references=references)
        output.metrics.update(
            {f"{metric_key_prefix}_bleu": scores["bleu"], f"{metric_key_prefix}_chrf": scores["chrf"]}
        )
        return output

    def decode_for_evaluation(self, input_ids) -> list[str]:
        """Hypotheses for every source of `input_ids` (token ids), in their order, on every process."""
        gen_kwargs = {key: value for key, value in getattr(self, "_gen_kwargs", {}).items() if value is not None}
        world_size, rank = self.args.world_size, self.args.process_index
        eval_max_tokens = getattr(self.args, "eval_max_tokens", 6000)
        ours = translate_ids(
            self.model,
            self.processing_class,
            input_ids,
            max_tokens=eval_max_tokens,
            shard=(rank, world_size),
            **gen_kwargs,
        )
        if world_size == 1:
            return ours
        hypotheses: list = [None] * len(input_ids)
        for index, text in gather_object([(i, text) for i, text in enumerate(ours) if text is not None]):
            hypotheses[index] = text
        return hypotheses

    # ---- crash-safe checkpoints ---------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """`Trainer.train`, resuming only from complete checkpoints.

        `resume_from_checkpoint=True` takes the last complete `checkpoint-N` (the stock code takes the last one,
        complete or not); a path to an incomplete checkpoint is a ValueError naming the missing or broken file
        (the stock code loads its weights first and then fails on whichever file is missing or cut short).
        """
        if self.args.should_save:
            for stale in stale_staging_dirs(self.args.output_dir):
                logger.warning("Removing %s, left by an interrupted save", stale)
                shutil.rmtree(stale, ignore_errors=True)
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"No complete checkpoint found in output directory ({self.args.output_dir})")
        elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
            problem = checkpoint_problem(resume_from_checkpoint)
            if problem is not None:
                raise ValueError(
                    f"Cannot resume from {resume_from_checkpoint}: {problem}. Resume from an earlier checkpoint "
                    "(--resume_from_checkpoint True picks the last complete one)."
                )
        if self.max_tokens is None:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)
        # The stock start-of-training summary counts sentences per batch, which token batches do not have.
        token_lines = _TokenBatchSummary(self.max_tokens, self.args.gradient_accumulation_steps, self.args.world_size)
        trainer_logger = logging.getLogger("transformers.trainer")
        trainer_logger.addFilter(token_lines)
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)
        finally:
            trainer_logger.removeFilter(token_lines)

    def _save_checkpoint(self, model, trial) -> None:
        """The stock `Trainer._save_checkpoint` of transformers 5.23-5.24 (weights, optimizer, scheduler, scaler, RNG,
        trainer state, push, rotation), written to `.tmp-checkpoint-N` and renamed to `checkpoint-N` once all of
        it is on disk: a crash at any point leaves either the complete `checkpoint-N` or no `checkpoint-N` at all.

        Forked because the stock method builds the folder path inline and writes each file straight into it, and
        the only callback, `on_save`, runs after the whole save (rotation included); no hook can redirect it.
        What the fork changes, and nothing else: (1) it writes into the staging folder, removing a stale one
        first; (2) `best_model_checkpoint` may name the current step, whose folder exists only once published;
        (3) every process waits (`accelerator.wait_for_everyone`) before the rename, then the main process
        `publish`es the folder (fsync, rename); (4) the Hub push and the rotation see the published folder.
        Re-read the stock method when upgrading transformers: tests/test_reliability.py fails on a release whose
        stock method differs from the one this was read against.
        """
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial=trial)
        output_dir = os.path.join(run_dir, checkpoint_name(self.state.global_step))
        staging_dir = str(staging_dir_for(output_dir))
        if self.args.should_save and os.path.exists(staging_dir):
            logger.warning("Removing %s, left by an interrupted save", staging_dir)
            shutil.rmtree(staging_dir)
        # No process writes into the staging folder before it is clean.
        self.accelerator.wait_for_everyone()

        self.save_model(staging_dir, _internal_call=True)
        if self.args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST) and (
            self.state.best_global_step
        ):
            self.accelerator.wait_for_everyone()
            best_checkpoint_dir = os.path.join(run_dir, checkpoint_name(self.state.best_global_step))
            # The current step's folder is still staged; it exists under its final name once published.
            if self.state.best_global_step == self.state.global_step or os.path.exists(best_checkpoint_dir):
                self.state.best_model_checkpoint = best_checkpoint_dir
        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(staging_dir)
            self._save_scaler(staging_dir)
            self._save_rng_state(staging_dir)
        if self.args.should_save:
            for callback in [*self.callback_handler.callbacks, self.control]:
                if not isinstance(callback, ExportableState):
                    continue
                name = callback.__class__.__name__
                if isinstance(self.state.stateful_callbacks[name], list):
                    self.state.stateful_callbacks[name].append(callback.state())
                else:
                    self.state.stateful_callbacks[name] = callback.state()
            # Written last: its presence is what marks a stock-written checkpoint complete (see checkpoint_problem).
            self.state.save_to_json(os.path.join(staging_dir, TRAINER_STATE_NAME))

        # Every process has written its part (rng_state_<rank>.pth) before the folder gets its final name.
        self.accelerator.wait_for_everyone()
        # With save_on_each_node on a shared disk, another node may have published it already.
        if self.args.should_save and os.path.isdir(staging_dir):
            publish(staging_dir, output_dir)
        self.accelerator.wait_for_everyone()

        if self.args.push_to_hub:
            self._push_from_checkpoint(output_dir)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )
