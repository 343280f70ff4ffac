"""The attention explorer's drawing: heatmaps, one token's alignment and the §3.5 position encodings as HTML holding
SVG, with no plotting library and nothing fetched from the network.

Every axis label is a text element and every cell a rect that carries its value (`data-value`), so a page is readable
by a screen reader and by tests; every token, title and label is escaped (a token is text, never markup). A big matrix
(past 6000 cells, or when asked) is one PNG inside the SVG instead of a rect per cell. explore.py puts these on a page.
"""

from __future__ import annotations

import base64
import html
import io
import math

import numpy as np

ATTENTION_KINDS = ("encoder-decoder attention", "encoder self-attention", "decoder masked self-attention")


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
        raise ValueError(f"unknown attention kind {kind!r}: one of {', '.join(ATTENTION_KINDS)}")
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
