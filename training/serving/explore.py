"""Attention explorer: a web page (Gradio) that translates a sentence and shows what the model attends to.

    vaswani-explore outputs/toy                      # http://127.0.0.1:7860
    vaswani-explore your-name/vaswani-toy --port 8000 --share
    python -m training.explore outputs/toy           # the same, from a checkout

Three tabs:

- Translate: a sentence in, the translation out, with beam size, greedy search, the n best hypotheses with their
  scores, and the GNMT length penalty of §6.1 on or off (defaults from the model's generation config).
- Look: the encoder self-attention, the decoder's masked self-attention and the encoder-decoder attention of the
  translation just made, by layer and head (or the mean over heads), as heatmaps with the subword tokens on the
  axes; choosing an output token shows its alignment to the source. The weights come from one teacher-forced pass
  over the best hypothesis with eager attention (`training.attention_plot.cross_attention` for the
  encoder-decoder attention).
- Position encoding: the sinusoids of §3.5 (`hf_vaswani.sinusoidal_position_encoding`) as a matrix, and the cosine
  similarity of every pair of positions.

Heatmaps are drawn as SVG by this module (no plotting library, nothing fetched from the network): every axis label is
a text element, every cell a rect that carries its value, so the page is readable by a screen reader and by tests.
`build_app` is what a Hugging Face Space runs (see `app.py` at the repository root).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import logging
import math
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..usage import UsageError, check_model_dir, looks_like_local_path

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

INSTALL_HINT = 'the attention explorer needs gradio: pip install "hf-vaswani[explore]"'
DEFAULT_SENTENCE = "A little girl climbs into a wooden playhouse ."
ATTENTION_KINDS = ("encoder-decoder attention", "encoder self-attention", "decoder masked self-attention")
MAX_BEAMS = 8


class ExplorerError(ValueError):
    """A user error, shown as one line in the page or on the command line."""


# ---- the model ------------------------------------------------------------------------------------------------------


def model_problem(source: str) -> str | None:
    """Why `source` cannot be a model folder, in one line; None if it may be one (a local folder that has the files
    of a saved seq2seq model, or a Hub repository id, which is only checked by loading it). Needs no torch."""
    source = source.strip()
    if not source:
        return "no model given: type a model folder (e.g. outputs/toy) or a Hub repository id"
    path = Path(source).expanduser()
    if not path.exists() and not looks_like_local_path(source):
        return None  # maybe a Hub repository id
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else None
    except (OSError, ValueError):
        config = None  # check_model_dir names the problem
    if isinstance(config, dict) and not config.get("is_encoder_decoder", config.get("model_type") == "vaswani"):
        return f"{config_file}: model_type {config.get('model_type', 'unknown')!r} is not an encoder-decoder model"
    try:
        check_model_dir(source, "model", hub_allowed=False, needs_tokenizer=True)
    except UsageError as error:
        return str(error)
    return None


@dataclass
class Explorer:
    """A loaded model and tokenizer, with what the page needs to know about them."""

    source: str
    model: Any
    tokenizer: Any
    max_source_tokens: int
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def config(self):
        return self.model.config

    def describe(self) -> str:
        config, generation = self.model.config, self.model.generation_config
        penalty = getattr(generation, "length_penalty_type", None)
        decoding = f"beam {generation.num_beams or 1}" if (generation.num_beams or 1) > 1 else "greedy"
        if (generation.num_beams or 1) > 1:
            decoding += f", {'GNMT' if penalty == 'gnmt' else 'HF'} length penalty α={generation.length_penalty}"
        parameters = sum(p.numel() for p in self.model.parameters())
        return (
            f"**Model** `{self.source}` · {config.encoder_layers} encoder / {config.decoder_layers} decoder layers · "
            f"{config.encoder_attention_heads} heads · d_model {config.d_model} · vocabulary {config.vocab_size} · "
            f"{parameters / 1e6:.2f}M parameters · sources up to {self.max_source_tokens} tokens · "
            f"default decoding: {decoding}"
        )


# The models loaded in this process, most recently used last; a page open to anyone (a Space) can name any number
# of folders or Hub ids, so only the last few stay in memory.
_EXPLORERS: OrderedDict[str, Explorer] = OrderedDict()
_MAX_LOADED_MODELS = 2
_LOAD_LOCK = threading.Lock()


def load_explorer(source: str) -> Explorer:
    """Load (once per process) the model and tokenizer of a folder or Hub id; ExplorerError with one line if not."""
    source = source.strip()
    problem = model_problem(source)
    if problem is not None:
        raise ExplorerError(problem)
    with _LOAD_LOCK:
        if source in _EXPLORERS:
            _EXPLORERS.move_to_end(source)
            return _EXPLORERS[source]
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        import hf_vaswani  # noqa: F401  (registers the Auto classes)

        transformers.utils.logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForSeq2SeqLM.from_pretrained(source).eval()
        except Exception as error:  # OSError, ValueError, hub errors: all reach the user as one line
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ExplorerError(f"cannot load {source} as a translation model: {first_line}") from None
        limits = [getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length]
        # Tokenizers without a limit report a huge sentinel (int(1e30)); the positions the model trained on are the
        # real bound (§3.5: the formula extrapolates, the trained weights need not).
        max_source_tokens = min(int(limit) for limit in limits if limit and limit < 1_000_000)
        explorer = Explorer(source, model, tokenizer, max_source_tokens)
        _EXPLORERS[source] = explorer
        while len(_EXPLORERS) > _MAX_LOADED_MODELS:
            _EXPLORERS.popitem(last=False)
        logger.info("Loaded %s", source)
        return explorer


# ---- translating and reading the attention ------------------------------------------------------------------------


@dataclass
class Translation:
    """The outcome of one Translate press: the n best hypotheses, and the attention of the best one."""

    source_tokens: list[str]
    target_tokens: list[str]  # the tokens the decoder produced, one per decoder step (ends with EOS)
    decoder_input_tokens: list[str]  # decoder start token + target_tokens[:-1] (teacher forcing)
    encoder: np.ndarray  # (encoder layers, heads, source, source)
    decoder: np.ndarray  # (decoder layers, heads, target, target), causal
    cross: np.ndarray  # (decoder layers, heads, target, source)
    hypotheses: list[dict]  # rank, text, score, log_prob, tokens; best first
    notices: list[str]

    @property
    def text(self) -> str:
        return self.hypotheses[0]["text"]

    def as_state(self) -> dict:
        return self.__dict__.copy()


def generation_options(num_beams: int, greedy: bool, n_best: int, gnmt: bool, alpha: float) -> tuple[dict, list[str]]:
    """generate() keyword arguments for the page's decoding controls, and notes on what was adjusted."""
    notices = []
    num_beams = 1 if greedy else max(1, min(int(num_beams), MAX_BEAMS))
    n_best = max(1, int(n_best))
    if n_best > num_beams:
        notices.append(
            f"{n_best} best hypotheses need at least {n_best} beams; "
            f"{'greedy search gives one' if num_beams == 1 else f'beam size {num_beams} gives {num_beams}'}."
        )
        n_best = num_beams
    kwargs: dict[str, Any] = {"num_beams": num_beams, "num_return_sequences": n_best}
    if num_beams > 1:
        if gnmt:
            # lp(Y) = ((5 + |Y|) / 6) ** alpha (§6.1, after Wu et al. 2016)
            kwargs.update(length_penalty_type="gnmt", length_penalty=float(alpha))
        else:
            # No length penalty: hypotheses ranked by log P alone (Hugging Face's formula with exponent 0).
            kwargs.update(length_penalty_type=None, length_penalty=0.0)
    return kwargs, notices


