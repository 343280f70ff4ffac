"""Batched translation with a trained model: sentences in, detokenized sentences out, in input order."""

import logging
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


def _length_sorted_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int) -> list[list[int]]:
    """Indices grouped by similar length so a batch pads little; each batch holds <= max_tokens padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches, batch, longest = [], [], 0
    for index in order:
        longest_if_added = max(longest, lengths[index])
        if batch and (longest_if_added * (len(batch) + 1) > max_tokens or len(batch) >= max_sentences):
            batches.append(batch)
            batch, longest_if_added = [], lengths[index]
        batch.append(index)
        longest = longest_if_added
    if batch:
        batches.append(batch)
    return batches


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    max_tokens: int = 6000,
    max_sentences: int = 256,
    max_source_length: int | None = None,
    progress: bool = False,
    **generate_kwargs,
) -> list[str] | list[list[str]]:
    """Translate `sentences` with `model.generate()` (its generation config unless overridden by kwargs).

    Sentences are encoded once, sorted by length into batches of at most `max_tokens` source tokens (beam search
    multiplies the work by the beam size), and the outputs are put back in input order. With
    `num_return_sequences=n > 1` each sentence gets a list of its n outputs, best first.
    """
    num_return_sequences = generate_kwargs.get("num_return_sequences") or 1
    if not sentences:
        return []
    model.eval()
    device = next(model.parameters()).device
    encoded = tokenizer(list(sentences), truncation=max_source_length is not None, max_length=max_source_length)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    batches = _length_sorted_batches(lengths, max_tokens, max_sentences)
    outputs: list = [None] * len(sentences)
    for batch in tqdm(batches, desc="Translating", disable=not progress, unit="batch"):
        features = [
            {"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i]} for i in batch
        ]
        inputs = tokenizer.pad(features, return_tensors="pt").to(device)
        generated = model.generate(**inputs, **generate_kwargs)
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        # generate() returns each source's n sequences as consecutive rows
        for position, index in enumerate(batch):
            group = texts[position * num_return_sequences : (position + 1) * num_return_sequences]
            outputs[index] = group if num_return_sequences > 1 else group[0]
    return outputs
