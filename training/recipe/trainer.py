"""`Seq2SeqTrainer` with what the paper's recipe needs and the stock Trainer lacks.

- Token-count batches (fairseq's --max-tokens) through `TokenBatchSampler`, rank-aware under Accelerate.
- Label smoothing computed inside the model's fused `cross_entropy(label_smoothing=...)` instead of the Trainer's
  `LabelSmoother`, which materialises a full log-softmax copy of the logits.
- Throughput in the logs (non-pad source and target tokens per second), a wall-clock budget, and a hard stop
  on a non-finite loss or gradient before the optimizer applies it (on a GPU the fused AdamW step skips it on the
  device and the stop comes at the next log or checkpoint: no host-device synchronisation in a training step).
- A run that ends honestly: the budget records where it stopped, `TrainingClock` keeps the training time of every
  resumed segment in the checkpoints, and resuming from a checkpoint already at --max_steps trains nothing (the
  stock loop trains one step more and changes the final model).
- With VASWANI_BATCH_LOG=DIR, a record of what each process trained on and of its final weights (`BatchLog`), to
  check data parallelism from outside: ranks that share sentences or end with different weights show in it.
- Evaluation that decodes the validation split the way vaswani-translate does (training/serving/decoding.py:
  length-sorted batches of at most --eval_max_tokens source tokens, outputs back in input order) instead of the stock
  predict_with_generate loop (8 sentences a batch in dataset order, padded to the longest of each), and scores
  it with the project's sacreBLEU/chrF metric; eval_loss still comes from the stock loop.

And crash-safe checkpoints: the stock Trainer writes `checkpoint-N` file by file, so a run killed during a save
leaves a half-written folder that `get_last_checkpoint` picks, and every resume then dies on it (FileNotFoundError
for trainer_state.json, or a safetensors header error) until someone deletes it by hand. Here a checkpoint is
written to `.tmp-checkpoint-N` and renamed to `checkpoint-N` once every file is on disk, and resuming skips or
refuses, naming the file, folders that are incomplete anyway (older runs, copies). What a complete checkpoint is
and how it is written lives in training/recipe/checkpoints.py (the renaming in training/staging.py).
"""

import hashlib
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path

import torch
from accelerate.utils import gather_object
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.distributed.fsdp import is_fsdp_managed_module
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import SaveStrategy, TrainOutput

from ..data.batching import BucketPadding, TokenBatchSampler, batch_shapes_for
from ..data.cache import sequence_lengths
from ..serving.decoding import DEFAULT_MAX_TOKENS, translate_ids
from ..staging import storage_error
from ..threads import ThreadWatch
from ..usage import UsageError
from .checkpoints import (
    checkpoint_name,
    checkpoint_problem,
    checkpoints_dir,
    last_complete_checkpoint,
    publish,
    rotate_checkpoints,
    staging_dir_for,
    stale_staging_dirs,
)

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the weights were not updated with it."""


class NonFiniteGradientError(NonFiniteLossError):
    """The loss was finite but its gradients were not (an overflow in the backward pass); no update was made."""


class TimeBudgetCallback(TrainerCallback):
    """Stops training (with a final save) once `max_minutes` of wall-clock time have passed; `stopped_at` is the
    step it stopped at (None when the run reached its last step first)."""

    def __init__(self, max_minutes: float):
        self.max_seconds = max_minutes * 60
        self.start = None
        self.stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if time.monotonic() - self.start >= self.max_seconds and state.global_step < state.max_steps:
            logger.info("Time budget of %.1f min reached at step %d", self.max_seconds / 60, state.global_step)
            self.stopped_at = state.global_step
            control.should_training_stop = True
            control.should_save = True
        return control


class ThreadWatchCallback(TrainerCallback):
    """Looks at the CPUs free to the run at the end of a step (threads.ThreadWatch: every 20 s at most) and moves
    torch's thread count when another program starts or stops keeping a core busy."""

    def __init__(self, watch: ThreadWatch):
        self.watch = watch

    def on_step_end(self, args, state, control, **kwargs):
        self.watch.check()