class _EagerAttention:
    """Eager attention for a block: only it materialises the attention matrices (sdpa and flash never form them)."""

    def __init__(self, model):
        self.model = model
        self.previous = model.config._attn_implementation

    def __enter__(self):
        if self.previous != "eager":
            self.model.set_attn_implementation("eager")

    def __exit__(self, *exc_info):
        if self.previous != "eager":
            self.model.set_attn_implementation(self.previous)


def translate_sentence(
    explorer: Explorer,
    sentence: str,
    num_beams: int = 4,
    greedy: bool = False,
    n_best: int = 1,
    gnmt: bool = True,
    alpha: float = 0.6,
) -> Translation:
    """Translate one sentence as the page does and read the attention of the best hypothesis.

    ExplorerError for an empty sentence. A sentence longer than the model takes is truncated to
    `explorer.max_source_tokens` tokens and a notice says so.
    """
    import torch

    from .attention_plot import cross_attention, label_ids

    sentence = sentence.strip()
    if not sentence:
        raise ExplorerError("Type a sentence to translate (the box is empty).")
    model, tokenizer = explorer.model, explorer.tokenizer
    kwargs, notices = generation_options(num_beams, greedy, n_best, gnmt, alpha)
    limit = explorer.max_source_tokens
    full_length = len(tokenizer(sentence, verbose=False)["input_ids"])
    if full_length > limit:
        notices.append(
            f"The sentence is {full_length} tokens long; the model takes {limit}, so it was cut to its first "
            f"{limit} tokens (the translation and the heatmaps are of the cut sentence)."
        )
    device = next(model.parameters()).device
    with explorer.lock, torch.no_grad():
        inputs = tokenizer(sentence, return_tensors="pt", truncation=True, max_length=limit).to(device)
        output = model.generate(**inputs, **kwargs, return_dict_in_generate=True, output_scores=True)
        sequences = output.sequences
        config = model.config
        labels = [label_ids(row, config.decoder_start_token_id, config.eos_token_id, config.pad_token_id)
                  for row in sequences]  # fmt: skip
        log_probs = _sequence_log_probs(model, inputs, labels)
        beam_scores = getattr(output, "sequences_scores", None)
        texts = tokenizer.batch_decode(sequences, skip_special_tokens=True)
        hypotheses = [
            {
                "rank": rank + 1,
                "text": texts[rank],
                # beam search ranks by its own score (log P / length penalty); greedy search by nothing but log P
                "score": float(beam_scores[rank]) if beam_scores is not None else log_probs[rank],
                "log_prob": log_probs[rank],
                "tokens": len(labels[rank]),
            }
            for rank in range(len(texts))
        ]

        cross, source_tokens, target_tokens = cross_attention(
            model, tokenizer, sentence, target_ids=labels[0], max_source_length=limit
        )
        with _EagerAttention(model):
            outputs = model(**inputs, labels=torch.tensor([labels[0]], device=device), output_attentions=True)
    encoder = torch.stack([weights[0] for weights in outputs.encoder_attentions]).float().cpu().numpy()
    decoder = torch.stack([weights[0] for weights in outputs.decoder_attentions]).float().cpu().numpy()
    start = [config.decoder_start_token_id] + labels[0][:-1]
    return Translation(
        source_tokens=source_tokens,
        target_tokens=target_tokens,
        decoder_input_tokens=tokenizer.convert_ids_to_tokens(start),
        encoder=encoder,
        decoder=decoder,
        cross=cross.numpy(),
        hypotheses=hypotheses,
        notices=notices,
    )


