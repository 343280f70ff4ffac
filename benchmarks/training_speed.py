#!/usr/bin/env python
"""The GPU benchmark of issue 22: the paper's training and decoding on one GPU, in one command of at most 6 minutes.

    python benchmarks/gpu.py --out gpu.json              # on a GPU: base and big, about 5.5 minutes
    python benchmarks/gpu.py --tiny --out /tmp/tiny.json  # anywhere: the tiny preset on the CPU in seconds
    bash benchmarks/gpu_device.sh                         # on a lent device machine (installs the carried wheels)

Training, for the `base` and `big` presets (vocabulary 37,000) on WMT14-shaped token batches: the synthetic corpus
of benchmarks/data_scale.py (or `--data_dir`, text pairs as training reads them), a joint BPE trained on it, and
`TokenBatchSampler` batches of `--max_tokens`. Each run takes warm-up steps, then timed steps until its share of
the time budget is spent, and reports target and all (source + target) real tokens per second, the median step
time and its spread, peak GPU memory and MFU: the model FLOPs of the timed steps (benchmarks/lib/mfu.py's count,
padding excluded) over (a) the bf16 matrix-product peak measured in this run (one large `torch.mm`) and (b) the
datasheet peak of `torch.cuda.get_device_name()`. The paths, on the same batches:

- `trainer`: the recipe's own path: `VaswaniTrainer` with `VaswaniTrainingArguments` (label smoothing inside the
  model, fused AdamW with the paper's betas and epsilon, the inverse-square-root schedule), the recipe's collator;
- `marian`: `MarianMTModel` configured alike under the stock `Seq2SeqTrainer` (`label_smoothing_factor=0.1`, the
  same optimizer and schedule), fed the same batches (one dataset row per token batch);
- `lean`: our model in a bare loop: forward with the loss, backward, fused AdamW step, schedule; no Trainer.

Variants: bf16 autocast (the default), fp16 with loss scaling (base, the T4/V100 path), and `torch.compile`.
Step times come from CUDA events recorded at each step's end, so measuring adds no host-device synchronisation.

Decoding, on the base architecture: `generate()` with the paper's defaults (beam 4, GNMT alpha 0.6, max length
source + 50) and greedy on 1,000 test sentences in length-sorted batches, against `MarianMTModel` holding the same
weights (beam 4 with Hugging Face's length penalty 0.6 and the same length limit), eagerly and with the static cache
and compiled forward of `generate()`. The weights are random unless `--model_dir` names a trained folder, so
outputs tend to run to the length limit: compare the two models, not the absolute figures.

Every phase is guarded by its share of `--budget` seconds; the results are written after each phase (`--out` JSON
and the same name with .md), so a run cut short still leaves a table. The table is printed last. A variant that
needs CUDA is listed as "skipped: no CUDA" on a machine without it. A benchmark, not a test: it asserts nothing
about time (tests/test_gpu_benchmark.py runs `--tiny` and checks the table's structure).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from transformers import (  # noqa: E402
    DataCollatorForSeq2Seq,
    GenerationConfig,
    MarianMTModel,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

import hf_vaswani  # noqa: E402
from benchmarks.lib.corpus import write_corpus  # noqa: E402
from benchmarks.lib.machine import (  # noqa: E402
    StepClock,
    datasheet_peak,
    device_name,
    has_bf16,
    markdown,
    measured_matmul_peak,
    ratios,
    synchronize,
    write,
)
from benchmarks.lib.mfu import training_flops  # noqa: E402
from benchmarks.lib.model_pairs import LABEL_SMOOTHING, PAPER_OPTIMIZER  # noqa: E402

logger = logging.getLogger("gpu_benchmark")

PAD_TO_MULTIPLE_OF = 8  # the recipe's collator: tensor-core friendly shapes and a bounded set of them
# ---- command line ---------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="the tiny preset on the CPU, a few steps: seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON results (and the table as .md beside it)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all phases (default 330; tiny 300)")
    parser.add_argument("--device", default=None, help="default: cuda when available (never with --tiny)")
    parser.add_argument("--presets", default=None, help="comma-separated (default base,big; tiny: tiny)")
    parser.add_argument("--data_dir", type=Path, default=None, help="train/test.{en,de} text pairs instead")
    parser.add_argument("--pairs", type=int, default=None, help="synthetic training pairs (default 40000; tiny 400)")
    parser.add_argument("--vocab_size", type=int, default=None, help="joint BPE size (default 37000)")
    parser.add_argument("--max_tokens", type=int, default=None, help="token batch limit (default 12288; tiny 256)")
    parser.add_argument("--warmup_steps", type=int, default=None, help="untimed steps per run (default 5; tiny 2)")
    parser.add_argument("--max_timed_steps", type=int, default=None, help="at most (default 200; tiny 3)")
    parser.add_argument("--sentences", type=int, default=None, help="decoded sentences (default 1000; tiny 8)")
    parser.add_argument("--gen_batch_size", type=int, default=None, help="sentences a batch (default 128; tiny 4)")
    parser.add_argument(
        "--max_new_tokens", type=int, default=None, help="decoding length limit (default: source + 50; tiny 8)"
    )
    parser.add_argument("--model_dir", type=Path, default=None, help="trained base-architecture weights to decode")
    parser.add_argument(
        "--skip", default="", help="comma-separated: trainer,marian,lean,fp16,compile,decoding (or run names)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tiny = args.tiny
    defaults = {
        "budget": (330.0, 300.0),
        "presets": ("base,big", "tiny"),
        "pairs": (40000, 400),
        "vocab_size": (37000, 1000),
        "max_tokens": (12288, 256),
        "warmup_steps": (5, 2),
        "max_timed_steps": (200, 3),
        "sentences": (1000, 8),
        "gen_batch_size": (128, 4),
    }
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    if args.max_new_tokens is None and tiny:
        args.max_new_tokens = 8
    if args.device is None:
        args.device = "cpu" if tiny or not torch.cuda.is_available() else "cuda"
    args.device = torch.device(args.device)
    args.cuda = args.device.type == "cuda"
    args.presets = [p for p in args.presets.split(",") if p]
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.warmup_steps < 1:
        parser.error("--warmup_steps must be at least 1 (the end of warm-up starts the clock)")
    return args


# ---- data -----------------------------------------------------------------------------------------------------------


def load_data(args):
    """The tokenizer, tokenized training pairs and the source sentences to decode."""
    from hf_vaswani_training.data.tokenizer import train_joint_bpe

    if args.data_dir is None:
        folder = Path(tempfile.gettempdir()) / f"hf-vaswani-gpu-bench-{args.pairs}{'-tiny' if args.tiny else ''}"
        write_corpus(
            folder, args.pairs, num_types=2_000 if args.tiny else 350_000, seed=args.seed, eval_pairs=(8, 1003)
        )
    else:
        folder = args.data_dir

    def read(split, lang):
        path = folder / f"{split}.{lang}"
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []

    source, target = read("train", "en")[: args.pairs], read("train", "de")[: args.pairs]
    if not source or len(source) != len(target):
        raise SystemExit(f"{folder}: needs train.en and train.de with the same number of lines")
    test = read("test", "en") or source
    started = time.perf_counter()
    tokenizer = train_joint_bpe(iter(source + target), vocab_size=args.vocab_size)
    source_ids = tokenizer(source, truncation=True, max_length=256)["input_ids"]
    target_ids = tokenizer(text_target=target, truncation=True, max_length=256)["input_ids"]
    logger.info("BPE of %d tokens trained and %d pairs tokenized in %.1f s", len(tokenizer), len(source),
                time.perf_counter() - started)  # fmt: skip
    return types.SimpleNamespace(
        tokenizer=tokenizer, source_ids=source_ids, target_ids=target_ids, sentences=test[: args.sentences],
        folder=str(folder),
    )  # fmt: skip


def make_dataset(data):
    import datasets

    return datasets.Dataset.from_dict(
        {
            "input_ids": data.source_ids,
            "attention_mask": [[1] * len(s) for s in data.source_ids],
            "labels": data.target_ids,
        }
    )


def make_sampler(data, args):
    """The sampler `VaswaniTrainer.get_train_dataloader` builds (same lengths, limit and seed): same batches."""
    from hf_vaswani_training.data.batching import TokenBatchSampler

    return TokenBatchSampler(
        source_lengths=[len(s) for s in data.source_ids],
        target_lengths=[len(t) for t in data.target_ids],
        max_tokens=args.max_tokens,
        shuffle=True,
        seed=args.seed,
    )


def batches_of_steps(sampler, steps: int) -> list[list[int]]:
    """The batch of each optimizer step, epochs one after another, as the Trainer draws them (one process)."""
    out, epoch = [], 0
    while len(out) < steps:
        out.extend(sampler.all_batches(epoch))
        epoch += 1
    return out[:steps]


def make_collator(tokenizer, model):
    """The recipe's collator as it runs on a GPU: labels padded with -100, lengths rounded up to a multiple of 8."""
    from hf_vaswani_training.recipe.train import make_data_collator

    return make_data_collator(tokenizer, model, pad_to_multiple_of=PAD_TO_MULTIPLE_OF)


