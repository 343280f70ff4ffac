"""Train, average, evaluate and package an hf-vaswani translation model: the paper's recipe on stock tools.

    vaswani-train [RECIPE] [--argument value ...]             (`python -m training.train` from a checkout)
    accelerate launch --multi_gpu --num_processes 2 -m hf_vaswani_training.train [same arguments]

RECIPE is a JSON/YAML file or the name of a recipe shipped in recipe/recipes/ (`toy`, `multi30k`); arguments after
it override it. With no data named, the embedded toy corpus (data/toy_corpus.py) is used, so the command runs
anywhere offline. See `vaswani-train --help`. The command line is read and checked in recipe/options.py (before
torch, when run as the console script); this module runs the recipe. Mistakes are UsageErrors, printed as one line
by the console script (training/cli.py).
"""

import contextlib
import dataclasses
import difflib
import json
import logging
import os
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, PrinterCallback, set_seed

import hf_vaswani

from .. import staging
from ..data.arguments import DataArguments
from ..data.cache import (
    LongSentencesError,
    default_cache_root,
    sequence_lengths,
    tokenize_to_cache,
    tokenizers_parallelism,
)
from ..data.corpora import load_parallel_data
from ..data.tokenizer import TRAINED_WITH_FILE, load_or_train_tokenizer
from ..serving.decoding import translate_texts
from ..serving.push import network_problem
from ..threads import ThreadChoice, ThreadWatch, use_threads
from ..usage import (
    TOKENIZER_FINGERPRINT_KEY,
    UsageError,
    check_loaded_model,
    check_model_dir,
    check_output_dir,
    check_safetensors,
    loaded_tokenizer_fingerprint,
)
from .arguments import ModelArguments, VaswaniTrainingArguments
from .average_checkpoints import average_checkpoints, last_checkpoints
from .checkpoints import (
    AVERAGED_SUBDIR,
    OutputDirLock,
    checkpoint_name,
    checkpoint_problem,
    checkpoint_step,
    checkpoints_dir,
    last_complete_checkpoint,
    write_upload_ignore,
)
from .console import ProgressLines, RunBanner, configure_logging, print_summary
from .launch import check_launch
from .model_card import write_model_card
from .options import TrainRequest, as_request, final_eval_split_names, parse_arguments
from .run_record import Hyperparameters, RunRecord, RunResults, Sample, SplitScores
from .schedule import peak_learning_rate
from .trainer import ThreadWatchCallback, TimeBudgetCallback, TrainingClock, VaswaniTrainer

logger = logging.getLogger(__name__)


# ---- arguments ------------------------------------------------------------------------------------------------------