def _sequence_log_probs(model, inputs, labels: list[list[int]]) -> list[float]:
    """log P(Y | X) of each hypothesis, summed over its tokens, from one teacher-forced pass (greedy search has no
    sequence score of its own, and beam scores are divided by the length penalty)."""
    import torch

    width = max(len(row) for row in labels)
    padded = torch.full((len(labels), width), -100, dtype=torch.long)
    for index, row in enumerate(labels):
        padded[index, : len(row)] = torch.tensor(row)
    padded = padded.to(inputs["input_ids"].device)
    repeat = len(labels)
    logits = model(
        input_ids=inputs["input_ids"].expand(repeat, -1),
        attention_mask=inputs["attention_mask"].expand(repeat, -1),
        labels=padded,
    ).logits.float()
    token_log_probs = logits.log_softmax(-1).gather(-1, padded.clamp(min=0)[..., None])[..., 0]
    return [float(value) for value in (token_log_probs * (padded != -100)).sum(-1)]


def attention_matrix(state: dict, kind: str, layer: int, head: int | None) -> tuple[np.ndarray, list[str], list[str]]:
    """The (rows, columns) matrix of one attention kind, layer and head (None: mean over heads), with row and
    column tokens."""
    if kind == "encoder self-attention":
        weights, rows, columns = state["encoder"], state["source_tokens"], state["source_tokens"]
    elif kind == "decoder masked self-attention":
        weights, rows, columns = state["decoder"], state["target_tokens"], state["decoder_input_tokens"]
    elif kind == "encoder-decoder attention":
        weights, rows, columns = state["cross"], state["target_tokens"], state["source_tokens"]
    else:
        raise ExplorerError(f"unknown attention kind {kind!r}: one of {', '.join(ATTENTION_KINDS)}")
    layer = min(max(int(layer), 0), weights.shape[0] - 1)
    matrix = weights[layer].mean(axis=0) if head is None else weights[layer, min(int(head), weights.shape[1] - 1)]
    return np.asarray(matrix, dtype=np.float32), list(rows), list(columns)


# ---- drawing --------------------------------------------------------------------------------------------------------

# Colour maps as a few anchor colours, interpolated linearly: viridis (perceptually uniform, readable in grey) for
# weights in [0, max], a blue-white-red map for the signed sinusoids and similarities.
_VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]
_DIVERGING = ["#3b4cc0", "#7b9ff9", "#c0d4f5", "#f2f2f2", "#f5c4ac", "#e7745b", "#b40426"]
_CHAR_WIDTH = 7.2  # px per character of 12 px sans-serif text, for margins
_FONT = "font-family:ui-sans-serif,system-ui,'DejaVu Sans',sans-serif"


