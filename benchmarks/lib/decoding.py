"""Decoding: greedy and beam 4 with identical Hugging Face settings on both models (`length_penalty=1.0`, no GNMT
penalty, the same `max_new_tokens`) on the same batches in corpus order, and ours also through
`training.serving.decoding.translate_texts` (length-sorted batches, the pipeline); sentences/s, generated tokens/s, and whether
both produce identical tokens.
"""

from __future__ import annotations

import copy

import torch
from transformers import GenerationConfig

from .harness import Stopwatch, interleaved
from .mfu import GenerationFlopCounter


def generation_config(num_beams: int, args, config) -> GenerationConfig:
    values = dict(
        do_sample=False,
        num_beams=num_beams,
        max_new_tokens=args.max_new_tokens,
        use_cache=True,
        **{name: getattr(config, name) for name in ("bos_token_id", "pad_token_id", "eos_token_id")},
        decoder_start_token_id=config.decoder_start_token_id,
    )
    if num_beams > 1:
        values.update(length_penalty=1.0, early_stopping=False)
    return GenerationConfig(**values)


def generation_batches(tokenizer, sentences, batch_size, device):
    batches = []
    for start in range(0, len(sentences), batch_size):
        encoded = tokenizer(sentences[start : start + batch_size], padding=True, return_tensors="pt")
        batches.append(
            {"input_ids": encoded["input_ids"].to(device), "attention_mask": encoded["attention_mask"].to(device)}
        )
    return batches


def strip(sequence: torch.Tensor, pad_token_id: int) -> list[int]:
    return [t for t in sequence.tolist()[1:] if t != pad_token_id]


@torch.no_grad()
def bench_generation(models: dict, tokenizer, sources: list[str], num_beams: int, args, config) -> dict:
    """Both models on the same batches of `--gen-batch-size` sentences in corpus order; then ours through
    `training.serving.decoding.translate_texts`, which batches the same number of sentences sorted by length (the pipeline)."""
    from hf_vaswani_training.serving.decoding import translate_texts

    gen_config = generation_config(num_beams, args, config)
    for model in models.values():
        model.eval()
        # Both with the same, explicit settings: ours without its GNMT penalty and source-length limit.
        model.generation_config = copy.deepcopy(gen_config)
    batches = generation_batches(tokenizer, sources, args.gen_batch_size, args.device)
    runs = {
        "ours": lambda: [models["ours"].generate(**batch) for batch in batches],
        "marian": lambda: [models["marian"].generate(**batch) for batch in batches],
        # The pipeline: sorted by length, so a batch's rows finish together (max_tokens high enough that only
        # the sentence count limits a batch).
        "ours_translate": lambda: translate_texts(
            models["ours"], tokenizer, sources, max_tokens=10**9, max_sentences=args.gen_batch_size
        ),
    }
    for model in models.values():  # warm-up
        model.generate(**batches[0])
    outputs, flops, row_steps = {}, {}, {}

    def run(name):
        model = models["marian" if name == "marian" else "ours"]
        with GenerationFlopCounter(model) as counter, Stopwatch(args.device) as watch:
            outputs[name] = runs[name]()
        flops[name], row_steps[name] = counter.flops, counter.decoder_row_steps
        return watch

    timings = interleaved(list(runs), args.repeats, run, f"beam {num_beams}")

    tokens = {
        name: [strip(row, config.pad_token_id) for out in outputs[name] for row in out] for name in ("ours", "marian")
    }
    texts = {
        name: tokenizer.batch_decode([[t for t in row] for row in tokens[name]], skip_special_tokens=True)
        for name in tokens
    }
    texts["ours_translate"] = outputs["ours_translate"]
    same = [a == b for a, b in zip(tokens["ours"], tokens["marian"], strict=True)]
    same_text = [a == b for a, b in zip(texts["ours_translate"], texts["marian"], strict=True)]
    first_difference = None
    if not all(same):
        i = same.index(False)
        first_difference = {"sentence": i, "ours": tokens["ours"][i], "marian": tokens["marian"][i]}
    generated = {name: sum(len(row) for row in tokens[name]) for name in tokens}
    generated["ours_translate"] = generated["ours"] if all(same_text) else None
    result = {
        "num_beams": num_beams,
        "sentences": len(sources),
        "batch_size": args.gen_batch_size,
        "settings": gen_config.to_diff_dict(),
        "identical_sentences": sum(same),
        "identical_fraction": sum(same) / len(same),
        "first_difference": first_difference,
        "translate_identical_texts": sum(same_text),
        "ours_translate_batching": f"hf_vaswani_training.serving.decoding.translate_texts: length-sorted, {args.gen_batch_size} sentences a batch",
    }
    for name, timing in timings.items():
        s = timing["seconds"]
        count = generated[name] if generated[name] is not None else generated["ours"]
        result[name] = {
            **timing,
            "generated_tokens": count,
            "mean_length": count / len(sources),
            "sentences_per_s": len(sources) / s,
            "generated_tokens_per_s": count / s,
            "cpu_sentences_per_s": len(sources) / timing["cpu_seconds"],
            "flops": flops[name],
            "flop_per_s": flops[name] / s,
            # generate() keeps computing rows that have finished until the whole batch has: the share of decoder
            # rows that produced an output token (greedy; beam search keeps num_beams rows per sentence).
            "decoder_row_steps": row_steps[name],
            "generated_per_row_step": count / row_steps[name],
        }
    return result