def check_arguments(
    model_args: ModelArguments, data_args: DataArguments, training_args, checked_model: str | None = None
) -> None:
    """What can be checked before any data is read or model built; every failure is one UsageError line.
    `checked_model`: a --model_name_or_path the front door has checked already (not asked of the Hub again)."""
    if model_args.model_name_or_path and model_args.model_name_or_path != checked_model:
        needs_tokenizer = not model_args.tokenizer_name_or_path  # else the model folder's own tokenizer is used
        check_model_dir(model_args.model_name_or_path, "--model_name_or_path", needs_tokenizer=needs_tokenizer)
    else:
        load_preset(model_args.preset)
    check_output_dir(training_args.output_dir, "--output_dir")
    for name in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        value = getattr(data_args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be 1 or more (leave it out to use the whole split)")
    for name in ("max_source_length", "max_target_length"):
        if getattr(data_args, name) < 2:
            raise UsageError(f"--{name} {getattr(data_args, name)}: must be at least 2 (a token and the EOS)")
    resume = training_args.resume_from_checkpoint
    if resume not in (None, "True", "true", "last") and (Path(resume) / "model.safetensors").is_file():
        check_safetensors(Path(resume) / "model.safetensors")
    if resume in ("True", "true", "last") and last_complete_checkpoint(Path(training_args.output_dir)) is None:
        raise UsageError(
            f"--resume_from_checkpoint {resume}: no complete checkpoint-* folder in {training_args.output_dir}; "
            "start without --resume_from_checkpoint"
        )
    check_saved_tokenizer(model_args, data_args, training_args)


def check_saved_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args) -> None:
    """A tokenizer already in output_dir is reused (a run continues with its own token ids) only when it was
    trained with this run's --vocab_size and --bpe_min_frequency, as recorded when it was written; a tokenizer with
    no record (a run of an older version, or files copied in by hand) is not trusted unless the run resumes."""
    if model_args.tokenizer_name_or_path or model_args.model_name_or_path:
        return  # the tokenizer comes from there, not from output_dir
    output_dir = Path(training_args.output_dir)
    if not (output_dir / "tokenizer.json").is_file():
        return
    record_path = output_dir / TRAINED_WITH_FILE
    fix = f"choose another --output_dir, or delete {output_dir} to train a new tokenizer"
    if not record_path.is_file():
        if training_args.resume_from_checkpoint:
            return
        raise UsageError(
            f"--output_dir {output_dir} already holds a tokenizer.json with no record of how it was trained "
            f"({TRAINED_WITH_FILE}); {fix}, or pass --tokenizer_name_or_path {output_dir} to reuse it"
        )
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    wanted = {"vocab_size": model_args.vocab_size, "min_frequency": model_args.bpe_min_frequency}
    options = {"vocab_size": "--vocab_size", "min_frequency": "--bpe_min_frequency"}
    if data_args.source_lang:
        wanted.update(source_lang=data_args.source_lang, target_lang=data_args.target_lang)
        options.update(source_lang="--source_lang", target_lang="--target_lang")
    for key, value in wanted.items():
        if record.get(key) != value:
            raise UsageError(
                f"{options[key]} {value}: the tokenizer already in --output_dir {output_dir} was trained with "
                f"{key}={record.get(key)}; {fix}, or pass {options[key]} {record.get(key)} to continue with it"
            )


# ---- model ----------------------------------------------------------------------------------------------------------


def load_preset(preset: str) -> dict:
    """`hf_vaswani.load_preset`, with a one-line --preset error naming the closest preset."""
    try:
        return hf_vaswani.load_preset(preset)
    except ValueError as error:
        close = difflib.get_close_matches(preset, hf_vaswani.preset_names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"--{error}{hint}") from None


def check_tokenizer_fits(tokenizer, config) -> None:
    """A vocabulary larger than the embedding would fail deep inside nn.Embedding; say so up front."""
    if len(tokenizer) > config.vocab_size:
        raise UsageError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {config.vocab_size}: ids "
            f">= {config.vocab_size} have no embedding. Use the model's own tokenizer or resize the model with "
            "model.resize_token_embeddings(len(tokenizer))."
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) != getattr(config, name):
            raise UsageError(
                f"tokenizer.{name}={getattr(tokenizer, name)} differs from the model config's "
                f"{name}={getattr(config, name)}"
            )


