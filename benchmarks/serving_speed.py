#!/usr/bin/env python
"""Serving speed and agreement: this project's generate() against MarianMTModel and CTranslate2, one run.

    python -m benchmarks.serving_speed --model-dir outputs/multi30k-de-en --threads 2
    python -m benchmarks.serving_speed --model-dir DIR --limit 200 --splits test     # a quick look

A benchmark, not a test: it prints measured numbers (and writes them to `--output` as JSON) and asserts nothing
about time. Same weights in every engine: the model folder, its conversions through
`hf_vaswani_training.serving.ctranslate2_export` (CTranslate2's converter with this project's loader; float32 and int8), and
a `transformers.MarianMTModel` holding copies of them (`marian_from_ours` in benchmarks/lib/model_pairs.py: the same
function, the §3.5 table given to Marian; `--no-marian` skips it). Data: Multi30K
(`--data-dir`, default ../shared/data/multi30k or $MULTI30K_DIR), read by path: test_2016_flickr and val, de->en.

Every engine decodes the same length-sorted batches (`--batch-size` sentences, the batching of
`training.serving.decoding.translate_texts`), with `--threads` intra-op threads. Decoding settings:
- generate(), CTranslate2's rules: Hugging Face length penalty alpha 0.6 (log P / |Y|^alpha), early_stopping=True,
  outputs at most (longest source of the batch) + 50 tokens. The Marian and CTranslate2 rows use exactly these, so
  "tokens identical" compares the engines, not the settings.
- generate(), the paper's defaults (the model's generation_config): GNMT penalty ((5 + |Y|) / 6)^0.6,
  early_stopping="never", each source's own limit (its length + 50). CTranslate2 cannot express these three; the
  BLEU table measures what each costs (`--no-ablation` skips the two intermediate runs).
Greedy uses the batch limit everywhere. Per split: sentences/s (wall clock; process CPU seconds alongside, steadier
on a shared machine), the share of sentences whose tokens equal generate()'s, and sacreBLEU (13a, cased).

Checks printed at the end (issue 13): CTranslate2 float32 greedy and beam tokens identical to generate() on >= 99 %
of test_2016; int8 beam BLEU within 0.3 of float32 on test_2016 and on the validation set.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
SPLIT_FILES = {"test": "test_2016_flickr", "validation": "val"}
OFFSET = 50  # §6.1: outputs at most source length + 50
ALPHA = 0.6  # §6.1: length penalty

logger = logging.getLogger("serving")


def read_split(data_dir: Path, split: str, source_lang: str, target_lang: str, limit: int | None):
    def lines(lang: str) -> list[str]:
        path = data_dir / f"{SPLIT_FILES[split]}.{lang}.gz"
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return [line.strip() for line in handle]

    sources, references = lines(source_lang), lines(target_lang)
    return sources[:limit], references[:limit]


def loadavg() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


class Timer:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def generate_ids(model, tokenizer, encoded, batches, limit: str, **kwargs) -> tuple[list[list[int]], Timer]:
    """generate() over `batches`: each sentence's best output as ids (no start token, EOS or padding), and the time.
    `limit`: "batch" (max_new_tokens = longest source of the batch + 50), "row" (each source its own + 50; this
    model only), or "marian" (the batch limit, for a model without `max_length_offset`)."""
    from hf_vaswani_training.serving.ctranslate2_export import strip_special

    config = model.config
    outputs: list = [None] * len(encoded)
    # The search's work: decoder rows computed (one per running sequence per step), counted at the decoder's input.
    decoder_rows = [0]

    def count_rows(module, args, kwargs):
        tokens = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("inputs_embeds")
        decoder_rows[0] += tokens.shape[0]

    hook = model.get_decoder().register_forward_pre_hook(count_rows, with_kwargs=True)
    with Timer() as timer, torch.no_grad():
        for batch in batches:
            features = [{"input_ids": encoded[i], "attention_mask": [1] * len(encoded[i])} for i in batch]
            inputs = tokenizer.pad(features, return_tensors="pt")
            if limit in ("batch", "marian"):
                longest = max(len(encoded[i]) for i in batch)
                extra = {"max_length_offset": None} if limit == "batch" else {}
                rows = model.generate(**inputs, max_new_tokens=longest + OFFSET, **extra, **kwargs)
            else:
                rows = model.generate(**inputs, max_length_offset=OFFSET, **kwargs)
            for index, row in zip(batch, rows.tolist(), strict=True):
                outputs[index] = strip_special(
                    row, config.decoder_start_token_id, config.eos_token_id, config.pad_token_id
                )
    hook.remove()
    timer.decoder_rows = decoder_rows[0]
    return outputs, timer


def ctranslate2_ids(translator, sentences, batch_size: int, **kwargs) -> tuple[list[list[int]], Timer]:
    with Timer() as timer:
        nbest = translator.translate_tokens(
            sentences, max_tokens=10**9, max_sentences=batch_size, max_length_offset=OFFSET, **kwargs
        )
    return [outputs[0] for outputs in nbest], timer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="a model folder written by vaswani-train")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    parser.add_argument("--source-lang", default="de")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--splits", default="test,validation", help="comma-separated: test, validation")
    parser.add_argument("--limit", type=int, help="only the first N sentences of each split")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for every engine")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per length-sorted batch")
    parser.add_argument("--no-ablation", action="store_true", help="skip the two intermediate BLEU runs")
    parser.add_argument("--no-marian", action="store_true", help="skip MarianMTModel holding the same weights")
    parser.add_argument(
        "--full-splits",
        default="test",
        help="splits that get every run; the others get generate()'s two beam runs and the CTranslate2 runs only",
    )
    parser.add_argument("--output", help="write all numbers here as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO, stream=sys.stderr)
    logging.getLogger("hf_vaswani_training").setLevel(logging.WARNING)

    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_vaswani  # noqa: F401
    from hf_vaswani_training.serving.ctranslate2_export import CTranslate2Translator, convert_to_ctranslate2
    from hf_vaswani_training.serving.decoding import length_sorted_batches

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    engines = {"torch": model}
    if not args.no_marian:
        from benchmarks.lib.model_pairs import marian_from_ours

        with torch.no_grad():
            engines["marian"] = marian_from_ours(model).eval()
    work = tempfile.TemporaryDirectory(prefix="serving-")
    translators = {}
    for name, quantization in (("ct2_float32", None), ("ct2_int8", "int8")):
        out = convert_to_ctranslate2(args.model_dir, Path(work.name) / name, quantization=quantization)
        translators[name] = CTranslate2Translator(out, intra_threads=args.threads)

    ct2_rules = dict(length_penalty=ALPHA, length_penalty_type=None, early_stopping=True)
    paper = dict(length_penalty=ALPHA, length_penalty_type="gnmt", early_stopping="never")
    # (name, engine, options, limit, whether it is timed for the table)
    runs = [
        ("generate_greedy", "torch", dict(num_beams=1), "batch"),
        ("generate_beam", "torch", dict(num_beams=4, **ct2_rules), "batch"),
        ("generate_beam_paper", "torch", dict(num_beams=4, **paper), "row"),
    ]
    if not args.no_ablation:
        runs += [
            ("ablation_hf_penalty", "torch", dict(num_beams=4, **{**paper, "length_penalty_type": None}), "row"),
            (
                "ablation_hf_penalty_batch_limit",
                "torch",
                dict(num_beams=4, **{**paper, "length_penalty_type": None}),
                "batch",
            ),
        ]
    if "marian" in engines:
        runs += [
            ("marian_greedy", "marian", dict(num_beams=1), "marian"),
            ("marian_beam", "marian", dict(num_beams=4, length_penalty=ALPHA, early_stopping=True), "marian"),
        ]
    for name in translators:
        runs += [
            (f"{name}_greedy", name, dict(num_beams=1), "batch"),
            (f"{name}_beam", name, dict(num_beams=4), "batch"),
        ]

    report = {
        "model_dir": args.model_dir,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": loadavg(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "ctranslate2": __import__("ctranslate2").__version__,
        },
        "splits": {},
    }
    logger.info("load average at start: %s", report["loadavg_start"])
    for split in args.splits.split(","):
        sources, references = read_split(Path(args.data_dir), split, args.source_lang, args.target_lang, args.limit)
        encoded = tokenizer(sources)["input_ids"]
        batches = length_sorted_batches([len(ids) for ids in encoded], 10**9, args.batch_size)
        # Warm-up: one batch through every engine, so that first-call costs are not timed.
        warm = [sources[i] for i in batches[0]]
        for engine, module in engines.items():
            limit = "marian" if engine == "marian" else "batch"
            generate_ids(
                module, tokenizer, [encoded[i] for i in batches[0]], [list(range(len(warm)))], limit, num_beams=4
            )
        for translator in translators.values():
            ctranslate2_ids(translator, warm, args.batch_size, num_beams=4)
        results = {}
        full = split in args.full_splits.split(",")
        for name, engine, options, limit in runs:
            if not full and engine in engines and name not in ("generate_beam", "generate_beam_paper"):
                continue
            if engine in engines:
                ids, timer = generate_ids(engines[engine], tokenizer, encoded, batches, limit, **options)
            else:
                ids, timer = ctranslate2_ids(translators[engine], sources, args.batch_size, **options)
            texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
            bleu = sacrebleu.corpus_bleu(texts, [references]).score
            results[name] = {"ids": ids, "wall_s": timer.wall, "cpu_s": timer.cpu, "bleu": bleu}
            if hasattr(timer, "decoder_rows"):
                results[name]["decoder_rows"] = timer.decoder_rows
            logger.info(
                "%s %-32s %6.1f sent/s  cpu %6.1f s  BLEU %5.2f  (load %s)",
                split, name, len(sources) / timer.wall, timer.cpu, bleu, loadavg(),
            )  # fmt: skip
        for name, result in results.items():
            reference = results.get("generate_greedy" if name.endswith("greedy") else "generate_beam")
            if reference is not None:
                result["identical"] = sum(a == b for a, b in zip(result["ids"], reference["ids"])) / len(sources)
            result["sent_per_s"] = len(sources) / result["wall_s"]
            result["sent_per_cpu_s"] = len(sources) / result["cpu_s"]
        for result in results.values():
            del result["ids"]
        report["splits"][split] = {"sentences": len(sources), "results": results}
    report["loadavg_end"] = loadavg()
    print_report(report)
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def _cell(result: dict | None, key: str, form: str) -> str:
    return "–" if result is None or key not in result else format(result[key], form)


def print_report(report: dict) -> None:
    print(
        f"\nthreads {report['threads']}, batches of {report['batch_size']} (length-sorted), {report['cpu']} "
        f"x{report['cpu_count']}, load average {report['loadavg_start']} -> {report['loadavg_end']}"
    )
    for split, data in report["splits"].items():
        results = data["results"]
        print(f"\n## {split} ({data['sentences']} sentences)\n")
        print("| engine | greedy sent/s | beam 4 sent/s | tokens identical to generate() (greedy / beam) "
              "| BLEU greedy | BLEU beam 4 |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|")
        rows = [
            ("generate() (HF length penalty, early stop, batch src+50)", "generate_greedy", "generate_beam"),
            ("generate(), the paper's defaults (GNMT 0.6, never, per-row src+50)", None, "generate_beam_paper"),
            ("MarianMTModel, the same weights", "marian_greedy", "marian_beam"),
            ("CTranslate2 float32", "ct2_float32_greedy", "ct2_float32_beam"),
            ("CTranslate2 int8", "ct2_int8_greedy", "ct2_int8_beam"),
        ]
        for label, greedy, beam in rows:
            g, b = results.get(greedy), results.get(beam)
            identical = "–"
            if greedy is not None and greedy != "generate_greedy":
                identical = f"{_cell(g, 'identical', '.1%')} / {_cell(b, 'identical', '.1%')}"
            print(
                f"| {label} | {_cell(g, 'sent_per_s', '.0f')} | {_cell(b, 'sent_per_s', '.0f')} | {identical} "
                f"| {_cell(g, 'bleu', '.2f')} | {_cell(b, 'bleu', '.2f')} |"
            )
        searched = {name: r for name, r in results.items() if r.get("decoder_rows")}
        if searched:
            print(
                "\nsearch work (PyTorch engines): decoder rows per sentence (one per running sequence per step) and "
                "process CPU time per row"
            )
            for name, r in searched.items():
                per_sentence = r["decoder_rows"] / data["sentences"]
                print(
                    f"  {name:<32} {per_sentence:6.1f} rows/sentence  {1e6 * r['cpu_s'] / r['decoder_rows']:6.0f} µs/row"
                )
        print("\nratios (wall clock; process CPU time in parentheses):")
        for engine in ("marian", "ct2_float32", "ct2_int8"):
            for mode, reference in (
                ("greedy", "generate_greedy"),
                ("beam", "generate_beam"),
                ("beam", "generate_beam_paper"),
            ):
                ours, theirs = results.get(f"{engine}_{mode}"), results.get(reference)
                if ours and theirs:
                    print(
                        f"  {engine} {mode} / {reference}: {theirs['wall_s'] / ours['wall_s']:.2f}x "
                        f"({theirs['cpu_s'] / ours['cpu_s']:.2f}x)"
                    )
        print("\nBLEU, beam 4, from the paper's decoding to what CTranslate2 expresses:")
        steps = [
            ("generate_beam_paper", "paper: GNMT penalty, early_stopping never, per-row src+50"),
            ("ablation_hf_penalty", "  HF penalty |Y|^0.6 instead of GNMT"),
            ("ablation_hf_penalty_batch_limit", "  + one limit per batch (longest src + 50)"),
            ("generate_beam", "  + early_stopping=True (= CTranslate2's rules)"),
            ("ct2_float32_beam", "CTranslate2 float32"),
            ("ct2_int8_beam", "CTranslate2 int8"),
        ]
        if "ablation_hf_penalty_batch_limit" not in results:  # the three changes at once
            steps[3] = ("generate_beam", "  all three: HF penalty, batch limit, early stop (CTranslate2's)")
        for name, label in steps:
            if name in results:
                delta = results[name]["bleu"] - results["generate_beam_paper"]["bleu"]
                print(f"  {label:<62} {results[name]['bleu']:6.2f}  ({delta:+.2f})")
    print("\nchecks (issue 13):")
    test = report["splits"].get("test")
    if test:
        for mode in ("greedy", "beam"):
            share = test["results"][f"ct2_float32_{mode}"].get("identical")
            if share is not None:
                verdict = "PASS" if share >= 0.99 else "FAIL"
                print(f"  float32 {mode} tokens identical to generate() on test_2016: {share:.1%} ({verdict} >= 99%)")
    for split, data in report["splits"].items():
        r = data["results"]
        gap = r["ct2_int8_beam"]["bleu"] - r["ct2_float32_beam"]["bleu"]
        print(
            f"  int8 - float32 beam BLEU on {split}: {gap:+.2f} ({'PASS' if abs(gap) <= 0.3 else 'FAIL'} |gap| <= 0.3)"
        )


if __name__ == "__main__":
    sys.exit(main())