def _palette(anchors: list[str]) -> np.ndarray:
    rgb = np.array([[int(a[i : i + 2], 16) for i in (1, 3, 5)] for a in anchors], dtype=np.float32)
    positions = np.linspace(0.0, 1.0, len(anchors))
    grid = np.linspace(0.0, 1.0, 256)
    return np.stack([np.interp(grid, positions, rgb[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


_PALETTES = {"viridis": _palette(_VIRIDIS), "diverging": _palette(_DIVERGING)}


def _colours(values: np.ndarray, vmin: float, vmax: float, palette: str) -> np.ndarray:
    scale = (values - vmin) / (vmax - vmin) if vmax > vmin else np.zeros_like(values)
    return _PALETTES[palette][np.clip((scale * 255).round(), 0, 255).astype(np.int64)]


def _hex(rgb) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgb))


def _png_data_uri(rgb: np.ndarray) -> str:
    from PIL import Image  # a dependency of gradio

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb), mode="RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def heatmap_svg(
    matrix: np.ndarray,
    row_labels: list[str],
    column_labels: list[str],
    *,
    title: str,
    x_title: str,
    y_title: str,
    palette: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    masked: np.ndarray | None = None,
    highlight_row: int | None = None,
    element_id: str = "heatmap",
    raster: bool | None = None,
) -> str:
    """A heatmap as an HTML fragment holding one SVG: a cell per matrix entry (a <rect> with its value in
    `data-value` and a tooltip) or, past 6000 cells or when `raster` is True, one image; row labels on the left, column labels below,
    read bottom-up; a colour bar. `masked` cells (True) are drawn hatched grey: positions the model may not see."""
    matrix = np.asarray(matrix, dtype=np.float32)
    rows, columns = matrix.shape
    if (len(row_labels), len(column_labels)) != (rows, columns):
        raise ValueError(f"labels ({len(row_labels)}, {len(column_labels)}) do not match the matrix {matrix.shape}")
    vmin = float(matrix.min()) if vmin is None else vmin
    vmax = float(matrix.max()) if vmax is None else vmax
    raster = rows * columns > 6000 if raster is None else raster
    if raster:  # about 640 x 400 px whatever the shape; each cell at least one pixel
        cell_width, cell_height = min(24.0, max(640.0 / columns, 1.0)), min(24.0, max(400.0 / rows, 1.0))
    else:  # square cells big enough for a 12 px label beside each
        largest = max(rows, columns)
        cell_width = cell_height = 24.0 if largest <= 24 else 18.0 if largest <= 60 else 14.0
    # Label every row/column when cells are tall enough for text; otherwise every k-th (numeric axes).
    step_rows = max(1, math.ceil(14 / cell_height))
    step_columns = max(1, math.ceil(14 / cell_width))
    left = 16 + 22 + max((len(label) for label in row_labels[::step_rows]), default=1) * _CHAR_WIDTH
    below = 10 + max((len(label) for label in column_labels[::step_columns]), default=1) * _CHAR_WIDTH + 24
    top, colour_bar = 8.0, 70.0
    width, height = left + columns * cell_width + colour_bar, top + rows * cell_height + below
    font = 12
    parts = [
        f'<div class="vx-heatmap" id="{element_id}" style="overflow:auto;max-width:100%;max-height:80vh;{_FONT}">',
        f'<div class="vx-title" style="font-size:14px;font-weight:600;color:#222;margin:2px 0 0 {left:.0f}px">'
        f"{html.escape(title)}</div>",
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" role="img" '
        f'aria-label="{html.escape(title)}" data-rows="{rows}" data-columns="{columns}" style="{_FONT}">',
        '<defs><pattern id="vx-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eeeeee"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#c8c8c8" stroke-width="2"/></pattern></defs>',
    ]
    colours = _colours(matrix, vmin, vmax, palette)
    if raster:
        parts.append(
            f'<image class="vx-raster" x="{left}" y="{top}" width="{columns * cell_width:.1f}" height="{rows * cell_height:.1f}" '
            f'preserveAspectRatio="none" style="image-rendering:pixelated" href="{_png_data_uri(colours)}"/>'
        )
    else:
        for i in range(rows):
            for j in range(columns):
                x, y = left + j * cell_width, top + i * cell_height
                if masked is not None and masked[i, j]:
                    tip = f"{row_labels[i]} → {column_labels[j]}: masked (a later position)"
                    parts.append(
                        f'<rect class="vx-masked" x="{x:.1f}" y="{y:.1f}" width="{cell_width:.1f}" height="{cell_height:.1f}" '
                        f'fill="url(#vx-hatch)"><title>{html.escape(tip)}</title></rect>'
                    )
                    continue
                value = float(matrix[i, j])
                tip = f"{row_labels[i]} → {column_labels[j]}: {value:.3f}"
                parts.append(
                    f'<rect class="vx-cell" x="{x:.1f}" y="{y:.1f}" width="{cell_width:.1f}" height="{cell_height:.1f}" '
                    f'fill="{_hex(colours[i, j])}" data-value="{value:.4f}"><title>{html.escape(tip)}</title></rect>'
                )
    if highlight_row is not None and 0 <= highlight_row < rows:
        parts.append(
            f'<rect class="vx-highlight" x="{left - 1}" y="{top + highlight_row * cell_height - 1:.1f}" '
            f'width="{columns * cell_width + 2:.1f}" height="{cell_height + 2:.1f}" fill="none" stroke="#ff2d55" stroke-width="2.5"/>'
        )
    for i in range(0, rows, step_rows):
        weight = ' font-weight="700" fill="#c0002a"' if i == highlight_row else ' fill="#222"'
        parts.append(
            f'<text class="vx-row-label" x="{left - 6}" y="{top + (i + 0.5) * cell_height:.1f}" font-size="{font}" '
            f'text-anchor="end" dominant-baseline="central"{weight}>{html.escape(row_labels[i])}</text>'
        )
    label_top = top + rows * cell_height + 6
    for j in range(0, columns, step_columns):
        x = left + (j + 0.5) * cell_width
        parts.append(
            f'<text class="vx-column-label" x="{x:.1f}" y="{label_top:.1f}" font-size="{font}" fill="#222" '
            f'text-anchor="end" dominant-baseline="central" transform="rotate(-90 {x:.1f} {label_top:.1f})">'
            f"{html.escape(column_labels[j])}</text>"
        )
    parts.append(
        f'<text x="{left + columns * cell_width / 2:.1f}" y="{height - 8:.1f}" font-size="13" text-anchor="middle" '
        f'fill="#444">{html.escape(x_title)}</text>'
    )
    middle = top + rows * cell_height / 2
    parts.append(
        f'<text x="14" y="{middle:.1f}" font-size="13" text-anchor="middle" fill="#444" '
        f'transform="rotate(-90 14 {middle:.1f})">{html.escape(y_title)}</text>'
    )
    # Colour bar: a vertical gradient with its two ends labelled.
    bar_x, bar_height = left + columns * cell_width + 14, max(min(rows * cell_height, 220.0), 60.0)
    stops = "".join(
        f'<stop offset="{k / 8:.3f}" stop-color="{_hex(_PALETTES[palette][round(255 * (1 - k / 8))])}"/>'
        for k in range(9)
    )
    parts.append(
        f'<defs><linearGradient id="vx-bar-{element_id}" x1="0" y1="0" x2="0" y2="1">{stops}</linearGradient></defs>'
        f'<rect x="{bar_x:.1f}" y="{top}" width="12" height="{bar_height:.1f}" fill="url(#vx-bar-{element_id})"/>'
        f'<text x="{bar_x + 16:.1f}" y="{top + 6}" font-size="11" fill="#444">{vmax:.2f}</text>'
        f'<text x="{bar_x + 16:.1f}" y="{top + bar_height:.1f}" font-size="11" fill="#444">{vmin:.2f}</text>'
    )
    parts.append("</svg></div>")
    return "".join(parts)