def build_model(model_args: ModelArguments, data_args: DataArguments, tokenizer):
    if model_args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(
            model_args.model_name_or_path,
            attn_implementation=model_args.attn_implementation,
            trust_remote_code=model_args.trust_remote_code,
        )
        check_loaded_model(model, None, model_args.model_name_or_path)  # NaN weights: refused before training
        if model_args.dropout is not None:
            model.config.dropout = model_args.dropout
    else:
        config = hf_vaswani.preset_config(
            model_args.preset,
            tokenizer,
            max_position_embeddings=max(
                load_preset(model_args.preset).get("max_position_embeddings", 1024),
                data_args.max_source_length,
                data_args.max_target_length + 1,
            ),
            **({"dropout": model_args.dropout} if model_args.dropout is not None else {}),
        )
        model = hf_vaswani.VaswaniForConditionalGeneration._from_config(
            config, attn_implementation=model_args.attn_implementation
        )
    check_tokenizer_fits(tokenizer, model.config)
    # The tokenizer's vocabulary and merges, recorded in config.json: every later load checks it (usage.py).
    fingerprint = loaded_tokenizer_fingerprint(tokenizer)
    recorded = getattr(model.config, TOKENIZER_FINGERPRINT_KEY, None)
    if isinstance(recorded, str) and fingerprint is not None and fingerprint != recorded:
        raise UsageError(
            f"--model_name_or_path {model_args.model_name_or_path}: its config.json says the model was trained with "
            f"{TOKENIZER_FINGERPRINT_KEY} {recorded[:23]} but this run's tokenizer ({tokenizer.name_or_path}) has "
            f"{fingerprint[:23]} (other ids); leave out --tokenizer_name_or_path to use the model's own tokenizer"
        )
    if fingerprint is not None:
        setattr(model.config, TOKENIZER_FINGERPRINT_KEY, fingerprint)
    return model


def apply_paper_decoding(model, training_args: VaswaniTrainingArguments) -> None:
    """Give `model` this run's decoding: hf_vaswani.set_paper_decoding on its generation config (the paper's, §6.1,
    hf_vaswani.PAPER_DECODING) with this run's --generation_num_beams, --length_penalty and --max_length_offset, so
    that generation_config.json of the output carries them as its defaults."""
    hf_vaswani.set_paper_decoding(
        model.generation_config,
        num_beams=training_args.generation_num_beams or hf_vaswani.PAPER_DECODING["num_beams"],
        length_penalty=training_args.length_penalty,
        max_length_offset=training_args.max_length_offset,
    )
    model.generation_config._from_model_config = False


# ---- data -----------------------------------------------------------------------------------------------------------


def tokenize_splits(
    raw, tokenizer, data_args: DataArguments, source_lang: str, target_lang: str, main_process, cache_dir=None
) -> dict:
    """input_ids/labels for every split, long training pairs handled as --long_sentences says.

    Built batch by batch into an on-disk Arrow cache keyed by the data, the tokenizer and the length settings
    (data/cache.py), so a second run on the same data starts at once; the main process builds it first.
    """
    with main_process(desc="tokenizing"), tokenizers_parallelism():
        try:
            return tokenize_to_cache(
                raw,
                tokenizer,
                source_lang,
                target_lang,
                max_source_length=data_args.max_source_length,
                max_target_length=data_args.max_target_length,
                long_sentences=data_args.long_sentences,
                cache_root=cache_dir,
                num_workers=data_args.preprocessing_num_workers,
            )
        except LongSentencesError as error:
            raise UsageError(str(error)) from None