class TrainingClock(TrainerCallback, ExportableState):
    """Training seconds of the whole run, every resumed segment together. Saved in each checkpoint's
    trainer_state.json (`stateful_callbacks`), so a resumed run reports its whole time, not its last segment's."""

    def __init__(self, seconds_before: float = 0.0):
        self.seconds_before = seconds_before
        self.start: float | None = None

    @classmethod
    def from_checkpoint(cls, checkpoint_dir: str | os.PathLike | None) -> "TrainingClock":
        """A clock that goes on from the seconds recorded in `checkpoint_dir` (0 for none, or an older run's)."""
        if checkpoint_dir is None:
            return cls()
        state = json.loads((Path(checkpoint_dir) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        saved = state.get("stateful_callbacks", {}).get(cls.__name__, {})
        return cls(float(saved.get("args", {}).get("seconds_before", 0.0)))

    @property
    def seconds(self) -> float:
        return self.seconds_before + (time.monotonic() - self.start if self.start is not None else 0.0)

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def state(self) -> dict:
        return {"args": {"seconds_before": round(self.seconds, 3)}, "attributes": {}}


class BatchLog(TrainerCallback):
    """With VASWANI_BATCH_LOG=DIR set, every process appends to DIR/batches-rank<R>.jsonl one line per batch it
    trains on (the step, a hash of each source sentence's token ids) and, when training ends, one line with a hash
    of each of its weights. Written from `VaswaniTrainer.training_step`, so it shows the batches the model got after
    the sampler, Accelerate's data loader and, on resume, its skipping of the batches already trained on. A check,
    not for speed: it copies every batch to the host. tests/recipe/test_multi_machine.py reads it."""

    ENV = "VASWANI_BATCH_LOG"

    def __init__(self, log_dir: str, rank: int, world_size: int):
        os.makedirs(log_dir, exist_ok=True)
        self.path = os.path.join(log_dir, f"batches-rank{rank}.jsonl")
        self.rank, self.world_size = rank, world_size

    def _write(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"rank": self.rank, "world_size": self.world_size, **record}) + "\n")

    def record_batch(self, step: int, inputs: dict) -> None:
        input_ids, mask = inputs["input_ids"].cpu(), inputs["attention_mask"].cpu().bool()
        sources = [_fingerprint(ids[keep]) for ids, keep in zip(input_ids, mask, strict=True)]
        self._write({"step": step, "sources": sources})

    def on_train_end(self, args, state: TrainerState, control: TrainerControl, model=None, **kwargs):
        weights = {name: _fingerprint(tensor) for name, tensor in model.state_dict().items()}
        self._write({"step": state.global_step, "weights": weights})


