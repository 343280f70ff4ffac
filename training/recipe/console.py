"""What a training run shows on the console: our progress and results, not the libraries' INFO logs.

`configure_logging` sets the one log of the commands (training/console.py: one format, the libraries at warnings and
errors) unless --verbose; `RunBanner` is the run's one line at its start, in place of the Trainer's "Running
training" block; `ProgressLines` is a plain line every tenth of the run (at least every 200 steps) where no progress
bar is drawn (a log file); `print_summary` is the run's result, with one line when training stopped early.
"""

import logging
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from ..console import setup_logging
from .arguments import VaswaniTrainingArguments
from .run_record import RunRecord

logger = logging.getLogger(__name__)


class _DropMessages(logging.Filter):
    """Drops log records whose message starts with one of `starts`."""

    def __init__(self, *starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


# The Trainer's farewell, and sacreBLEU's three lines about hypotheses ending in " .", which the toy corpus has on
# purpose (its text is tokenized by construction): shown only with --verbose.
_TRAINER_FAREWELL = _DropMessages("\n\nTraining completed. Do not forget to share your model")
_TOY_SACREBLEU_WARNINGS = _DropMessages(
    "That's 100 lines that end in a tokenized period",
    "It looks like you forgot to detokenize",
    "If you insist your data is detokenized",
)


def configure_logging(training_args: VaswaniTrainingArguments, toy_corpus: bool = False) -> None:
    """The commands' one log on stdout (the run's result is printed there too); of the libraries, warnings and errors
    only. --verbose brings back their INFO logs (every config loaded or saved, the Trainer's banner and checkpoint
    lines, ...), their progress bars and the messages dropped here."""
    level = logging.INFO if training_args.should_log else logging.WARNING
    verbose = training_args.verbose
    setup_logging(verbose, stream=sys.stdout, level=level)
    trainer_logger = logging.getLogger("transformers.trainer")
    sacrebleu_logger = logging.getLogger("sacrebleu")
    for logger_, noise in ((trainer_logger, _TRAINER_FAREWELL), (sacrebleu_logger, _TOY_SACREBLEU_WARNINGS)):
        logger_.removeFilter(noise)
        if not verbose and (noise is _TRAINER_FAREWELL or toy_corpus):
            logger_.addFilter(noise)


class RunBanner(TrainerCallback):
    """One line when training starts: steps, the epochs they make (not rounded up), examples, batch and threads."""

    def __init__(self, threads: int | None = None):
        self.threads = threads

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if not state.is_world_process_zero:
            return
        per_epoch = len(train_dataloader) if train_dataloader is not None else 0
        per_epoch = max(1, per_epoch // max(1, args.gradient_accumulation_steps))
        examples = len(train_dataloader.dataset) if train_dataloader is not None else 0
        if args.max_tokens:
            per_update = args.max_tokens * args.gradient_accumulation_steps * args.world_size
            batch = (
                f"updates of <= {per_update:,} tokens a side: --max_tokens {args.max_tokens:,} x gradient "
                f"accumulation {args.gradient_accumulation_steps} x {args.world_size} processes"
            )
        else:
            batch = "fixed batches"
        where = f"{self.threads} CPU threads" if self.threads else str(args.device)
        logger.info(
            "training %s steps from step %d (%.2f epochs of %s examples, %s steps an epoch, %s) on %s",
            f"{state.max_steps:,}",
            state.global_step,
            state.max_steps / per_epoch,
            f"{examples:,}",
            f"{per_epoch:,}",
            batch,
            where,
        )


class ProgressLines(TrainerCallback):
    """Where no progress bar is drawn (--disable_tqdm, the default in a file): one plain line every tenth of the run,
    at least every 200 steps, with the pace (wall and CPU seconds a step), the last logged loss and the time left."""

    def __init__(self):
        self._every = 50
        self._loss = None
        self._start = None
        self._cpu_start = 0.0
        self._first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._every = max(1, min(200, state.max_steps // 10))
        self._start, self._cpu_start, self._first_step = time.monotonic(), time.process_time(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self._loss = logs["loss"]

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if not state.is_world_process_zero or self._start is None or step % self._every or step == self._first_step:
            return
        steps = step - self._first_step
        pace = (time.monotonic() - self._start) / steps
        cpu = (time.process_time() - self._cpu_start) / steps  # all threads: spinning shows here
        loss = f", loss {self._loss:.3f}" if self._loss is not None else ""
        logger.info(
            "step %s of %s (%d%%): %.2f s and %.2f CPU-s a step%s, about %.1f min left",
            f"{step:,}",
            f"{state.max_steps:,}",
            100 * step // max(1, state.max_steps),
            pace,
            cpu,
            loss,
            pace * (state.max_steps - step) / 60,
        )


def print_summary(run: RunRecord, output_dir: Path) -> None:
    scores = run.results.scores
    print(f"\nModel written to {output_dir} ({run.results.total_minutes} min in all)")
    if run.results.stopped_early:
        print(run.results.stopped_early)
    for split in ("validation", "test"):
        if split in scores:
            print(f"{split}: sacreBLEU {scores[split].bleu:.2f}, chrF {scores[split].chrf:.2f}")
    if "test" in scores:
        print(f"signature: {scores['test'].bleu_signature}")
    for sample in run.samples:
        print(f"\n  source:     {sample.source}\n  hypothesis: {sample.hypothesis}\n  reference:  {sample.reference}")