def training_lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) token counts per training example, for the token-batch sampler (from Arrow offsets)."""
    return sequence_lengths(dataset, "input_ids"), sequence_lengths(dataset, "labels")


@dataclasses.dataclass
class PreparedData:
    raw: datasets.DatasetDict
    stats: dict
    source_lang: str
    target_lang: str
    tokenizer: object
    tokenized: dict
    batch_shapes: str = "auto"  # --batch_shapes (training/data/batching.py)


def prepare_training_data(
    model_args: ModelArguments, data_args: DataArguments, training_args, tokenizer_source: str | None = None
) -> PreparedData:
    """Everything before the model: read the splits, load or train the joint BPE, tokenise (all cached on disk).

    Text, tokenizer and tokenised splits are cached by content, so a repeated run on the same files reads no text,
    trains no BPE and tokenises nothing. The Rust tokenizer uses every core here (see `tokenizers_parallelism`).
    """
    if data_args.preprocessing_num_workers:
        # The tokenizer's thread pool reads this once, when first used: --preprocessing_num_workers caps it.
        os.environ.setdefault("RAYON_NUM_THREADS", str(data_args.preprocessing_num_workers))
    output_dir = Path(training_args.output_dir)
    is_main = training_args.process_index == 0
    with tokenizers_parallelism():
        raw, stats = load_parallel_data(data_args, seed=training_args.seed)
        source_lang, target_lang = raw["train"].features["translation"].languages
        if data_args.source_lang:
            source_lang, target_lang = data_args.source_lang, data_args.target_lang
        for split, limit in (
            ("train", data_args.max_train_samples),
            ("validation", data_args.max_eval_samples),
            ("test", data_args.max_test_samples),
        ):
            if limit is not None and split in raw:
                raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
        logger.info("Data %s->%s: %s", source_lang, target_lang, {k: len(v) for k, v in raw.items()})

        # ---- tokenizer (trained once, on the main process) ----
        # local=False: the other machines' first processes wait too; they read what process 0 writes to output_dir.
        with training_args.main_process_first(local=False, desc="tokenizer"):
            if tokenizer_source is None and not is_main:
                tokenizer_source = str(output_dir)  # written by the main process a moment ago
            tokenizer = load_or_train_tokenizer(
                tokenizer_source,
                raw["train"],
                source_lang,
                target_lang,
                vocab_size=model_args.vocab_size,
                min_frequency=model_args.bpe_min_frequency,
                model_max_length=max(data_args.max_source_length, data_args.max_target_length),
                save_dir=output_dir if is_main else None,
                cache_dir=default_cache_root(),
            )
        logger.info("Tokenizer: %d tokens", len(tokenizer))
    tokenized = tokenize_splits(raw, tokenizer, data_args, source_lang, target_lang, training_args.main_process_first)
    data = PreparedData(raw, stats, source_lang, target_lang, tokenizer, tokenized, data_args.batch_shapes)
    check_max_tokens(data, training_args.max_tokens)
    return data


def check_max_tokens(data: PreparedData, max_tokens: int | None) -> None:
    """Every training pair must fit in a --max_tokens batch on its own: the longest is named (its file and line, as
    tokens on its longer side), here and not as the batch sampler's traceback once the Trainer has started."""
    if not max_tokens:
        return
    source, target = training_lengths(data.tokenized["train"])
    lengths = np.maximum(source, target)
    if not len(lengths) or lengths.max() <= max_tokens:
        return
    index = int(lengths.argmax())
    pair = data.raw["train"][index]["translation"]
    where = _pair_location(data.stats.get("train"), pair.get(data.source_lang, ""), index)
    too_long = int((lengths > max_tokens).sum())
    raise UsageError(
        f"--max_tokens {max_tokens}: {where} has {lengths[index]} tokens (source {source[index]}, target "
        f"{target[index]}), more than a batch may hold, and {too_long} pair(s) exceed it; raise --max_tokens to at "
        f"least {lengths[index]}, or cut sentences with --max_source_length/--max_target_length"
    )