def alignment_html(weights: np.ndarray, source_labels: list[str], target_label: str, position: int, where: str) -> str:
    """One output token's attention over the source: the sentence with each token shaded by its weight, and bars."""
    weights = np.asarray(weights, dtype=np.float32)
    best = int(weights.argmax())
    colours = _colours(weights, 0.0, float(weights.max()) or 1.0, "viridis")
    chips, bars = [], []
    for j, (label, value) in enumerate(zip(source_labels, weights)):
        text_colour = "#111" if value >= 0.55 * weights.max() else "#fff"
        border = "outline:2px solid #ff2d55;" if j == best else ""
        chips.append(
            f'<span class="vx-chip" data-value="{value:.4f}" title="{value:.3f}" style="background:{_hex(colours[j])};'
            f"color:{text_colour};{border}padding:3px 6px;margin:2px;border-radius:4px;display:inline-block;"
            f'font-size:15px">{html.escape(label)}</span>'
        )
        bars.append(
            f'<span style="text-align:right;white-space:nowrap">{html.escape(label)}</span>'
            f'<span style="align-self:center;background:#eef0f4;height:12px;border-radius:2px">'
            f'<span style="display:block;height:12px;border-radius:2px;background:{_hex(colours[j])};'
            f'width:{100 * value / max(float(weights.max()), 1e-9):.1f}%"></span></span>'
            f'<span style="font-variant-numeric:tabular-nums">{value:.3f}</span>'
        )
    heading = (
        f"Output token {position} <b>{html.escape(target_label)}</b> attends to "
        f"<b>{html.escape(source_labels[best])}</b> most ({where})"
    )
    return (
        f'<div id="alignment" class="vx-alignment" data-target="{html.escape(target_label)}" '
        f'data-position="{position}" style="{_FONT}">'
        f'<p style="margin:4px 0 8px 0">{heading}</p><div style="line-height:2.1">{"".join(chips)}</div>'
        f'<div style="display:grid;grid-template-columns:auto 1fr auto;gap:3px 10px;margin-top:10px;font-size:13px;'
        f'max-width:640px">{"".join(bars)}</div></div>'
    )