def batch_statistics(data, batches, config) -> dict:
    """Real and padded tokens and model FLOPs of `batches` (lists of example indices), counted on the host."""
    source = target = padded = 0
    flops = 0.0
    shapes = set()
    for indices in batches:
        src = [len(data.source_ids[i]) for i in indices]
        tgt = [len(data.target_ids[i]) for i in indices]
        source, target = source + sum(src), target + sum(tgt)
        s_len = -(-max(src) // PAD_TO_MULTIPLE_OF) * PAD_TO_MULTIPLE_OF
        t_len = -(-max(tgt) // PAD_TO_MULTIPLE_OF) * PAD_TO_MULTIPLE_OF
        padded += len(indices) * (s_len + t_len)
        shapes.add((len(indices), s_len, t_len))
        attention_mask = (torch.arange(s_len)[None, :] < torch.tensor(src)[:, None]).long()
        labels = torch.where(torch.arange(t_len)[None, :] < torch.tensor(tgt)[:, None], 1, -100)
        flops += training_flops(config, {"attention_mask": attention_mask, "labels": labels})
    return {
        "source_tokens": source,
        "target_tokens": target,
        "padding_fraction": 1 - (source + target) / padded if padded else 0.0,
        "flops": flops,
        "distinct_shapes": len(shapes),
    }


class _ClockCallback(TrainerCallback):
    def __init__(self, clock: StepClock):
        self.clock = clock

    def on_step_end(self, args, state, control, **kwargs):
        if self.clock.mark():
            control.should_training_stop = True
        return control


# ---- training runs --------------------------------------------------------------------------------------------------


def vaswani_model(preset: str, data, args, vocab_size: int | None = None):
    torch.manual_seed(args.seed)
    config = hf_vaswani.preset_config(preset, data.tokenizer, vocab_size=vocab_size or max(len(data.tokenizer), 8))
    return hf_vaswani.VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def paper_lr(d_model: int, warmup: int = 4000) -> float:
    from hf_vaswani_training.recipe.schedule import peak_learning_rate

    return peak_learning_rate(d_model, warmup)  # §5.3, the peak of the schedule


def common_training_arguments(output_dir: str, args, precision: str, compile_model: bool, max_steps: int) -> dict:
    return dict(
        output_dir=output_dir,
        max_steps=max_steps,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        torch_compile=compile_model,
        use_cpu=not args.cuda,
        learning_rate=0.0,  # replaced by the paper's peak for the model
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=4000,
        **PAPER_OPTIMIZER,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=args.seed,
        predict_with_generate=False,
    )


def run_trainer(preset, data, dataset, args, precision, compile_model, budget_s) -> dict:
    """The recipe's path: VaswaniTrainer on TokenBatchSampler batches (its own get_train_dataloader)."""
    from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
    from hf_vaswani_training.recipe.trainer import VaswaniTrainer

    model = vaswani_model(preset, data, args, vocab_size=args.model_vocab)
    max_steps = args.warmup_steps + args.max_timed_steps
    clock = StepClock(args.device, budget_s, max_steps)
    with tempfile.TemporaryDirectory() as output_dir:
        values = common_training_arguments(output_dir, args, precision, compile_model, max_steps)
        values.update(max_tokens=args.max_tokens, average_last_n=0)
        values["learning_rate"] = paper_lr(model.config.d_model)
        training_args = VaswaniTrainingArguments(**values)
        trainer = VaswaniTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            processing_class=data.tokenizer,
            data_collator=make_collator(data.tokenizer, model),
            callbacks=[_ClockCallback(clock)],
            max_tokens=args.max_tokens,
        )
        clock.started = time.perf_counter()
        trainer.train()
        optimizer = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
        settings = {
            "optimizer": f"{type(optimizer).__name__}(fused={optimizer.defaults.get('fused')}, "
            f"betas={optimizer.defaults.get('betas')}, eps={optimizer.defaults.get('eps')})",
            "dataloader_num_workers": training_args.dataloader_num_workers,
            "pin_memory": training_args.dataloader_pin_memory,
            "tf32": training_args.tf32,
        }
    return finish_run(clock, model.config, data, make_sampler(data, args), args, settings)


class _BatchRows:
    """A dataset whose row i is the i-th token batch: the stock Trainer (batch size 1) then runs the same batches."""

    def __init__(self, data, batches):
        self.data, self.batches = data, batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return [
            {"input_ids": self.data.source_ids[j], "attention_mask": [1] * len(self.data.source_ids[j]),
             "labels": self.data.target_ids[j]}
            for j in self.batches[i]
        ]  # fmt: skip


def run_marian(preset, data, args, precision, compile_model, budget_s) -> dict:
    """MarianMTModel configured alike under the stock Seq2SeqTrainer, on the same batches in the same order."""
    from benchmarks.lib.model_pairs import marian_config

    ours = vaswani_model(preset, data, args, vocab_size=args.model_vocab)
    config = ours.config
    marian = MarianMTModel._from_config(marian_config(config), attn_implementation="sdpa")
    del ours
    max_steps = args.warmup_steps + args.max_timed_steps
    clock = StepClock(args.device, budget_s, max_steps)
    batches = batches_of_steps(make_sampler(data, args), max_steps)
    collator = DataCollatorForSeq2Seq(data.tokenizer, model=marian, label_pad_token_id=-100, pad_to_multiple_of=8)
    with tempfile.TemporaryDirectory() as output_dir:
        values = common_training_arguments(output_dir, args, precision, compile_model, max_steps)
        values.update(per_device_train_batch_size=1, train_sampling_strategy="sequential", remove_unused_columns=False)
        values["learning_rate"] = paper_lr(config.d_model)
        trainer = Seq2SeqTrainer(
            model=marian,
            args=Seq2SeqTrainingArguments(**values),
            train_dataset=_BatchRows(data, batches),
            processing_class=data.tokenizer,
            data_collator=lambda rows: collator(rows[0]),
            callbacks=[_ClockCallback(clock)],
        )
        clock.started = time.perf_counter()
        trainer.train()
    settings = {"batches": "the trainer path's token batches, one dataset row each", "label_smoothing": "LabelSmoother"}
    return finish_run(clock, config, data, make_sampler(data, args), args, settings)


def run_lean(preset, data, args, precision, compile_model, budget_s) -> dict:
    """Forward with the loss, backward, fused AdamW, schedule: the floor a Trainer's overhead is measured against."""
    from torch.utils.data import DataLoader

    model = vaswani_model(preset, data, args, vocab_size=args.model_vocab).to(args.device)
    model.train()
    config = model.config
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=paper_lr(config.d_model), betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=True
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min((step + 1) ** -0.5, (step + 1) * 4000**-1.5) * 4000**0.5)  # fmt: skip
    scaler = torch.amp.GradScaler(args.device.type, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    step_fn = torch.compile(model) if compile_model else model
    dataset = make_dataset(data)
    loader = DataLoader(
        dataset,
        batch_sampler=make_sampler(data, args),
        collate_fn=make_collator(data.tokenizer, model),
        pin_memory=args.cuda,
        num_workers=2 if args.cuda else 0,
    )
    max_steps = args.warmup_steps + args.max_timed_steps
    clock = StepClock(args.device, budget_s, max_steps)
    epoch, done = 0, False
    while not done:
        loader.batch_sampler.set_epoch(epoch)
        for batch in loader:
            batch = {k: v.to(args.device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(args.device.type, dtype=dtype, enabled=dtype is not None):
                loss = step_fn(**batch, label_smoothing=LABEL_SMOOTHING, loss_only=True).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if clock.mark():
                done = True
                break
        epoch += 1
    return finish_run(clock, config, data, make_sampler(data, args), args, {"optimizer": "AdamW(fused=True)"})


def finish_run(clock: StepClock, config, data, sampler, args, settings: dict) -> dict:
    steps = len(clock.marks)
    if steps <= args.warmup_steps:
        return {"status": f"out of budget: {steps} step(s), none timed after {args.warmup_steps} warm-up"}
    seconds = clock.step_seconds(args.warmup_steps)
    batches = batches_of_steps(sampler, steps)[args.warmup_steps :]
    stats = batch_statistics(data, batches, config)
    total = sum(seconds)
    quantiles = statistics.quantiles(seconds, n=10, method="inclusive") if len(seconds) > 1 else [seconds[0]] * 9
    result = {
        "status": "ok",
        "timed_steps": len(seconds),
        "seconds": total,
        "target_tokens_per_s": stats["target_tokens"] / total,
        "tokens_per_s": (stats["source_tokens"] + stats["target_tokens"]) / total,
        "step_ms_median": 1e3 * statistics.median(seconds),
        "step_ms_p10": 1e3 * quantiles[0],
        "step_ms_p90": 1e3 * quantiles[-1],
        "flop_per_s": stats["flops"] / total,
        "padding_fraction": stats["padding_fraction"],
        "distinct_shapes": stats["distinct_shapes"],
        "settings": settings,
    }
    if args.cuda:
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated(args.device) / 2**30
    if args.matmul_peak:
        result["mfu_measured_percent"] = 100 * result["flop_per_s"] / args.matmul_peak
    if args.datasheet_peak:
        result["mfu_datasheet_percent"] = 100 * result["flop_per_s"] / args.datasheet_peak
    return result


# ---- decoding -------------------------------------------------------------------------------------------------------


def decoding_batches(data, args):
    """Length-sorted batches of `--gen_batch_size` sentences (as translate() batches them)."""
    encoded = data.tokenizer(data.sentences, truncation=True, max_length=256)["input_ids"]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    batches = []
    for start in range(0, len(order), args.gen_batch_size):
        rows = [encoded[i] for i in order[start : start + args.gen_batch_size]]
        padded = data.tokenizer.pad({"input_ids": rows}, return_tensors="pt")
        batches.append({k: v.to(args.device) for k, v in padded.items()})
    return batches


def marian_generation_config(config, num_beams: int) -> GenerationConfig:
    values = dict(
        do_sample=False, num_beams=num_beams, use_cache=True, bos_token_id=config.bos_token_id,
        pad_token_id=config.pad_token_id, eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )  # fmt: skip
    if num_beams > 1:
        values.update(length_penalty=0.6, early_stopping=False)  # HF's penalty: Marian has no GNMT form
    return GenerationConfig(**values)


@torch.no_grad()
def run_decoding(model, batches, num_beams: int, static_compile: bool, is_ours: bool, args, budget_s) -> dict:
    """Sentences/s of generate() over the batches (the first one once more as warm-up, untimed)."""
    model.eval()
    if is_ours:
        hf_vaswani.set_paper_decoding(model.generation_config, num_beams=num_beams)
    else:
        model.generation_config = marian_generation_config(model.config, num_beams)
    extra = {"cache_implementation": "static"} if static_compile else {}

    def generate(batch):
        if args.max_new_tokens is not None:  # both models alike
            limit = {"max_new_tokens": args.max_new_tokens}
        else:  # ours: the paper's source + 50 per row (its generation config); Marian: the batch's longest + 50
            limit = {} if is_ours else {"max_new_tokens": int(batch["attention_mask"].sum(-1).max()) + 50}
        return model.generate(**batch, **limit, **extra)

    started = time.perf_counter()
    generate(batches[0])
    synchronize(args.device)
    warmup_s = time.perf_counter() - started
    sentences = generated = 0
    started = time.perf_counter()
    for batch in batches:
        out = generate(batch)
        sentences += batch["input_ids"].shape[0]
        generated += int((out[:, 1:] != model.config.pad_token_id).sum())
        if time.perf_counter() - started > budget_s:
            break
    synchronize(args.device)
    seconds = time.perf_counter() - started
    return {
        "status": "ok",
        "sentences": sentences,
        "seconds": seconds,
        "sentences_per_s": sentences / seconds,
        "generated_tokens_per_s": generated / seconds,
        "warmup_seconds": warmup_s,
    }


# ---- the run --------------------------------------------------------------------------------------------------------


def plan(args) -> list[dict]:
    """Every row of the table, in the order run: what matters most first, compiled variants (slow to build) last."""
    rows = []
    first = args.presets[0]
    for preset in args.presets:
        rows.append(dict(kind="train", preset=preset, path="trainer", precision="bf16", compile=False, share=3))
        rows.append(dict(kind="train", preset=preset, path="marian", precision="bf16", compile=False, share=2))
        rows.append(dict(kind="train", preset=preset, path="lean", precision="bf16", compile=False, share=2))
    rows.append(dict(kind="train", preset=first, path="trainer", precision="fp16", compile=False, share=2))
    decode_preset = first
    for model in ("ours", "marian"):
        for search in ("beam4", "greedy"):
            rows.append(dict(kind="decode", preset=decode_preset, model=model, search=search, compile=False, share=1.5))
    for preset in args.presets:
        rows.append(dict(kind="train", preset=preset, path="trainer", precision="bf16", compile=True, share=4))
    rows.append(dict(kind="train", preset=first, path="lean", precision="bf16", compile=True, share=3))
    for model in ("ours", "marian"):
        rows.append(dict(kind="decode", preset=decode_preset, model=model, search="beam4", compile=True, share=2))
    for row in rows:
        if row["kind"] == "train":
            row["name"] = f"{row['preset']} {row['path']} {row['precision']}{' compiled' if row['compile'] else ''}"
        else:
            row["name"] = f"{row['preset']} generate {row['model']} {row['search']}"
            row["name"] += " static cache+compile" if row["compile"] else " eager"
    return rows


def skip_reason(row, args) -> str | None:
    tags = {row["kind"] == "decode" and "decoding", row.get("path"), row["compile"] and "compile", row["name"]}
    if row.get("precision") == "fp16":
        tags.add("fp16")
    if args.skip & tags:
        return "skipped: --skip"
    if not args.cuda and (row["compile"] or row.get("precision") == "fp16"):
        return "skipped: no CUDA"
    if row.get("precision") == "bf16" and not has_bf16(args.device):
        return "skipped: no bf16 on this GPU"
    return None


def run_row(row, data, dataset, args, budget_s) -> dict:
    if row["kind"] == "train":
        run = {"trainer": run_trainer, "lean": run_lean}.get(row["path"])
        if run is run_trainer:
            return run_trainer(row["preset"], data, dataset, args, row["precision"], row["compile"], budget_s)
        if run is run_lean:
            return run_lean(row["preset"], data, args, row["precision"], row["compile"], budget_s)
        return run_marian(row["preset"], data, args, row["precision"], row["compile"], budget_s)
    ours = args.decode_models["ours"]
    model = ours if row["model"] == "ours" else args.decode_models["marian"]
    return run_decoding(model, args.decode_batches, 4 if row["search"] == "beam4" else 1, row["compile"],
                        row["model"] == "ours", args, budget_s)  # fmt: skip


def prepare_decoding(data, args) -> None:
    from benchmarks.lib.model_pairs import marian_from_ours

    if args.model_dir is not None:
        ours = hf_vaswani.VaswaniForConditionalGeneration.from_pretrained(args.model_dir, attn_implementation="sdpa")
        args.decode_weights = f"loaded from {args.model_dir}"
    else:
        ours = vaswani_model(args.presets[0], data, args, vocab_size=args.model_vocab)
        args.decode_weights = "random (outputs run to the length limit): compare the models, not the absolute figures"
    marian = marian_from_ours(ours.float().eval())  # copies of the same weights, in float32 on the CPU
    dtype = torch.bfloat16 if args.cuda and has_bf16(args.device) else torch.float32  # both alike
    ours, marian = (model.to(args.device, dtype).eval() for model in (ours, marian))
    args.decode_models = {"ours": ours, "marian": marian}
    args.decode_batches = decoding_batches(data, args)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import transformers

    transformers.utils.logging.set_verbosity_warning()
    started = time.perf_counter()
    deadline = started + args.budget
    name = device_name(args.device)
    args.datasheet_peak, datasheet = datasheet_peak(name) if args.cuda else (None, "no datasheet peak for a CPU")
    matmul_dtype = torch.bfloat16 if has_bf16(args.device) else torch.float16
    args.matmul_peak = measured_matmul_peak(args.device, matmul_dtype, args.tiny)
    data = load_data(args)
    args.model_vocab = max(args.vocab_size, len(data.tokenizer))  # the paper's 37,000 even if BPE stopped short
    dataset = make_dataset(data)
    rows = plan(args)
    report = {
        "meta": {
            "device": name,
            "date": time.strftime("%Y-%m-%d"),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "matmul_peak_tflops": args.matmul_peak / 1e12,
            "matmul_dtype": str(matmul_dtype).removeprefix("torch."),
            "datasheet": datasheet,
            "datasheet_peak_tflops": args.datasheet_peak / 1e12 if args.datasheet_peak else None,
            "max_tokens": args.max_tokens,
            "vocab_size": args.model_vocab,
            "bpe_size": len(data.tokenizer),
            "pairs": len(data.source_ids),
            "data": data.folder,
            "budget_s": args.budget,
            "decode_weights": None,
        },
        "rows": rows,
        "targets": [],
    }
    shares = sum(row["share"] for row in rows if skip_reason(row, args) is None)
    for index, row in enumerate(rows):
        reason = skip_reason(row, args)
        left = deadline - time.perf_counter()
        if reason is None and left < 3:
            reason = "skipped: time budget spent"
        if reason is not None:
            row["result"] = {"status": reason}
            continue
        budget_s = min(left, args.budget * row["share"] / shares)
        logger.info("[%d/%d] %s (%.0f s)", index + 1, len(rows), row["name"], budget_s)
        try:
            if row["kind"] == "decode" and not hasattr(args, "decode_models"):
                prepare_decoding(data, args)
                report["meta"]["decode_weights"] = args.decode_weights
            if args.cuda:
                torch.cuda.reset_peak_memory_stats(args.device)
            counters = _dynamo_graphs()
            row["result"] = run_row(row, data, dataset, args, budget_s)
            if row["compile"]:
                row["result"]["graphs_compiled"] = _dynamo_graphs() - counters
        except Exception as error:  # a benchmark reports a failed variant and goes on to the next
            logger.exception("%s failed", row["name"])
            row["result"] = {"status": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:160]}"}
        finally:
            gc.collect()
            if args.cuda:
                torch.cuda.empty_cache()
        report["meta"]["seconds"] = time.perf_counter() - started
        report["targets"] = ratios(rows)
        write(report, args.out)
    report["meta"]["seconds"] = time.perf_counter() - started
    report["targets"] = ratios(rows)
    write(report, args.out)
    print()
    print(markdown(report), end="")
    return report


def _dynamo_graphs() -> int:
    with contextlib.suppress(Exception):
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
