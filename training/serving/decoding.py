"""Batched translation with a trained model: sentences in, detokenized sentences out, in input order.

`translate_texts` takes sentences, `translate_ids` token ids (what evaluation during training has). Torch loads when
translating, not on import: vaswani-translate's argument parser and the CTranslate2 translator take the batching
defaults from here before any model is loaded.
"""

import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)

# The one home of the decoding batch defaults (vaswani-translate --max_tokens, vaswani-train --eval_max_tokens,
# CTranslate2Translator): at most this many padded source tokens a batch (beam search multiplies the work by the beam
# size), and at most this many sentences.
DEFAULT_MAX_TOKENS = 6000
DEFAULT_MAX_SENTENCES = 256


def length_sorted_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int) -> list[list[int]]:
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


# A tokenizer saved without a model_max_length reports this sentinel (transformers' VERY_LARGE_INTEGER) or similar.
_NO_LIMIT = 10**9


def source_length_limit(model, tokenizer, max_source_length: int | None) -> tuple[int | None, str]:
    """The longest source, in tokens, and where that limit comes from: `max_source_length` when given, else the
    tokenizer's model_max_length (what training used), else the model's max_position_embeddings."""
    if max_source_length is not None:
        return max_source_length, "--max_source_length"
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if model_max_length is not None and model_max_length < _NO_LIMIT:
        return int(model_max_length), "the tokenizer's model_max_length"
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if positions is not None:
        return int(positions), "the model's max_position_embeddings"
    return None, ""


def _truncate(encoded, limit: int, limit_name: str, special_ids: set[int]) -> None:
    """Cut sources longer than `limit` tokens to `limit`, keeping a final special token (the EOS the model saw at the
    end of every training source), and say how many were cut."""
    cut = 0
    for index, ids in enumerate(encoded["input_ids"]):
        if len(ids) <= limit:
            continue
        cut += 1
        kept = ids[: limit - 1] + ids[-1:] if ids[-1] in special_ids else ids[:limit]
        encoded["input_ids"][index] = kept
        encoded["attention_mask"][index] = encoded["attention_mask"][index][:limit]
    if cut:
        logger.warning(
            "%d of %d sentences are longer than %d tokens (%s) and were truncated to their first %d tokens; only "
            "that part is translated (pass --max_source_length to change the limit)",
            cut,
            len(encoded["input_ids"]),
            limit,
            limit_name,
            limit,
        )


def translate_texts(
    model,
    tokenizer,
    sentences: Sequence[str],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_sentences: int = DEFAULT_MAX_SENTENCES,
    max_source_length: int | None = None,
    progress: bool = False,
    **generate_kwargs,
) -> list[str] | list[list[str]]:
    """Translate `sentences` with `model.generate()` (its generation config unless overridden by kwargs).

    An empty or blank sentence translates to an empty string, in its place (see `translate_ids`).

    Sentences are encoded once, sorted by length into batches of at most `max_tokens` source tokens (beam search
    multiplies the work by the beam size), and the outputs are put back in input order. Sources longer than
    `max_source_length` (default: the tokenizer's model_max_length, else the model's max_position_embeddings) are
    truncated to it, with a warning that counts them. With
    `num_return_sequences=n > 1` each sentence gets a list of its n outputs, best first.
    """
    if not sentences:
        return []
    limit, limit_name = source_length_limit(model, tokenizer, max_source_length)
    # One token more than the limit, so that a sentence cut by the tokenizer is told apart from one that fits.
    encoded = tokenizer(list(sentences), truncation=limit is not None, max_length=None if limit is None else limit + 1)
    if limit is not None:
        _truncate(encoded, limit, limit_name, set(tokenizer.all_special_ids))
    for index, sentence in enumerate(sentences):
        if not sentence.strip():  # a blank line encodes to whitespace pieces; translate_ids gives it an empty line
            encoded["input_ids"][index] = []
    return translate_ids(
        model,
        tokenizer,
        encoded["input_ids"],
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        progress=progress,
        **generate_kwargs,
    )


def translate_ids(
    model,
    tokenizer,
    input_ids: Sequence[Sequence[int]],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_sentences: int = DEFAULT_MAX_SENTENCES,
    progress: bool = False,
    shard: tuple[int, int] = (0, 1),
    **generate_kwargs,
) -> list:
    """What `translate_texts` does once the sources are token ids (EOS included, already truncated): length-sorted
    batches of at most `max_tokens` padded source tokens through `model.generate()`, outputs in input order.

    Evaluation during training calls this on the tokenized validation split, so it decodes exactly as
    `translate_texts` and the final evaluation do. `shard=(rank, world_size)` decodes only batches rank, rank +
    world_size, ... of the one length-sorted list; the other entries of the result are None (the caller gathers).

    An empty source (no ids but padding, BOS and EOS: what an empty or blank line encodes to) is not decoded: its
    translation is the empty string (n of them with `num_return_sequences=n`), on every rank.
    """
    import torch
    from tqdm.auto import tqdm

    from ..console import show_progress_bar

    rank, world_size = shard
    num_return_sequences = generate_kwargs.get("num_return_sequences") or 1
    outputs: list = [None] * len(input_ids)
    if not input_ids:
        return outputs
    model.eval()
    device = next(model.parameters()).device
    lengths = [len(ids) for ids in input_ids]
    # An empty line gives an empty line: generate() would otherwise invent a sentence from the EOS alone.
    nothing = {tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id} - {None}
    sources = []
    for index, ids in enumerate(input_ids):
        if all(token in nothing for token in ids):
            outputs[index] = "" if num_return_sequences == 1 else [""] * num_return_sequences
        else:
            sources.append(index)
    batches = length_sorted_batches([lengths[i] for i in sources], max_tokens, max_sentences)[rank::world_size]
    batches = [[sources[position] for position in batch] for batch in batches]
    # A bar on a terminal only: in a log file its carriage-return updates make one long line.
    for batch in tqdm(batches, desc="Translating", disable=not (progress and show_progress_bar()), unit="batch"):
        features = [{"input_ids": list(input_ids[i]), "attention_mask": [1] * lengths[i]} for i in batch]
        inputs = tokenizer.pad(features, return_tensors="pt").to(device)
        with torch.no_grad():
            generated = model.generate(**inputs, **generate_kwargs)
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        # generate() returns each source's n sequences as consecutive rows
        for position, index in enumerate(batch):
            group = texts[position * num_return_sequences : (position + 1) * num_return_sequences]
            outputs[index] = group if num_return_sequences > 1 else group[0]
    return outputs