def _fingerprint(tensor: torch.Tensor) -> str:
    """A hash of the tensor's bytes, whatever its dtype."""
    return hashlib.sha1(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


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
    def __init__(self, *args, max_tokens: int | None = None, translation_metric=None, batch_shapes="auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens or None
        self.batch_shapes = batch_shapes_for(batch_shapes, self.args.device.type)  # --batch_shapes: None = exact
        # The `evaluate` module of training/recipe/metrics; with predict_with_generate it makes evaluation decode
        # through training/serving/decoding.py (see evaluation_loop) instead of compute_metrics on the stock generated
        # tokens.
        self.translation_metric = translation_metric
        self._decoding_evaluation = False
        if self.args.label_names is None:
            # The stock guess takes every forward argument named like a label, here also `label_smoothing`, which
            # no batch holds: evaluation then saw no labels and never reported eval_loss.
            self.label_names = ["labels"]
        # The model applies label smoothing itself (see compute_loss); the stock smoother would pop the labels.
        self.label_smoother = None
        self._tokens_since_log = 0  # a tensor on the batches' device once training runs
        self._time_of_last_log = time.monotonic()
        # The finite checks read the loss and gradient norm on the host, a host-device synchronisation that stalls a
        # GPU every step. Off the CPU they run on the device instead (`_check_finite_on_device`) and reach the host
        # at the next log or checkpoint; on the CPU a read costs nothing and the check is immediate.
        self.check_finite_every_step = self.args.device.type == "cpu"
        self._step_nonfinite = None  # this update's flag, on the device
        self._first_nonfinite_step = None  # the first update skipped as non-finite (-1: none), on the device
        self.batch_log = None
        if os.environ.get(BatchLog.ENV):
            self.batch_log = BatchLog(os.environ[BatchLog.ENV], self.args.process_index, self.args.world_size)
            self.add_callback(self.batch_log)

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
            shapes=self.batch_shapes,
        )
        collate = (
            self.data_collator if self.batch_shapes is None else BucketPadding(self.data_collator, self.batch_shapes)
        )
        dataloader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
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
        # Summed where the batch is; read on the host only when logging.
        self._tokens_since_log = (
            self._tokens_since_log + inputs["attention_mask"].sum() + (inputs["labels"] != -100).sum()
        )
        if self.batch_log is not None:
            self.batch_log.record_batch(self.state.global_step + 1, inputs)
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._finite_checks_on_device():
            nonfinite = ~torch.isfinite(loss).all()
            self._step_nonfinite = nonfinite if self._step_nonfinite is None else self._step_nonfinite | nonfinite
            return loss
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
        if self._finite_checks_on_device():
            self._check_finite_on_device(grad_norm)
            return grad_norm
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

    def _finite_checks_on_device(self) -> bool:
        """Whether this run checks finiteness on the device: off the CPU, with an optimizer that can skip an update
        on a device-side flag (the fused AdamW kernels take `found_inf`, as under a GradScaler)."""
        if self.check_finite_every_step or self.optimizer is None:
            return False
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # inside Accelerate's wrapper
        return bool(optimizer.defaults.get("fused"))

    def _check_finite_on_device(self, grad_norm) -> None:
        """The checks of `training_step` and `_get_grad_norm` without a host read: a non-finite loss or gradient
        norm makes the fused AdamW step leave weights and moments as they are, and the first such step is raised
        as NonFiniteLossError at the next log or checkpoint (`_raise_if_nonfinite`), so no weights a run keeps
        are non-finite."""
        nonfinite, self._step_nonfinite = self._step_nonfinite, None
        scaler = getattr(self.accelerator, "scaler", None)
        # Under fp16 the gradient scaler expects inf/NaN gradients now and then and skips those steps itself.
        if isinstance(grad_norm, torch.Tensor) and scaler is None:
            bad_norm = ~torch.isfinite(grad_norm)
            nonfinite = bad_norm if nonfinite is None else nonfinite | bad_norm
        if nonfinite is None:
            return
        if self._first_nonfinite_step is None:
            self._first_nonfinite_step = torch.full((), -1, dtype=torch.long, device=nonfinite.device)
        step = torch.full((), self.state.global_step + 1, dtype=torch.long, device=nonfinite.device)
        first = self._first_nonfinite_step
        self._first_nonfinite_step = torch.where((first < 0) & nonfinite, step, first)
        if scaler is None:
            getattr(self.optimizer, "optimizer", self.optimizer).found_inf = nonfinite.float()

    def _raise_if_nonfinite(self) -> None:
        if self._first_nonfinite_step is None:
            return
        step = int(self._first_nonfinite_step)  # the host read, once per log or checkpoint
        if step >= 0:
            raise NonFiniteLossError(
                f"Training loss or its gradients became non-finite at step {step} (seen at step "
                f"{self.state.global_step}; those updates were skipped, the weights are finite); "
                f"{self._how_to_recover()}"
            )

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._raise_if_nonfinite()
        if "loss" in logs:
            now = time.monotonic()
            tokens = int(self._tokens_since_log) * self.args.world_size  # each rank counts its own batches
            logs["tokens_per_second"] = round(tokens / max(now - self._time_of_last_log, 1e-9), 1)
            self._tokens_since_log, self._time_of_last_log = 0, now
        super().log(logs, start_time)

    # ---- evaluation: decoded like translate_texts() ---------------------------------------------------------------

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
        `decoding.translate_ids`, the function behind `translate_texts` (vaswani-translate) and the final evaluation.

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
        eval_max_tokens = getattr(self.args, "eval_max_tokens", DEFAULT_MAX_TOKENS)
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
                raise UsageError(
                    f"--resume_from_checkpoint: no complete checkpoint-* folder in {self.args.output_dir}; train "
                    "without --resume_from_checkpoint, or choose the --output_dir of the run to resume"
                )
        elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
            problem = checkpoint_problem(resume_from_checkpoint, resumable=True)
            if problem is not None:
                raise UsageError(
                    f"--resume_from_checkpoint {resume_from_checkpoint}: cannot resume from it: {problem}; resume from "
                    "an earlier checkpoint (--resume_from_checkpoint True picks the last complete one)"
                )
        if resume_from_checkpoint:
            finished = self._load_finished_run(resume_from_checkpoint)
            if finished is not None:
                return finished
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

    def _issue_warnings_after_load(self, load_result) -> None:
        # The stock check reports the tied weights (lm_head and both embed_tokens: one tensor with shared.weight,
        # §3.4, stored once in safetensors) as "missing keys" on every resume, a false alarm; any other key still is.
        tied = set(getattr(self.model, "all_tied_weights_keys", None) or {})
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _load_finished_run(self, checkpoint: str | os.PathLike) -> TrainOutput | None:
        """A checkpoint already at --max_steps: load its weights and state and train nothing (None otherwise).

        The stock loop, resumed there, still runs one more step (and so changes the final model and goes past
        --max_steps); a run killed after its last checkpoint, or resumed once finished, must end as it was."""
        state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        if self.args.max_steps <= 0 or state.global_step < self.args.max_steps:
            return None
        logger.warning(
            "%s is at step %d of --max_steps %d: training is complete, nothing is trained",
            checkpoint,
            state.global_step,
            self.args.max_steps,
        )
        self._load_from_checkpoint(str(checkpoint))
        self.state = state
        losses = [entry.get("train_loss", entry.get("loss")) for entry in state.log_history]
        losses = [loss for loss in losses if loss is not None]
        return TrainOutput(state.global_step, losses[-1] if losses else float("nan"), {})

    def _save_checkpoint(self, model, trial) -> None:
        """The stock `Trainer._save_checkpoint` of transformers 5.23-5.24 (weights, optimizer, scheduler, scaler, RNG,
        trainer state, push, rotation), written to `.tmp-checkpoint-N` and renamed to `checkpoint-N` once all of
        it is on disk: a crash at any point leaves either the complete `checkpoint-N` or no `checkpoint-N` at all.

        Forked because the stock method builds the folder path inline and writes each file straight into it, and
        the only callback, `on_save`, runs after the whole save (rotation included); no hook can redirect it.
        What the fork changes, and nothing else: (1) it writes into the staging folder, removing a stale one
        first; (2) `best_model_checkpoint` may name the current step, whose folder exists only once published;
        (3) every process waits (`accelerator.wait_for_everyone`) before the rename, then the main process
        `publish`es the folder (fsync, rename); (4) the Hub push and the rotation see the published folder;
        (5) checkpoints go to the output folder's `checkpoints/` (training/recipe/checkpoints.py), and the rotation
        is `checkpoints.rotate_checkpoints`, which renames a folder before deleting it; (6) a callback state the
        resumed trainer_state.json lacks (a newer callback) is added, not a KeyError.
        Re-read the stock method when upgrading transformers: tests/recipe/test_reliability.py fails on a release whose
        stock method differs from the one this was read against.
        """
        self._raise_if_nonfinite()  # no checkpoint after a skipped, non-finite step
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = str(checkpoints_dir(self._get_output_dir(trial=trial)))
        output_dir = os.path.join(run_dir, checkpoint_name(self.state.global_step))
        staging_dir = str(staging_dir_for(output_dir))
        if self.args.should_save and os.path.exists(staging_dir):
            logger.warning("Removing %s, left by an interrupted save", staging_dir)
            shutil.rmtree(staging_dir)
        # No process writes into the staging folder before it is clean.
        self.accelerator.wait_for_everyone()
        try:
            self._write_checkpoint(staging_dir, output_dir, run_dir)
        except Exception as error:
            # A full disk (torch's zip writer says it as "unexpected pos N vs M") or a read-only one: one line naming
            # the checkpoint, judged before the staged files go; the staged folder is removed, older checkpoints stay.
            usage_error = storage_error(error, output_dir)
            if usage_error is not None:
                if self.args.should_save:  # (any other error leaves it, as a kill would: the next run removes it)
                    shutil.rmtree(staging_dir, ignore_errors=True)
                for callback in self.callback_handler.callbacks:  # the progress bar ends before the one line
                    bar = getattr(callback, "training_bar", None)
                    if bar is not None:
                        bar.close()
                        callback.training_bar = None
                raise usage_error from error
            raise

        if self.args.push_to_hub:
            self._push_from_checkpoint(output_dir)
        if self.args.should_save:
            rotate_checkpoints(run_dir, self.args.save_total_limit, keep=self.state.best_model_checkpoint)

    def _write_checkpoint(self, staging_dir: str, output_dir: str, run_dir: str) -> None:
        """The writing part of `_save_checkpoint`: every file into `staging_dir`, then the rename to `output_dir`."""
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
                if isinstance(self.state.stateful_callbacks.get(name), list):
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