def _pair_location(stats, source_text: str, index: int) -> str:
    """'FILE:LINE' of the training pair whose source side is `source_text`, found in the split's first file; else
    'training pair N' (the embedded corpus, a Hub dataset, a format whose lines are not sentences)."""
    for name in getattr(stats, "sources", ())[:1]:
        path = Path(name)
        if path.is_file() and path.suffix not in (".gz", ".json", ".jsonl", ".tsv"):
            with path.open(encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    if line.strip() == source_text:
                        return f"{path}:{number}"
    return f"training pair {index + 1}"


# ---- evaluation -----------------------------------------------------------------------------------------------------


def make_compute_metrics(tokenizer, metric):
    def compute_metrics(eval_prediction):
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        predictions = np.where(predictions != -100, predictions, tokenizer.pad_token_id)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        scores = metric.compute(predictions=hypotheses, references=references)
        return {"bleu": scores["bleu"], "chrf": scores["chrf"]}

    return compute_metrics


def evaluate_split(model, tokenizer, raw_split, source_lang, target_lang, metric, training_args, max_source_length):
    sources = [pair[source_lang] for pair in raw_split["translation"]]
    references = [pair[target_lang] for pair in raw_split["translation"]]
    start = time.monotonic()
    hypotheses = translate_texts(
        model,
        tokenizer,
        sources,
        max_tokens=training_args.eval_max_tokens,
        max_source_length=max_source_length,
        progress=True,
    )
    seconds = time.monotonic() - start
    scores = metric.compute(predictions=hypotheses, references=references)
    scores.update(sentences=len(sources), decode_seconds=round(seconds, 2))
    return scores, sources, hypotheses, references


# ---- the recipe, one step each -------------------------------------------------------------------------------------


def checkpoint_to_resume(training_args: VaswaniTrainingArguments) -> str | None:
    """--resume_from_checkpoint as a folder: True (or last) is the last complete checkpoint of --output_dir."""
    resume = training_args.resume_from_checkpoint
    if resume in ("True", "true", "last"):
        resume = last_complete_checkpoint(training_args.output_dir)  # skips folders a crash left half-written
        if resume is None:
            raise UsageError(
                f"--resume_from_checkpoint {training_args.resume_from_checkpoint}: no complete checkpoint-* folder in "
                f"{training_args.output_dir}; train without it, or give the --output_dir of the run to resume"
            )
    if resume in ("False", "false", "None", ""):
        resume = None
    return resume


# What decides the shapes of the weights: a checkpoint of other values cannot be resumed into this model.
_SHAPE_KEYS = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
               "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size", "max_position_embeddings")  # fmt: skip


