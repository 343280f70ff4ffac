"""The data of the GPU benchmark: WMT14-shaped pairs (benchmarks/lib/corpus.py's synthetic corpus, or text files), a
joint BPE trained on them, the token ids, written once to a folder that every row's process reads; the recipe's own
token batches and collator (taken from a `VaswaniTrainer`, so that the benchmark measures whatever the recipe does,
bounded batch shapes included); and what a list of batches costs: real tokens, padding, distinct shapes, FLOPs.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
import types
from pathlib import Path

import torch

from .corpus import write_corpus
from .mfu import training_flops

logger = logging.getLogger("gpu_benchmark")

MAX_LENGTH = 256  # the WMT recipes' max_source_length / max_target_length


def prepare_data(folder: Path, pairs: int, vocab_size: int, sentences: int, seed: int, tiny: bool,
                 data_dir: Path | None = None) -> Path:  # fmt: skip
    """Write `folder/{tokenizer/,ids.json,test.en,test.de}` unless there; return `folder`."""
    from hf_vaswani_training.data.tokenizer import train_joint_bpe

    if (folder / "ids.json").is_file():
        return folder
    if data_dir is None:
        data_dir = Path(tempfile.gettempdir()) / f"hf-vaswani-gpu-bench-corpus-{pairs}{'-tiny' if tiny else ''}"
        write_corpus(data_dir, pairs, num_types=2_000 if tiny else 350_000, seed=seed, eval_pairs=(8, 1003))

    def read(split, lang):
        path = data_dir / f"{split}.{lang}"
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []

    source, target = read("train", "en")[:pairs], read("train", "de")[:pairs]
    if not source or len(source) != len(target):
        raise SystemExit(f"{data_dir}: needs train.en and train.de with the same number of lines")
    test_source, test_target = read("test", "en"), read("test", "de")
    if not test_source:  # decode held-out lines if there is no test split: the last `sentences` pairs
        test_source, test_target = source[-sentences:], target[-sentences:]
        source, target = source[:-sentences], target[:-sentences]
    started = time.perf_counter()
    tokenizer = train_joint_bpe(iter(source + target), vocab_size=vocab_size)
    ids = {
        "source": tokenizer(source, truncation=True, max_length=MAX_LENGTH)["input_ids"],
        "target": tokenizer(text_target=target, truncation=True, max_length=MAX_LENGTH)["input_ids"],
        "corpus": str(data_dir),
    }
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder / "tokenizer")
    (folder / "test.en").write_text("\n".join(test_source[:sentences]) + "\n", encoding="utf-8")
    (folder / "test.de").write_text("\n".join(test_target[:sentences]) + "\n", encoding="utf-8")
    (folder / "ids.json").write_text(json.dumps(ids))
    logger.info("BPE of %d tokens trained and %d pairs tokenized in %.1f s", len(tokenizer), len(source),
                time.perf_counter() - started)  # fmt: skip
    return folder


def load_data(folder: Path):
    from transformers import PreTrainedTokenizerFast

    ids = json.loads((folder / "ids.json").read_text())
    return types.SimpleNamespace(
        tokenizer=PreTrainedTokenizerFast.from_pretrained(folder / "tokenizer"),
        source_ids=ids["source"],
        target_ids=ids["target"],
        corpus=ids["corpus"],
        test_source=(folder / "test.en").read_text(encoding="utf-8").splitlines(),
        test_target=(folder / "test.de").read_text(encoding="utf-8").splitlines(),
        folder=str(folder),
    )


def make_dataset(data):
    import datasets

    return datasets.Dataset.from_dict(
        {
            "input_ids": data.source_ids,
            "attention_mask": [[1] * len(s) for s in data.source_ids],
            "labels": data.target_ids,
        }
    )


def features(data, indices) -> list[dict]:
    return [
        {"input_ids": data.source_ids[i], "attention_mask": [1] * len(data.source_ids[i]), "labels": data.target_ids[i]}
        for i in indices
    ]


def recipe_batching(trainer) -> tuple:
    """(the TokenBatchSampler, the collator) that `trainer` (a VaswaniTrainer) trains with, from its own dataloader:
    whatever the recipe does (bucketed shapes, padding to a multiple of 8) is what the other paths get too."""
    loader = trainer.get_train_dataloader()
    sampler = loader.batch_sampler
    while not hasattr(sampler, "all_batches") and hasattr(sampler, "batch_sampler"):
        sampler = sampler.batch_sampler  # Accelerate's wrapper
    collate = getattr(loader, "collate_fn", None) or trainer.data_collator
    return sampler, collate


def micro_batches(sampler, count: int) -> list[list[int]]:
    """The first `count` batches the sampler gives one process, epochs one after another, as the Trainer draws them."""
    out, epoch = [], 0
    while len(out) < count:
        batches = sampler.all_batches(epoch)
        if not batches:
            break
        out.extend(batches)
        epoch += 1
    return out[:count]


def batch_statistics(data, batches, collate, config=None) -> dict:
    """Real and padded tokens, distinct shapes and (with `config`) model FLOPs of `batches` as `collate` pads them."""
    source = target = padded = 0
    flops = 0.0
    shapes = set()
    for indices in batches:
        batch = collate(features(data, indices))
        mask, labels = batch["attention_mask"], batch["labels"]
        source += int(mask.sum())
        target += int((labels != -100).sum())
        padded += mask.numel() + labels.numel()
        shapes.add((tuple(batch["input_ids"].shape), tuple(labels.shape)))
        if config is not None:
            flops += training_flops(config, {"attention_mask": mask, "labels": labels})
    return {
        "batches": len(batches),
        "source_tokens": source,
        "target_tokens": target,
        "padding_fraction": 1 - (source + target) / padded if padded else 0.0,
        "distinct_shapes": len(shapes),
        "flops": flops,
    }


def paper_lr(d_model: int, warmup: int = 4000) -> float:
    from hf_vaswani_training.recipe.schedule import peak_learning_rate

    return peak_learning_rate(d_model, warmup)  # §5.3, the peak of the schedule


def vaswani_model(preset: str, tokenizer, vocab_size: int, seed: int):
    import hf_vaswani

    torch.manual_seed(seed)
    config = hf_vaswani.preset_config(preset, tokenizer, vocab_size=vocab_size)
    return hf_vaswani.VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")
