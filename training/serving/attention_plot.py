"""Encoder-decoder ("cross") attention of a translation, as numbers and as a heatmap.

    weights, source_tokens, target_tokens = cross_attention(model, tokenizer, "A mouse sits .")
    plot_attention(weights, source_tokens, target_tokens, "attention.png", layer=-1, head=None)

`cross_attention` translates the sentence (or takes a given target), then runs one teacher-forced forward pass over
that target with `output_attentions=True` and eager attention (§3.2.3: queries from the decoder, keys and values
from the encoder output). Row i of a weight matrix is the decoder step that produced target token i, so each row
is a distribution over the source tokens and sums to 1. Plotting uses matplotlib's object API (`Figure`, no
`pyplot`), so it needs no display and never changes matplotlib's global backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

# Metaspace tokenizers (this project's, SentencePiece's) mark "a space was here" with U+2581. The plot shows it as
# a middle dot before a word, which cannot be mistaken for an underscore in the text, and a piece that is only a
# space (as before the "." of "sits .") as an open box, which cannot be mistaken for punctuation.
WORD_START_MARK = "\u2581"
DISPLAY_WORD_START_MARK = "\u00b7"
DISPLAY_SPACE = "\u2423"


def label_ids(target_ids, decoder_start_token_id: int | None, eos_token_id: int | None, pad_token_id: int | None):
    """The target as label ids: a leading decoder start token (from generate()) and anything after EOS removed."""
    ids = [int(i) for i in (target_ids.tolist() if isinstance(target_ids, torch.Tensor) else target_ids)]
    ids = [i for i in ids if i != -100]
    if ids and decoder_start_token_id is not None and ids[0] == decoder_start_token_id:
        ids = ids[1:]
    if eos_token_id is not None and eos_token_id in ids:
        ids = ids[: ids.index(eos_token_id) + 1]
    elif pad_token_id is not None:
        while ids and ids[-1] == pad_token_id:
            ids.pop()
    if not ids:
        raise ValueError("cross_attention: the target is empty (no token besides the decoder start token)")
    return ids


@torch.no_grad()
def cross_attention(
    model,
    tokenizer,
    source: str,
    target_ids: Sequence[int] | torch.Tensor | None = None,
    *,
    max_source_length: int | None = None,
    **generate_kwargs,
) -> tuple[torch.Tensor, list[str], list[str]]:
    """The encoder-decoder attention weights of every decoder layer and head for one sentence pair.

    Args:
        model: a seq2seq model (`VaswaniForConditionalGeneration` or any `AutoModelForSeq2SeqLM` that returns
            `cross_attentions`). It is switched to eager attention for the forward pass and switched back after.
        tokenizer: the model's tokenizer.
        source: the source sentence.
        target_ids: the target token ids, as `tokenizer(text_target=...)` gives them (ending with EOS) or as a row
            of `generate()` output (its leading decoder start token and trailing padding are dropped). None:
            translate `source` with `model.generate(**generate_kwargs)` (the model's generation config, by
            default the paper's beam search) and use the best output.
        max_source_length: truncate the source to this many tokens, as `training.serving.decoding.translate_texts` does.

    Returns:
        weights: float32 tensor (decoder layers, heads, target length, source length) on the CPU; row t of a
            (layer, head) matrix is the attention of the decoder step that produced target token t.
        source_tokens, target_tokens: the tokenizer's token strings for the columns and rows.
    """
    model.eval()
    device = next(model.parameters()).device
    inputs = tokenizer(
        source, return_tensors="pt", truncation=max_source_length is not None, max_length=max_source_length
    ).to(device)
    if target_ids is None:
        generate_kwargs["num_return_sequences"] = 1
        target_ids = model.generate(**inputs, **generate_kwargs)[0]
    config = model.config
    labels = label_ids(target_ids, config.decoder_start_token_id, config.eos_token_id, config.pad_token_id)

    # Only the eager implementation materialises the attention matrices; sdpa and flash never form them.
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        # Teacher forcing: the model shifts the labels right behind the decoder start token.
        outputs = model(**inputs, labels=torch.tensor([labels], device=device), output_attentions=True)
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)
    if not outputs.cross_attentions:
        raise ValueError(f"{type(model).__name__} returned no cross_attentions with output_attentions=True")
    weights = torch.stack([layer_weights[0] for layer_weights in outputs.cross_attentions])  # (L, nh, T_tgt, T_src)
    source_tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    target_tokens = tokenizer.convert_ids_to_tokens(labels)
    return weights.float().cpu(), source_tokens, target_tokens


def check_layer_and_head(
    num_layers: int, num_heads: int, layer: int, head: int | str | None
) -> tuple[int, int | str | None]:
    """`layer` and `head` as non-negative indices (Python's negative indexing allowed); ValueError naming the
    valid range otherwise. `head` may also be None (the mean over heads) or "all" (one panel per head)."""
    if isinstance(layer, bool) or not isinstance(layer, int) or not -num_layers <= layer < num_layers:
        raise ValueError(
            f"layer={layer!r} is out of range: the decoder has {num_layers} layers, so layer must be an integer in "
            f"0..{num_layers - 1} (or -{num_layers}..-1, counting back from the last)"
        )
    if head is None or head == "all":
        return layer % num_layers, head
    if isinstance(head, bool) or not isinstance(head, int) or not -num_heads <= head < num_heads:
        raise ValueError(
            f"head={head!r} is out of range: each layer has {num_heads} heads, so head must be an integer in "
            f"0..{num_heads - 1} (or -{num_heads}..-1), None ('mean' on the command line) for the mean over heads, or 'all'"
        )
    return layer % num_layers, head % num_heads


def display_tokens(tokens: Sequence[str]) -> list[str]:
    """Token strings for axis labels: the Metaspace word-start mark as a middle dot ("▁dog" -> "·dog"), a lone
    space piece as an open box ("▁" -> "␣")."""
    return [
        DISPLAY_SPACE if token == WORD_START_MARK else token.replace(WORD_START_MARK, DISPLAY_WORD_START_MARK)
        for token in tokens
    ]


def _heatmap(ax, matrix: np.ndarray, source_labels: list[str], target_labels: list[str], vmax: float, fontsize: float):
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(source_labels)), source_labels, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(target_labels)), target_labels, fontsize=fontsize)
    ax.tick_params(length=0)
    ax.set_xlabel("source tokens", fontsize=fontsize + 1)
    ax.set_ylabel("target tokens", fontsize=fontsize + 1)
    return image


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    layer: int = -1,
    head: int | str | None = None,
    *,
    dpi: int = 150,
) -> Path:
    """Draw the cross-attention of one decoder layer as a heatmap and save it (format from the file suffix).

    Args:
        weights: (layers, heads, target length, source length), as `cross_attention` returns.
        source_tokens, target_tokens: column and row labels.
        path: the image file to write.
        layer: the decoder layer, 0-based; negative counts from the last (default: the last layer).
        head: a head index, None for the mean over the layer's heads (default), or "all" for a grid with one
            panel per head.
    Returns:
        the path written.
    """
    from matplotlib.figure import Figure  # optional dependency: pip install "hf-vaswani[plot]"

    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 4 or weights.shape[2:] != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not match (layers, heads, {len(target_tokens)} target "
            f"tokens, {len(source_tokens)} source tokens)"
        )
    num_layers, num_heads, target_length, source_length = weights.shape
    layer, head = check_layer_and_head(num_layers, num_heads, layer, head)
    source_labels, target_labels = display_tokens(source_tokens), display_tokens(target_tokens)
    where = f"decoder layer {layer} (of 0-{num_layers - 1})"

    # About a third of an inch per token, so labels of 8-point text do not overlap.
    panel_width = max(3.0, 0.3 * source_length + 1.6)
    panel_height = max(2.5, 0.3 * target_length + 1.4)
    fontsize = 8
    if head == "all":
        columns = math.ceil(math.sqrt(num_heads))
        rows = math.ceil(num_heads / columns)
        figure = Figure(figsize=(panel_width * columns + 1.0, panel_height * rows + 0.6), layout="constrained")
        axes = figure.subplots(rows, columns, squeeze=False)
        vmax = float(weights[layer].max())  # one colour scale for all heads, so panels compare
        for index, ax in enumerate(axes.flat):
            if index >= num_heads:
                ax.set_axis_off()
                continue
            image = _heatmap(ax, weights[layer, index], source_labels, target_labels, vmax, fontsize)
            ax.set_title(f"head {index}", fontsize=fontsize + 2)
        figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
        figure.suptitle(f"Encoder-decoder attention, {where}, all {num_heads} heads")
    else:
        matrix = weights[layer].mean(axis=0) if head is None else weights[layer, head]
        which = f"mean of {num_heads} heads" if head is None else f"head {head} (of 0-{num_heads - 1})"
        figure = Figure(figsize=(panel_width + 1.2, panel_height + 0.5), layout="constrained")
        ax = figure.subplots()
        image = _heatmap(ax, matrix, source_labels, target_labels, float(matrix.max()), fontsize)
        figure.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
        ax.set_title(f"Encoder-decoder attention\n{where}, {which}", fontsize=fontsize + 2)

    path = Path(path)
    figure.savefig(path, dpi=dpi)
    return path


__all__ = ["check_layer_and_head", "cross_attention", "display_tokens", "plot_attention"]