def check_resume_fits(resume: str | None, config) -> None:
    """The checkpoint to resume from holds weights of this run's architecture (--preset and its overrides), or a
    one-line error naming the values that differ, before the Trainer's size-mismatch traceback."""
    if resume is None:
        return
    try:
        saved = json.loads((Path(resume) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # a missing or broken config.json: the completeness check names it
    differ = [
        f"{key} {saved[key]} vs {getattr(config, key)}"
        for key in _SHAPE_KEYS
        if key in saved and getattr(config, key, saved[key]) != saved[key]
    ]
    if differ:
        raise UsageError(
            f"--resume_from_checkpoint {resume}: its model differs from this run's ({', '.join(differ)}: checkpoint vs "
            "run); resume with the --preset and options of the run that wrote it, or train into another --output_dir"
        )


def tokenizer_to_load(model_args: ModelArguments, output_dir: Path) -> str | None:
    """Where the tokenizer comes from; None trains one."""
    source = model_args.tokenizer_name_or_path or model_args.model_name_or_path
    # A run continues from its own tokenizer: otherwise the token ids would change under the checkpoint.
    if source is None and (output_dir / "tokenizer.json").is_file():
        source = str(output_dir)
    return source


def make_data_collator(tokenizer, model, pad_to_multiple_of: int | None = None) -> DataCollatorForSeq2Seq:
    """Batches padded to their longest sentence, with `pad_to_multiple_of` rounded up to a multiple on each side.

    On a GPU the recipe rounds to 8: tensor-core shapes, and at most max_length / 8 lengths per side, so that
    compiled code is reused. Masks make the extra padding inert (keys masked, labels -100): one step's loss and
    gradients equal the unrounded batch's to float rounding. Not on the CPU, where it gains nothing: other matrix
    shapes round differently, and over the toy recipe's steps that drifts the weights (60 steps: max |difference|
    0.013), so CPU runs keep the weights they had."""
    return DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=pad_to_multiple_of
    )


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # shared (tied) tensors once


def make_model(model_args: ModelArguments, data_args: DataArguments, training_args, tokenizer):
    """The model to train, with the paper's decoding as its generation config and, unless given, its learning rate."""
    model = build_model(model_args, data_args, tokenizer)
    apply_paper_decoding(model, training_args)
    logger.info("Model: %s, %.2fM parameters", model.config.to_diff_dict(), count_parameters(model) / 1e6)
    if not training_args.learning_rate:
        training_args.learning_rate = peak_learning_rate(model.config.d_model, training_args.warmup_steps)
        logger.info("Learning rate: d_model^-0.5 * warmup^-0.5 = %.3g at its peak", training_args.learning_rate)
    return model


def train_model(
    model,
    data: PreparedData,
    training_args: VaswaniTrainingArguments,
    metric,
    resume: str | None,
    threads: ThreadChoice | None = None,
) -> tuple[VaswaniTrainer, RunResults]:
    """Train (or resume), make sure the last step is a checkpoint, and return the trainer and the figures.
    `threads`: the CPU threads chosen at the start (threads.py), followed while the run goes on."""
    budget = TimeBudgetCallback(training_args.max_train_minutes) if training_args.max_train_minutes else None
    # Read before training, as rotation may delete the checkpoint; one that is incomplete, trainer.train refuses.
    readable = resume is not None and checkpoint_problem(resume) is None
    clock = TrainingClock.from_checkpoint(resume if readable else None)  # the minutes of the segments before
    resumed_at = checkpoint_step(resume) if readable else None
    callbacks = [clock, *([budget] if budget else []), RunBanner(threads.threads if threads else None)]
    if threads is not None:  # the count follows other programs' load while the run goes on
        callbacks.append(ThreadWatchCallback(ThreadWatch(threads, torch)))
    with hub_errors_as_usage(training_args):  # --push_to_hub: the Trainer creates the Hub repository here
        trainer = make_trainer(model, data, training_args, metric, callbacks)
    train_result = trainer.train(resume_from_checkpoint=resume)
    seconds = clock.seconds
    # The last step is always a checkpoint, so averaging includes the final weights.
    last = checkpoints_dir(training_args.output_dir) / checkpoint_name(trainer.state.global_step)
    if training_args.save_strategy != "no" and not last.is_dir() and resumed_at != trainer.state.global_step:
        trainer._save_checkpoint(trainer.model, trial=None)
    # --push_to_hub: let any background checkpoint upload finish before the folder is rewritten with the averaged
    # model; the final model and its card are pushed at the end.
    trainer._finish_current_push()
    trainer.accelerator.wait_for_everyone()
    results = RunResults(
        train_loss=train_result.training_loss,
        train_steps=trainer.state.global_step,
        train_epochs=trainer.state.epoch,
        train_minutes=round(seconds / 60, 2),
        parameters=count_parameters(model),
        stopped_early=stopped_early(trainer.state.global_step, trainer.state.max_steps, budget),
        resumed_from_step=resumed_at,
    )
    return trainer, results


def make_trainer(model, data: PreparedData, training_args, metric, callbacks) -> VaswaniTrainer:
    """The recipe's VaswaniTrainer for `model` on the prepared data."""
    tokenizer = data.tokenizer
    trainer = VaswaniTrainer(
        model=model,
        args=training_args,
        train_dataset=data.tokenized["train"],
        eval_dataset=data.tokenized.get("validation"),
        processing_class=tokenizer,
        data_collator=make_data_collator(
            tokenizer, model, pad_to_multiple_of=8 if training_args.device.type != "cpu" else None
        ),
        # Evaluation decodes through decoding.translate_ids with --eval_max_tokens batches, as the final
        # evaluation does; compute_metrics scores the stock generate loop where that cannot run (ZeRO-3, FSDP).
        translation_metric=metric,
        compute_metrics=make_compute_metrics(tokenizer, metric),
        callbacks=callbacks,
        max_tokens=training_args.max_tokens,
        batch_shapes=data.batch_shapes,
    )
    if training_args.disable_tqdm:  # no bar (a log file): plain progress lines instead of the stock printed dicts
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(ProgressLines())
    return trainer


@contextlib.contextmanager
def hub_errors_as_usage(training_args):
    """A Hub that cannot be reached while --push_to_hub sets up its repository is one line naming the host."""
    try:
        yield
    except Exception as error:
        problem = network_problem(error) if training_args.push_to_hub else None
        if problem is None:
            raise
        raise UsageError(f"--push_to_hub: {problem}; nothing was trained") from None


def stopped_early(steps: int, planned: int, budget: TimeBudgetCallback | None) -> str | None:
    """One line on why training ended before its `planned` steps, or None when it ran them all."""
    if not planned or steps >= planned:
        return None
    cause = "--max_train_minutes" if budget is not None and budget.stopped_at is not None else "an early stop"
    return f"stopped by {cause} after {steps:,} of {planned:,} steps: the model is undertrained"


def average_last_checkpoints(trainer: VaswaniTrainer, training_args: VaswaniTrainingArguments):
    """The final model: the average of the last --average_last_n checkpoints (§6.1), or the last step's weights.

    Returns the model and the names of the checkpoints averaged (none when it is the last step's).
    """
    output_dir = Path(training_args.output_dir)
    if training_args.average_last_n > 1 and training_args.save_strategy != "no":
        checkpoints = last_checkpoints(output_dir, training_args.average_last_n)
        if len(checkpoints) > 1:
            averaged_dir = average_checkpoints(
                checkpoints, checkpoints_dir(output_dir) / AVERAGED_SUBDIR, overwrite=True
            )
            averaged = [checkpoint.name for checkpoint in checkpoints]
            logger.info("Averaged %s", averaged)
            return AutoModelForSeq2SeqLM.from_pretrained(averaged_dir).to(trainer.model.device), averaged
    return trainer.model, []


def save_final_model(model, tokenizer, training_args: VaswaniTrainingArguments) -> None:
    apply_paper_decoding(model, training_args)
    # Saved through the translation pipeline: model and tokenizer, plus the pipeline's code and `custom_pipelines` in
    # config.json, so that pipeline("translation", model=output_dir, trust_remote_code=True) works (5.23 has no such task).
    pipe = hf_vaswani.VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device=model.device)
    # Staged, config.json last (without it the folder is no model folder): a full disk leaves the older model or
    # none, never new weights beside an old config; files get the user's mode, not safetensors' 0600.
    with staging.staged_files(training_args.output_dir, seal="config.json") as staged:
        pipe.save_pretrained(staged)


