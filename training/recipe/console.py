"""What a training run shows on the console: our progress and results, not the libraries' INFO logs.

`configure_logging` keeps the libraries to warnings and errors (plus the Trainer's start-of-training summary and
checkpoint lines) unless --verbose; `print_summary` is the run's result, with one line when training stopped early.
"""

import logging
import sys
from pathlib import Path

import datasets
import transformers

from .arguments import VaswaniTrainingArguments
from .run_record import RunRecord


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
    """Our progress and results on the console; of the libraries, warnings and errors only, and the Trainer's own
    start-of-training summary and checkpoint lines. --verbose brings back their INFO logs (every config loaded or
    saved, ...) and the messages dropped here."""
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        level=level,
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    verbose = training_args.verbose
    transformers.utils.logging.set_verbosity(level if verbose else max(level, logging.WARNING))
    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.enable_propagation()
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.setLevel(level)
    datasets.utils.logging.set_verbosity(level if verbose else logging.WARNING)
    sacrebleu_logger = logging.getLogger("sacrebleu")
    for logger_, noise in ((trainer_logger, _TRAINER_FAREWELL), (sacrebleu_logger, _TOY_SACREBLEU_WARNINGS)):
        logger_.removeFilter(noise)
        if not verbose and (noise is _TRAINER_FAREWELL or toy_corpus):
            logger_.addFilter(noise)


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
