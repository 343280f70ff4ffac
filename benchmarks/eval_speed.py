"""Evaluation during training: the stock predict_with_generate loop against decoding through translate_ids.

    python -m benchmarks.eval_speed --model_dir outputs/multi30k-de-en [--data_dir ../shared/data/multi30k]

Both evaluations run through VaswaniTrainer.evaluate() on the same model and the same tokenized validation split:
"stock" is what evaluation did before (Seq2SeqTrainer's prediction_step, --per_device_eval_batch_size sentences
per batch in dataset order, scored by train.make_compute_metrics), "translate_ids" is the current path
(length-sorted batches of <= --eval_max_tokens source tokens). The rounds are interleaved, so a busy shared CPU
slows both alike. Then a few training steps of the multi30k recipe's batches (--max_tokens 1280, Adam, label
smoothing 0.1) are timed on a copy of the model, and the share of wall time that evaluation takes at the
multi30k-full recipe's eval frequency (eval_steps) is printed: eval / (eval_steps x step + eval).
"""

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq

from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.batching import TokenBatchSampler
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
from hf_vaswani_training.recipe.metrics import load_translation_metric
from hf_vaswani_training.recipe.train import make_compute_metrics
from hf_vaswani_training.recipe.trainer import VaswaniTrainer
from hf_vaswani_training.serving.decoding import DEFAULT_MAX_TOKENS

REPO_ROOT = Path(__file__).resolve().parents[1]


def tokenized(tokenizer, pairs, source_lang: str, target_lang: str, max_length: int) -> datasets.Dataset:
    sources = [pair[source_lang] for pair in pairs["translation"]]
    targets = [pair[target_lang] for pair in pairs["translation"]]
    encoded = tokenizer(sources, text_target=targets, truncation=True, max_length=max_length)
    return datasets.Dataset.from_dict({"input_ids": encoded["input_ids"], "labels": encoded["labels"]})


def make_trainer(model, tokenizer, dataset, metric, decode: bool, eval_max_tokens: int, batch_size: int):
    args = VaswaniTrainingArguments(
        output_dir="/tmp/eval_speed_unused",
        report_to="none",
        eval_max_tokens=eval_max_tokens,
        per_device_eval_batch_size=batch_size,
        dataloader_num_workers=0,
        generation_num_beams=model.generation_config.num_beams,
        disable_tqdm=True,
    )
    return VaswaniTrainer(
        model=model,
        args=args,
        eval_dataset=dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        compute_metrics=make_compute_metrics(tokenizer, metric),
        translation_metric=metric if decode else None,
    )


def training_step_seconds(model, train: datasets.Dataset, tokenizer, max_tokens: int, steps: int) -> float:
    """Median seconds of one optimizer step on the recipe's token batches (forward, backward, Adam)."""
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    lengths = [len(ids) for ids in train["input_ids"]], [len(ids) for ids in train["labels"]]
    sampler = TokenBatchSampler(*lengths, max_tokens=max_tokens, shuffle=True, seed=0, num_replicas=1, rank=0)
    timings = []
    for step, batch in enumerate(sampler):
        if step > steps:  # the first step (allocations) is not timed
            break
        features = [{"input_ids": train[i]["input_ids"], "labels": train[i]["labels"]} for i in batch]
        inputs = collator(features)
        start = time.perf_counter()
        loss = model(**inputs, label_smoothing=0.1, loss_only=True).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step:
            timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="A trained model folder (model, tokenizer).")
    parser.add_argument("--data_dir", default=str(REPO_ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--max_eval_samples", type=int, default=None, help="Default: the whole validation split.")
    parser.add_argument(
        "--eval_max_tokens", type=int, nargs="+", default=[DEFAULT_MAX_TOKENS], help="One or more budgets."
    )
    parser.add_argument("--stock_batch_size", type=int, default=8, help="The stock loop's sentences per batch.")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip_stock", action="store_true", help="Time only the translate_ids evaluations.")
    parser.add_argument("--train_steps", type=int, default=20, help="Training steps timed for the share.")
    parser.add_argument("--recipe", default=str(REPO_ROOT / "training" / "recipe" / "recipes" / "multi30k-full.json"))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own).")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = json.loads(Path(args.recipe).read_text())

    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    raw = load_parallel_data(
        DataArguments(source_lang=args.source_lang, target_lang=args.target_lang, data_dir=args.data_dir)
    ).splits
    validation = raw["validation"]
    if args.max_eval_samples:
        validation = validation.select(range(min(args.max_eval_samples, len(validation))))
    eval_set = tokenized(
        tokenizer, validation, args.source_lang, args.target_lang, recipe.get("max_source_length", 256)
    )
    metric = load_translation_metric()

    paths = {}
    if not args.skip_stock:
        paths["stock"] = make_trainer(
            model, tokenizer, eval_set, metric, False, DEFAULT_MAX_TOKENS, args.stock_batch_size
        )
    for budget in args.eval_max_tokens:
        paths[f"translate_ids@{budget}"] = make_trainer(model, tokenizer, eval_set, metric, True, budget, 8)
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    scores: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, trainer in paths.items():
            start = time.perf_counter()
            scores[name] = trainer.evaluate()
            seconds[name].append(time.perf_counter() - start)

    train = raw["train"].shuffle(seed=0).select(range(min(4000, len(raw["train"]))))
    train_set = tokenized(tokenizer, train, args.source_lang, args.target_lang, recipe.get("max_source_length", 256))
    step = training_step_seconds(model, train_set, tokenizer, recipe["max_tokens"], args.train_steps)
    eval_steps = recipe["eval_steps"]

    print(
        f"\n{len(eval_set)} validation sentences, beam {model.generation_config.num_beams}, "
        f"{torch.get_num_threads()} threads, {args.rounds} interleaved round(s); model {args.model_dir}"
    )
    print(f"training step (max_tokens {recipe['max_tokens']}): {step:.3f} s (median of {args.train_steps})")
    print(f"eval every {eval_steps} steps ({Path(args.recipe).name}) = {eval_steps * step:.0f} s of training\n")
    print("| evaluation | seconds (median) | vs stock | eval_bleu | eval_chrf | eval_loss | share of wall time |")
    print("|---|---|---|---|---|---|---|")
    stock = statistics.median(seconds["stock"]) if "stock" in seconds else float("nan")
    for name in paths:
        median = statistics.median(seconds[name])
        share = median / (eval_steps * step + median)
        metrics = scores[name]
        print(
            f"| {name} | {median:.1f} | {stock / median:.2f}x | {metrics['eval_bleu']:.2f} | {metrics['eval_chrf']:.2f}"
            f" | {metrics.get('eval_loss', float('nan')):.3f} | {100 * share:.1f}% |"
        )


if __name__ == "__main__":
    main()