def evaluate_final_model(
    model, data: PreparedData, metric, training_args: VaswaniTrainingArguments, data_args: DataArguments
) -> tuple[dict[str, SplitScores], list[Sample]]:
    """BLEU and chrF of --final_eval_splits with the paper's decoding (beam 4, GNMT alpha 0.6, max length source +
    50), and the first test translations as samples."""
    scores, samples = {}, []
    for split in final_eval_split_names(training_args.final_eval_splits):
        if split not in data.raw:
            logger.warning("--final_eval_splits names %s, which the data has not: it is not scored", split)
            continue
        values, sources, hypotheses, references = evaluate_split(
            model, data.tokenizer, data.raw[split], data.source_lang, data.target_lang, metric, training_args,
            data_args.max_source_length,
        )  # fmt: skip
        scores[split] = SplitScores(**values)
        logger.info("%s: BLEU %.2f  chrF %.2f  (%s)", split, values["bleu"], values["chrf"], values["bleu_signature"])
        if split == "test":
            samples = [Sample(*triple) for triple in zip(sources, hypotheses, references)]
            samples = samples[: training_args.num_samples_to_print]
    return scores, samples


def package(run: RunRecord, trainer: VaswaniTrainer, training_args: VaswaniTrainingArguments) -> None:
    """results.json and the model card next to the final model, then (--push_to_hub) the folder to the Hub."""
    output_dir = Path(training_args.output_dir)
    (output_dir / "results.json").write_text(json.dumps(run.to_dict(), indent=2, default=str) + "\n")
    write_model_card(output_dir, run)
    if training_args.push_to_hub:
        # Not trainer.push_to_hub(): it would save trainer.model (the last step, not the average) over the final
        # model and replace this card with the Trainer's own.
        from ..serving.push import push_model_folder

        pushed = push_model_folder(
            output_dir,
            trainer.hub_model_id,
            revision=training_args.hub_revision,
            token=training_args.hub_token,
            commit_message="End of training",
        )
        print(f"Pushed the final model to {pushed.repo_url}")