def position_encoding_html(num_positions: int, d_model: int) -> str:
    """The §3.5 encodings of positions 0..num_positions-1 as a matrix, and the cosine similarity of position pairs."""
    import torch

    from hf_vaswani import sinusoidal_position_encoding

    encodings = sinusoidal_position_encoding(torch.arange(num_positions), d_model).numpy()  # (positions, d_model)
    unit = encodings / np.linalg.norm(encodings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    positions = [str(p) for p in range(num_positions)]
    dimensions = [str(i) for i in range(d_model)]
    matrix = heatmap_svg(
        encodings,
        positions,
        dimensions,
        title=f"PE(pos, 2i) = sin(pos / 10000^(2i/{d_model})),  PE(pos, 2i+1) = cos(…)",
        x_title="dimension (even: sine, odd: cosine; frequency falls from left to right)",
        y_title="position",
        palette="diverging",
        vmin=-1.0,
        vmax=1.0,
        element_id="pe-matrix",
        raster=True,
    )
    similar = heatmap_svg(
        similarity,
        positions,
        positions,
        title="cosine similarity of the encodings of two positions",
        x_title="position",
        y_title="position",
        vmin=float(similarity.min()),
        vmax=1.0,
        element_id="pe-similarity",
        raster=True,
    )
    return f'<div style="display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start">{matrix}{similar}</div>'


def display(tokens: list[str]) -> list[str]:
    from .attention_plot import display_tokens

    return display_tokens(tokens)


def render_attention(state: dict | None, kind: str, layer: str | int, head: str, token: int | None) -> tuple[str, str]:
    """The heatmap and the alignment of the chosen output token, as HTML; a hint when nothing is translated yet."""
    if not state:
        hint = (
            '<p id="heatmap" class="vx-empty">Translate a sentence first (Translate tab); its attention shows here.</p>'
        )
        return hint, ""
    head_index = None if head in (None, "mean") else int(head)
    matrix, rows, columns = attention_matrix(state, kind, int(layer), head_index)
    layers = {"encoder self-attention": "encoder", "decoder masked self-attention": "decoder"}.get(kind, "decoder")
    count = state["encoder" if layers == "encoder" else "decoder"].shape[1]
    which = "mean over heads" if head_index is None else f"head {head_index} of {count}"
    where = f"{layers} layer {int(layer)}, {which}"
    masked = np.triu(np.ones(matrix.shape, dtype=bool), k=1) if kind == "decoder masked self-attention" else None
    axes = {
        "encoder self-attention": ("key: source token", "query: source token"),
        "decoder masked self-attention": (
            "key: decoder input (start token, then the output so far)",
            "query: output token",
        ),
        "encoder-decoder attention": ("key: source token", "query: output token"),
    }[kind]
    token = None if token is None or kind == "encoder self-attention" else int(token)
    heatmap = heatmap_svg(
        matrix,
        display(rows),
        display(columns),
        title=f"{kind[0].upper()}{kind[1:]}, {where}",
        x_title=axes[0],
        y_title=axes[1],
        vmin=0.0,
        vmax=max(float(matrix.max()), 1e-6),
        masked=masked,
        highlight_row=token,
    )
    alignment = ""
    if token is not None:
        cross, target, source = attention_matrix(state, "encoder-decoder attention", int(layer), head_index)
        token = min(token, len(target) - 1)
        cross_where = (
            f"encoder-decoder attention, decoder layer {min(int(layer), state['cross'].shape[0] - 1)}, {which}"
        )
        alignment = alignment_html(cross[token], display(source), display(target)[token], token, cross_where)
    return heatmap, alignment


# ---- the page -------------------------------------------------------------------------------------------------------

CSS = """
.vx-hidden { display: none !important; }
#notice p { color: #8a4b00; }
#model-status p { margin: 0; }
"""


def _theme():
    import gradio as gr

    # System fonts: the default theme fetches Inter from Google Fonts, which a Space may reach but an offline
    # machine cannot (the page would wait for it).
    fonts = ["ui-sans-serif", "system-ui", "DejaVu Sans", "sans-serif"]
    return gr.themes.Soft(font=fonts, font_mono=["ui-monospace", "DejaVu Sans Mono", "monospace"])


def launch_options() -> dict:
    """Keyword arguments for `Blocks.launch` that belong to the page's look (Gradio 6 takes them at launch)."""
    return {"theme": _theme(), "css": CSS}


def _require_gradio():
    try:
        import gradio as gr
    except ImportError:
        raise ExplorerError(INSTALL_HINT) from None
    return gr


def build_app(model_dir_or_repo: str | None = None) -> gr.Blocks:
    """The explorer page for a model folder or Hub id. A source that does not load shows its error in the page,
    where another folder can be chosen; `main` checks the source before it builds the page."""
    gr = _require_gradio()
    explorer, status = None, ""
    if model_dir_or_repo:
        try:
            explorer = load_explorer(model_dir_or_repo)
        except ExplorerError as error:
            status = f"⚠️ {error}"
    else:
        status = "⚠️ No model loaded: type a model folder or Hub repository id above and press Load."

    def layer_choices(current: Explorer | None, kind: str) -> list[str]:
        if current is None:
            return ["0"]
        count = current.config.encoder_layers if kind == "encoder self-attention" else current.config.decoder_layers
        return [str(i) for i in range(count)]

    def head_choices(current: Explorer | None, kind: str) -> list[str]:
        if current is None:
            return ["mean"]
        config = current.config
        count = config.encoder_attention_heads if kind == "encoder self-attention" else config.decoder_attention_heads
        return ["mean"] + [str(i) for i in range(count)]

    from hf_vaswani import PAPER_DECODING

    generation = explorer.model.generation_config if explorer else None
    default_beams = int(generation.num_beams or 1) if generation else PAPER_DECODING["num_beams"]
    paper_alpha = PAPER_DECODING["length_penalty"]
    default_alpha = float(generation.length_penalty) if generation and generation.length_penalty else paper_alpha
    paper_type = PAPER_DECODING["length_penalty_type"]
    default_gnmt = (getattr(generation, "length_penalty_type", paper_type) if generation else paper_type) == "gnmt"
    d_model = explorer.config.d_model if explorer else 512
    max_positions = explorer.max_source_tokens if explorer else 256
    kind0 = ATTENTION_KINDS[0]
    last_layer = layer_choices(explorer, kind0)[-1]

    with gr.Blocks(title="hf-vaswani attention explorer", analytics_enabled=False) as app:
        model_source = gr.State(explorer.source if explorer else "")
        translation_state = gr.State(None)
        gr.Markdown(
            "# Attention explorer\n"
            "The Transformer of *Attention Is All You Need* (Vaswani et al., 2017): translate a sentence, then look "
            "at what each layer and head attends to."
        )
        with gr.Row():
            source_box = gr.Textbox(
                value=model_dir_or_repo or "",
                label="Model folder or Hub repository id",
                elem_id="model-source",
                scale=4,
            )
            load_button = gr.Button("Load model", elem_id="load-model", scale=1, size="md")
        model_status = gr.Markdown(explorer.describe() if explorer else status, elem_id="model-status")

        with gr.Tabs():
            with gr.Tab("Translate", id="translate"):
                sentence = gr.Textbox(
                    value=DEFAULT_SENTENCE, label="Source sentence", lines=2, elem_id="sentence", autofocus=True
                )
                with gr.Row():
                    beams = gr.Slider(1, MAX_BEAMS, value=default_beams, step=1, label="Beam size", elem_id="beams")
                    n_best = gr.Slider(1, MAX_BEAMS, value=1, step=1, label="n best", elem_id="n-best")
                    greedy = gr.Checkbox(value=default_beams == 1, label="Greedy search", elem_id="greedy")
                    gnmt = gr.Checkbox(value=default_gnmt, label="GNMT length penalty (§6.1)", elem_id="gnmt")
                    alpha = gr.Number(
                        value=default_alpha, label="α", minimum=0.0, maximum=3.0, step=0.1, elem_id="alpha"
                    )
                translate_button = gr.Button("Translate", variant="primary", elem_id="translate-button")
                # How many answers this page got; hidden by CSS. Scripts driving the page wait for it to go up.
                answers = gr.Number(0, precision=0, elem_id="answers", elem_classes=["vx-hidden"], interactive=False)
                notice = gr.Markdown("", elem_id="notice")
                translation = gr.Textbox(
                    label="Translation (best hypothesis)", elem_id="translation", interactive=False
                )
                hypotheses = gr.Dataframe(
                    headers=["rank", "translation", "score", "log P", "tokens"],
                    datatype=["number", "str", "number", "number", "number"],
                    label="n best (score: log P divided by the length penalty for beam search; log P for greedy)",
                    elem_id="hypotheses",
                    interactive=False,
                    wrap=True,
                    column_widths=["8%", "56%", "12%", "12%", "12%"],
                )
            with gr.Tab("Look", id="look"):
                with gr.Row():
                    kind = gr.Radio(list(ATTENTION_KINDS), value=kind0, label="Attention", elem_id="kind", scale=2)
                    layer = gr.Radio(
                        layer_choices(explorer, kind0), value=last_layer, label="Layer", elem_id="layer", scale=1
                    )
                    head = gr.Radio(head_choices(explorer, kind0), value="mean", label="Head", elem_id="head", scale=2)
                token = gr.Dropdown(
                    choices=[], value=None, label="Output token (its source alignment is shown below)",
                    elem_id="output-token", interactive=True,
                )  # fmt: skip
                heatmap = gr.HTML(render_attention(None, kind0, 0, "mean", None)[0], elem_id="heatmap-box")
                alignment = gr.HTML("", elem_id="alignment-box")
            with gr.Tab("Position encoding", id="positions"):
                gr.Markdown(
                    "§3.5: each position gets a fixed vector of sines and cosines whose wavelengths grow "
                    "geometrically from 2π to 10000·2π, added to the token embedding. Nearby positions have similar "
                    "vectors, and PE(pos + k) is a linear function of PE(pos) for any fixed offset k."
                )
                positions = gr.Slider(
                    2, max(max_positions, 2), value=min(64, max(max_positions, 2)), step=1,
                    label="positions shown", elem_id="positions",
                )  # fmt: skip
                position_view = gr.HTML(position_encoding_html(int(positions.value), d_model), elem_id="pe-box")

        # ---- events ----
        def current(source: str) -> Explorer | None:
            return _EXPLORERS.get(source) if source else None

        def on_load(requested: str):
            try:
                loaded = load_explorer(requested)
            except ExplorerError as error:
                return (gr.update(), f"⚠️ {error}", *(gr.update() for _ in range(5)))
            except Exception as error:  # never a traceback in the page; the log has it
                logger.exception("loading %s failed", requested)
                return (gr.update(), f"⚠️ cannot load {requested}: {error}", *(gr.update() for _ in range(5)))
            kind_now = ATTENTION_KINDS[0]
            layers = layer_choices(loaded, kind_now)
            hint = render_attention(None, kind_now, 0, "mean", None)[0]
            return (
                loaded.source,
                loaded.describe(),
                None,
                gr.update(choices=layers, value=layers[-1]),
                gr.update(choices=head_choices(loaded, kind_now), value="mean"),
                hint,
                position_encoding_html(min(64, loaded.max_source_tokens), loaded.config.d_model),
            )

        load_outputs = [model_source, model_status, translation_state, layer, head, heatmap, position_view]
        load_button.click(on_load, inputs=source_box, outputs=load_outputs)
        source_box.submit(on_load, inputs=source_box, outputs=load_outputs)

        def on_translate(count, *values):
            return (int(count or 0) + 1, *translate_view(*values))

        def translate_view(
            source, text, num_beams, use_greedy, nbest, use_gnmt, alpha_value, kind_now, layer_now, head_now
        ):
            loaded = current(source)
            empty = (
                "",
                [],
                None,
                gr.update(choices=[], value=None),
                *render_attention(None, kind_now, 0, "mean", None),
            )
            if loaded is None:
                return ("⚠️ No model is loaded: choose a model folder above and press Load.", *empty)
            started = time.perf_counter()
            try:
                result = translate_sentence(
                    loaded, text or "", num_beams, use_greedy, nbest, use_gnmt, alpha_value if alpha_value else 0.0
                )
            except ExplorerError as error:
                return (f"⚠️ {error}", *empty)
            except Exception as error:
                logger.exception("translating %r failed", text)
                return (f"⚠️ The model failed on this sentence: {error}", *empty)
            state = result.as_state()
            rows = [
                [h["rank"], h["text"], round(h["score"], 4), round(h["log_prob"], 4), h["tokens"]]
                for h in result.hypotheses
            ]
            labels = display(result.target_tokens)
            choices = [(f"{i}: {label}", i) for i, label in enumerate(labels)]
            picked = 0
            html_map, html_alignment = render_attention(state, kind_now, layer_now, head_now, picked)
            seconds = time.perf_counter() - started
            decoding = "greedy search" if use_greedy else f"beam {int(num_beams)}"
            if not use_greedy and int(num_beams) > 1:
                decoding += f", GNMT α={float(alpha_value or 0.0):g}" if use_gnmt else ", no length penalty"
            done = (
                f"Translated in {seconds:.2f} s ({decoding}; {len(result.source_tokens)} source tokens, "
                f"{len(result.target_tokens)} output tokens)."
            )
            return (
                "  \n".join([*(f"⚠️ {n}" for n in result.notices), done]),
                result.text,
                rows,
                state,
                gr.update(choices=choices, value=picked),
                html_map,
                html_alignment,
            )

        translate_inputs = [answers, model_source, sentence, beams, greedy, n_best, gnmt, alpha, kind, layer, head]
        translate_outputs = [answers, notice, translation, hypotheses, translation_state, token, heatmap, alignment]
        translate_button.click(on_translate, inputs=translate_inputs, outputs=translate_outputs)
        sentence.submit(on_translate, inputs=translate_inputs, outputs=translate_outputs)

        def on_view(state, kind_now, layer_now, head_now, token_now):
            try:
                return render_attention(state, kind_now, layer_now, head_now, token_now)
            except Exception as error:
                logger.exception("drawing failed")
                return f"<p id='heatmap'>⚠️ Cannot draw this view: {html.escape(str(error))}</p>", ""

        def on_kind(source, state, kind_now, layer_now, head_now, token_now):
            loaded = current(source)
            layers, heads = layer_choices(loaded, kind_now), head_choices(loaded, kind_now)
            layer_now = layer_now if layer_now in layers else layers[-1]
            head_now = head_now if head_now in heads else "mean"
            return (
                gr.update(choices=layers, value=layer_now),
                gr.update(choices=heads, value=head_now),
                *on_view(state, kind_now, layer_now, head_now, token_now),
            )

        view_inputs = [translation_state, kind, layer, head, token]
        kind.input(on_kind, inputs=[model_source, *view_inputs], outputs=[layer, head, heatmap, alignment])
        for control in (layer, head, token):
            control.input(on_view, inputs=view_inputs, outputs=[heatmap, alignment])

        def on_positions(source, count):
            loaded = current(source)
            return position_encoding_html(int(count), loaded.config.d_model if loaded else d_model)

        positions.release(on_positions, inputs=[model_source, positions], outputs=position_view)
    return app


# ---- command line ---------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaswani-explore",
        description="Open the attention explorer (a local web page) on a trained model.",
    )
    parser.add_argument("model", metavar="MODEL_FOLDER_OR_REPO", help="a folder written by vaswani-train, or a Hub id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: reachable from others)")
    parser.add_argument("--port", type=int, default=None, help="port (default: Gradio's, 7860 or the next free one)")
    parser.add_argument("--share", action="store_true", help="also open a temporary public gradio.live link")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO, stream=sys.stderr)
    try:
        _require_gradio()
        load_explorer(args.model)  # fail here, in one line, rather than in the page
        app = build_app(args.model)
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    app.launch(server_name=args.host, server_port=args.port, share=args.share, **launch_options())
    return 0


__all__ = [
    "ExplorerError",
    "Translation",
    "build_app",
    "heatmap_svg",
    "load_explorer",
    "main",
    "model_problem",
    "position_encoding_html",
    "render_attention",
    "translate_sentence",
]
