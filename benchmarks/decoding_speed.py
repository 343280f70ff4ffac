"""How fast does generate() translate, ours against MarianMTModel holding the same trained weights, cold and warm?

One decoding row of the GPU benchmark (benchmarks/gpu.py starts one process per row): the weights in `--model_dir`
(trained in the same run, so that outputs end where the model ends them, not at the length limit), as our model
with the paper's decoding (beam 4, GNMT alpha 0.6, at most source + 50 tokens; or greedy) or as a `MarianMTModel`
holding copies of them (benchmarks/lib/model_pairs.py: beam 4 with Hugging Face's length penalty 0.6, at most the
batch's longest source + 50), bf16 on a GPU that has it, float32 elsewhere. Test sentences in length-sorted batches
of `batch_size`, decoded twice:

- cold: the first pass in this process, over shapes it has never run;
- warm: a second pass over the same batches.

Each pass reports the time of its first batch, sentences and generated tokens per second, and the mean output length
(the references' mean beside it). `compile: true` decodes with the static cache (`cache_implementation="static"`,
which transformers compiles on a GPU) and reports the graphs dynamo compiled.

    python -m benchmarks.decoding_speed --data DIR --model_dir DIR --spec '{"model": "ours", "search": "beam4", ...}'

A benchmark, not a test: it prints measured numbers and asserts nothing about time.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
from transformers import GenerationConfig

from benchmarks.lib.machine import has_bf16, synchronize
from benchmarks.lib.row import finish_row, start_row
from benchmarks.lib.train_paths import dynamo_counts
from benchmarks.lib.wmt_data import load_data

logger = logging.getLogger("gpu_benchmark")


def decoding_batches(tokenizer, sentences: list[str], batch_size: int, device) -> list[dict]:
    """Length-sorted batches of `batch_size` sentences (as vaswani-translate batches them)."""
    encoded = tokenizer(sentences, truncation=True, max_length=256)["input_ids"]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = [encoded[i] for i in order[start : start + batch_size]]
        padded = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
        batches.append({k: v.to(device) for k, v in padded.items()})
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


def load_models(model_dir: Path, which: str, device):
    import hf_vaswani
    from benchmarks.lib.model_pairs import marian_from_ours

    ours = hf_vaswani.VaswaniForConditionalGeneration.from_pretrained(model_dir, attn_implementation="sdpa")
    model = ours if which == "ours" else marian_from_ours(ours.float().eval())
    dtype = torch.bfloat16 if device.type == "cuda" and has_bf16(device) else torch.float32
    return model.to(device, dtype).eval()


@torch.no_grad()
def decode_pass(model, batches, spec, is_ours: bool, budget_s: float) -> dict:
    extra = {"cache_implementation": "static"} if spec["compile"] else {}
    pad = model.config.pad_token_id

    def generate(batch):
        if spec.get("max_new_tokens") is not None:  # both models alike
            limit = {"max_new_tokens": spec["max_new_tokens"]}
        else:  # ours: the paper's source + 50 per row (its generation config); Marian: the batch's longest + 50
            limit = {} if is_ours else {"max_new_tokens": int(batch["attention_mask"].sum(-1).max()) + 50}
        return model.generate(**batch, **limit, **extra)

    sentences = generated = ran = 0
    first_batch_s = None
    started = time.perf_counter()
    for batch in batches:
        out = generate(batch)
        sentences += batch["input_ids"].shape[0]
        ran += 1
        generated += int((out[:, 1:] != pad).sum())
        if first_batch_s is None:
            synchronize(out.device)
            first_batch_s = time.perf_counter() - started
        if time.perf_counter() - started > budget_s:
            break
    synchronize(batches[0]["input_ids"].device)
    seconds = time.perf_counter() - started
    return {
        "status": "ok",
        "sentences": sentences,
        "batches": ran,
        "seconds": seconds,
        "first_batch_s": first_batch_s,
        "sentences_per_s": sentences / seconds,
        "generated_tokens_per_s": generated / seconds,
        "mean_output_tokens": generated / sentences,
    }


def measure_row(data, spec: dict, model_dir: Path) -> dict:
    device = torch.device("cuda" if spec["cuda"] else "cpu")
    is_ours = spec["model"] == "ours"
    model = load_models(model_dir, spec["model"], device)
    if is_ours:
        import hf_vaswani

        hf_vaswani.set_paper_decoding(model.generation_config, num_beams=4 if spec["search"] == "beam4" else 1)
    else:
        model.generation_config = marian_generation_config(model.config, 4 if spec["search"] == "beam4" else 1)
    sentences = data.test_source[: spec["sentences"]]
    batches = decoding_batches(data.tokenizer, sentences, spec["batch_size"], device)
    references = data.tokenizer(text_target=data.test_target[: len(sentences)])["input_ids"]
    result = {"status": "ok", "passes": {}, "reference_mean_tokens": sum(map(len, references)) / len(references)}
    started = time.perf_counter()
    for name in ("cold", "warm"):
        left = spec["budget_s"] - (time.perf_counter() - started)
        budget = spec["budget_s"] * 0.6 if name == "cold" else max(left, 1.0)
        counts = dynamo_counts()
        measured = decode_pass(model, batches, spec, is_ours, budget)
        if spec["compile"]:
            measured["graphs_compiled"] = dynamo_counts()["unique_graphs"] - counts["unique_graphs"]
        result["passes"][name] = measured
        logger.info("%s %s: first batch %.2f s, %.1f sent/s, %.1f tokens a sentence", spec.get("name"), name,
                    measured["first_batch_s"], measured["sentences_per_s"], measured["mean_output_tokens"])  # fmt: skip
    return result


def main(argv=None) -> int:
    model_dir = ("--model_dir", dict(type=Path, required=True, help="trained weights (hf_vaswani folder)"))
    args, spec = start_row(__doc__, argv, ["--data", model_dir, "--spec", "--out"])
    return finish_row(spec, args.out, lambda: measure_row(load_data(args.data), spec, args.model_dir))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