# ---- main -----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | TrainRequest | None = None) -> dict:
    """The recipe: data -> tokenizer -> model -> train -> average -> evaluate -> package. Returns the results.
    `argv`: the arguments, or the TrainRequest of options.preflight_train (the console script passes one)."""
    check_launch()
    request = argv if isinstance(argv, TrainRequest) else as_request(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args = parse_arguments(request)
    check_arguments(model_args, data_args, training_args, checked_model=request.checked_model)
    configure_logging(
        training_args, toy_corpus=not (data_args.dataset_name or data_args.data_dir or data_args.train_file)
    )
    # One process: as many threads as CPUs are free (threads.py); launched processes keep what the launcher set.
    threads = use_threads(training_args.threads, torch) if training_args.world_size == 1 else None
    # One run writes a folder at a time (the main process holds the lock; the others write through it).
    with OutputDirLock(training_args.output_dir) if training_args.process_index == 0 else contextlib.nullcontext():
        try:
            return run_recipe(model_args, data_args, training_args, threads)
        except (OSError, RuntimeError) as error:  # RuntimeError: torch's zip writer on a full disk
            where = getattr(error, "filename", None) or training_args.output_dir
            usage_error = staging.storage_error(error, where)
            if usage_error is None:
                raise
            raise UsageError(
                f"--output_dir {training_args.output_dir}: {usage_error} (a run stopped by this resumes from its last "
                "checkpoint with --resume_from_checkpoint True)"
            ) from error


def run_recipe(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: VaswaniTrainingArguments,
    threads: ThreadChoice | None = None,
) -> dict:
    """`main` once the arguments are checked and the output folder is locked."""
    started = time.monotonic()
    set_seed(training_args.seed)
    output_dir = Path(training_args.output_dir)
    resume = checkpoint_to_resume(training_args)

    data = prepare_training_data(model_args, data_args, training_args, tokenizer_to_load(model_args, output_dir))
    model = make_model(model_args, data_args, training_args, data.tokenizer)
    check_resume_fits(resume, model.config)
    from .metrics import load_translation_metric

    metric = load_translation_metric()
    if training_args.process_index == 0:  # only now: a run refused over its data leaves no file behind
        write_upload_ignore(output_dir)
    trainer, results = train_model(model, data, training_args, metric, resume, threads)
    if training_args.process_index != 0:
        return results.to_dict()

    final_model, results.averaged_checkpoints = average_last_checkpoints(trainer, training_args)
    save_final_model(final_model, data.tokenizer, training_args)
    results.scores, samples = evaluate_final_model(final_model, data, metric, training_args, data_args)
    results.total_minutes = round((time.monotonic() - started) / 60, 2)

    run = RunRecord(
        model_args=model_args,
        data_args=data_args,
        data_stats=data.stats,
        source_lang=data.source_lang,
        target_lang=data.target_lang,
        training_args=Hyperparameters.from_training_args(training_args),
        model_config=final_model.config.to_diff_dict(),
        results=results,
        samples=samples,
        versions={"transformers": transformers.__version__, "torch": torch.__version__},
        device=str(final_model.device),
    )
    package(run, trainer, training_args)
    print_summary(run, output_dir)
    return results.to_dict()
