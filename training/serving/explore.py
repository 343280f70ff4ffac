"""Attention explorer: a web page (Gradio) that translates a sentence and shows what the model attends to.

    vaswani-explore outputs/toy                      # http://127.0.0.1:7860
    vaswani-explore your-name/vaswani-toy --port 8000 --share
    python -m training.explore outputs/toy           # the same, from a checkout (training/explore.py)

Three tabs:

- Translate: a sentence in, the translation out, with beam size, greedy search, the n best hypotheses with their
  scores, and the GNMT length penalty of §6.1 on or off (defaults from the model's generation config).
- Look: the encoder self-attention, the decoder's masked self-attention and the encoder-decoder attention of the
  translation just made, by layer and head (or the mean over heads), as heatmaps with the subword tokens on the
  axes; choosing an output token shows its alignment to the source. The weights come from one teacher-forced pass
  over the best hypothesis with eager attention (`training.serving.attention_plot.cross_attention` for the
  encoder-decoder attention).
- Position encoding: the sinusoids of §3.5 (`hf_vaswani.sinusoidal_position_encoding`) as a matrix, and the cosine
  similarity of every pair of positions.

Heatmaps are drawn as SVG by explore_svg.py. `build_app` is what a Hugging Face Space runs (see `app.py` at the
repository root).

A page others can reach is a shared service. The model it serves is pinned: no visitor can push it out of memory.
Loading other models from the page is off unless the operator allows some (`--allow-load`, or VASWANI_ALLOW_LOAD for
app.py), except on a loopback address without --share, where the only visitor is the operator. A refused name is
answered without looking at the disk. Everything a visitor types (paths, sentences, tokens) is shown as text, never
as HTML or Markdown. Sessions keep a translation's attention for a while only (`STATE_SECONDS`, `MAX_SESSIONS`), so
memory stays flat however many visitors come and go (tests/serving/test_explore.py's load test); Gradio's queue keeps
a few events' analytics, not 10,000, and summarises them rarely (`QUEUE_ANALYTICS`).

vaswani-explore computes on the CPUs free to it (training/threads.py) and looks again, every 20 s at most, as
translations are asked for: a page started beside a busy program takes the core back when that program ends. The
libraries keep to warnings unless --verbose.
"""

from __future__ import annotations

import html
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..console import quiet_libraries, setup_logging
from ..threads import ThreadWatch, use_threads
from ..usage import ArgumentParser, UsageError
from .explore_models import (
    SHELF,
    Explorer,
    LoadPolicy,
    ModelShelf,
    example_sentence,
    load_explorer,
    model_problem,
)
from .explore_svg import ATTENTION_KINDS, display, position_encoding_html, render_attention

if TYPE_CHECKING:
    import gradio as gr

logger = logging.getLogger(__name__)

INSTALL_HINT = 'the attention explorer needs gradio: pip install "hf-vaswani[explore]"'
MAX_BEAMS = 8


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
            from hf_vaswani import PAPER_DECODING  # imported when translating (torch is loaded by then)

            paper_alpha = PAPER_DECODING["length_penalty"]
            alpha = float(alpha if alpha is not None else paper_alpha)
            if not np.isfinite(alpha):  # nan or inf would pass into the formula and reorder the beams silently
                notices.append(f"α={alpha:g} is not a number; the paper's {paper_alpha:g} used.")
                alpha = paper_alpha
            kwargs.update(length_penalty_type="gnmt", length_penalty=alpha)
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
    num_beams: int | None = None,
    greedy: bool = False,
    n_best: int = 1,
    gnmt: bool = True,
    alpha: float | None = None,
) -> Translation:
    """Translate one sentence as the page does and read the attention of the best hypothesis. `num_beams` and
    `alpha` left out are the paper's (hf_vaswani.PAPER_DECODING: beam 4, α 0.6).

    UsageError for an empty sentence. A sentence longer than the model takes is truncated to
    `explorer.max_source_tokens` tokens and a notice says so.
    """
    import torch

    from hf_vaswani import PAPER_DECODING

    from .attention_plot import cross_attention, label_ids

    num_beams = PAPER_DECODING["num_beams"] if num_beams is None else num_beams
    sentence = sentence.strip()
    if not sentence:
        raise UsageError("Type a sentence to translate (the box is empty).")
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


# ---- the page -------------------------------------------------------------------------------------------------------

CSS = """
.vx-hidden { display: none !important; }
#notice p { color: #8a4b00; margin: 0; }
#model-status p { margin: 0; }
"""
# A session's translation (its attention arrays) is dropped after this long, and at most this many sessions are kept:
# visitors who leave without closing their tab would otherwise hold memory until the server stops.
STATE_SECONDS = 1800
MAX_SESSIONS = 200
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# Gradio's queue keeps a record of every event (up to GRADIO_ANALYTICS_MAX_EVENTS, 10,000 by default) and, after each
# one, builds a pandas DataFrame over all of them (GRADIO_ANALYTICS_CACHE_FREQUENCY, 1 by default) for a monitoring
# dashboard the explorer does not use: CPU on every request, and memory, growing with the number of requests served.
# A few records, summarised rarely; the queue reads both variables when it is created (in gr.Blocks, and again in
# Blocks.queue), and a user's own setting wins.
QUEUE_ANALYTICS = {"GRADIO_ANALYTICS_MAX_EVENTS": "200", "GRADIO_ANALYTICS_CACHE_FREQUENCY": "1000"}


def text_html(*lines: str) -> str:
    """Lines as HTML paragraphs, escaped: whatever a visitor typed is shown as text, never as markup."""
    return "".join(f"<p>{html.escape(line)}</p>" for line in lines)


def describe(explorer: Explorer, name: str | None = None) -> str:
    """The status line of a loaded model, as HTML (its name escaped): `name`, what the page shows for it, or
    `shown_name(explorer.source)`."""
    config, generation = explorer.config, explorer.model.generation_config
    beams = generation.num_beams or 1
    decoding = "greedy" if beams == 1 else f"beam {beams}"
    if beams > 1:
        penalty = "GNMT" if getattr(generation, "length_penalty_type", None) == "gnmt" else "HF"
        decoding += f", {penalty} length penalty α={generation.length_penalty}"
    parameters = sum(p.numel() for p in explorer.model.parameters())
    details = (
        f" · {config.encoder_layers} encoder / {config.decoder_layers} decoder layers · "
        f"{config.encoder_attention_heads} heads · d_model {config.d_model} · vocabulary {config.vocab_size} · "
        f"{parameters / 1e6:.2f}M parameters · sources up to {explorer.max_source_tokens} tokens · "
        f"default decoding: {decoding}"
    )
    name = name or shown_name(explorer.source)
    return f"<p><b>Model</b> <code>{html.escape(name)}</code>{html.escape(details)}</p>"


def shown_name(source: str) -> str:
    """What the page calls a served model when its starter gave no --name: a Hub id as it is, a local folder by its
    own name only (the server's path is not the visitors' business)."""
    path = Path(source).expanduser()
    return path.resolve().name if path.is_dir() else source


def _theme():
    import gradio as gr

    # System fonts: the default theme fetches Inter from Google Fonts, which a Space may reach but an offline
    # machine cannot (the page would wait for it).
    fonts = ["ui-sans-serif", "system-ui", "DejaVu Sans", "sans-serif"]
    return gr.themes.Soft(font=fonts, font_mono=["ui-monospace", "DejaVu Sans Mono", "monospace"])


def launch_options() -> dict:
    """Keyword arguments for `Blocks.launch`: the page's look (Gradio 6 takes it at launch) and its session limit."""
    return {"theme": _theme(), "css": CSS, "state_session_capacity": MAX_SESSIONS}


def _require_gradio():
    try:
        import gradio as gr
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return gr


def layer_choices(explorer: Explorer | None, kind: str) -> list[str]:
    if explorer is None:
        return ["0"]
    config = explorer.config
    return [str(i) for i in range(config.encoder_layers if kind == "encoder self-attention" else config.decoder_layers)]


def head_choices(explorer: Explorer | None, kind: str) -> list[str]:
    if explorer is None:
        return ["mean"]
    config = explorer.config
    count = config.encoder_attention_heads if kind == "encoder self-attention" else config.decoder_attention_heads
    return ["mean"] + [str(i) for i in range(count)]


@dataclass
class Served:
    """What the events of one page share: the served model's name, who may load what, and the loaded models."""

    source: str
    policy: LoadPolicy
    shelf: ModelShelf
    d_model: int
    name: str = ""  # what the page shows for `source` (--name; default shown_name(source))
    watch: ThreadWatch | None = None  # looked at by each translation: the CPU threads follow the machine's load

    def __post_init__(self):
        self.name = self.name or (shown_name(self.source) if self.source else "")


def build_app(
    model_dir_or_repo: str | None = None,
    *,
    allow_load: LoadPolicy | None = None,
    shelf: ModelShelf | None = None,
    name: str | None = None,
    watch: ThreadWatch | None = None,
) -> gr.Blocks:
    """The explorer page for a model folder or Hub id, which stays loaded (pinned) while the page lives. A source
    that does not load shows its error in the page; `main` checks the source before it builds the page.
    `allow_load`: what visitors may load from the page (default: nothing else). `name`: what the page calls the
    served model (default: a Hub id as it is, a folder by its own name, never its path on the server). `watch`: the
    thread count chosen at start (vaswani-explore's), looked at again as translations are asked for
    (training/threads.py), so a server started beside a busy program takes the core back when that program ends."""
    gr = _require_gradio()
    source = (model_dir_or_repo or "").strip()
    served = Served(source, allow_load or LoadPolicy(), shelf or SHELF, 512, name or "", watch)
    explorer, status = (
        None,
        text_html("⚠️ No model loaded: type a model folder or Hub repository id above and press Load."),
    )
    if served.source:
        try:
            explorer = load_explorer(served.source, pin=True, shelf=served.shelf)
            status, served.d_model = describe(explorer, served.name), explorer.config.d_model
        except UsageError as error:
            status = text_html(f"⚠️ {error}")
    for variable, value in QUEUE_ANALYTICS.items():  # before gr.Blocks creates the queue
        os.environ.setdefault(variable, value)
    with gr.Blocks(title="hf-vaswani attention explorer", analytics_enabled=False) as app:
        controls = _header(gr, explorer, served, status)
        with gr.Tabs():
            controls |= _translate_tab(gr, explorer, example_sentence(served.source) if explorer else "")
            controls |= _look_tab(gr, explorer)
            controls |= _positions_tab(gr, explorer)
        _wire_events(gr, controls, served)
    return app


def _header(gr, explorer: Explorer | None, served: Served, status: str) -> dict:
    gr.Markdown(
        "# Attention explorer\n"
        "The Transformer of *Attention Is All You Need* (Vaswani et al., 2017): translate a sentence, then look "
        "at what each layer and head attends to."
    )
    off = "" if served.policy.anything or served.policy.patterns else " (loading other models is off on this server)"
    with gr.Row():
        source_box = gr.Textbox(
            value=served.name, label=f"Model folder or Hub repository id{off}", elem_id="model-source", scale=4
        )
        load_button = gr.Button("Load model", elem_id="load-model", scale=1, size="md")
    return {
        "model_source": gr.State(explorer.source if explorer else ""),
        "translation_state": gr.State(None, time_to_live=STATE_SECONDS),
        "source_box": source_box,
        "load_button": load_button,
        "model_status": gr.HTML(status, elem_id="model-status"),
    }


def _translate_tab(gr, explorer: Explorer | None, example: str) -> dict:
    from hf_vaswani import PAPER_DECODING

    generation = explorer.model.generation_config if explorer else None
    beams = int(generation.num_beams or 1) if generation else PAPER_DECODING["num_beams"]
    alpha = float(generation.length_penalty) if generation and generation.length_penalty else None
    paper_type = PAPER_DECODING["length_penalty_type"]
    gnmt = (getattr(generation, "length_penalty_type", paper_type) if generation else paper_type) == "gnmt"
    controls = {}
    with gr.Tab("Translate", id="translate"):
        controls["sentence"] = gr.Textbox(
            value=example, label="Source sentence", lines=2, elem_id="sentence", autofocus=True
        )
        with gr.Row():
            controls["beams"] = gr.Slider(1, MAX_BEAMS, value=beams, step=1, label="Beam size", elem_id="beams")
            controls["n_best"] = gr.Slider(1, MAX_BEAMS, value=1, step=1, label="n best", elem_id="n-best")
            controls["greedy"] = gr.Checkbox(value=beams == 1, label="Greedy search", elem_id="greedy")
            controls["gnmt"] = gr.Checkbox(value=gnmt, label="GNMT length penalty (§6.1)", elem_id="gnmt")
            controls["alpha"] = gr.Number(
                value=alpha or PAPER_DECODING["length_penalty"], label="α", minimum=0.0, maximum=3.0, step=0.1,
                elem_id="alpha",
            )  # fmt: skip
        controls["translate_button"] = gr.Button("Translate", variant="primary", elem_id="translate-button")
        # How many answers this page got; hidden by CSS. Scripts driving the page wait for it to go up.
        controls["answers"] = gr.Number(
            0, precision=0, elem_id="answers", elem_classes=["vx-hidden"], interactive=False
        )
        controls["notice"] = gr.HTML("", elem_id="notice")
        controls["translation"] = gr.Textbox(
            label="Translation (best hypothesis)", elem_id="translation", interactive=False
        )
        controls["hypotheses"] = gr.Dataframe(
            headers=["rank", "translation", "score", "log P", "tokens"],
            datatype=["number", "str", "number", "number", "number"],
            label="n best (score: log P divided by the length penalty for beam search; log P for greedy)",
            elem_id="hypotheses",
            interactive=False,
            wrap=True,
            column_widths=["8%", "56%", "12%", "12%", "12%"],
        )
    return controls


def _look_tab(gr, explorer: Explorer | None) -> dict:
    kind = ATTENTION_KINDS[0]
    layers = layer_choices(explorer, kind)
    controls = {}
    with gr.Tab("Look", id="look"):
        with gr.Row():
            controls["kind"] = gr.Radio(list(ATTENTION_KINDS), value=kind, label="Attention", elem_id="kind", scale=2)
            controls["layer"] = gr.Radio(layers, value=layers[-1], label="Layer", elem_id="layer", scale=1)
            controls["head"] = gr.Radio(
                head_choices(explorer, kind), value="mean", label="Head", elem_id="head", scale=2
            )
        controls["token"] = gr.Dropdown(
            choices=[], value=None, label="Output token (its source alignment is shown below)",
            elem_id="output-token", interactive=True,
        )  # fmt: skip
        controls["heatmap"] = gr.HTML(render_attention(None, kind, 0, "mean", None)[0], elem_id="heatmap-box")
        controls["alignment"] = gr.HTML("", elem_id="alignment-box")
    return controls


def _positions_tab(gr, explorer: Explorer | None) -> dict:
    d_model = explorer.config.d_model if explorer else 512
    most = max(explorer.max_source_tokens if explorer else 256, 2)
    with gr.Tab("Position encoding", id="positions"):
        gr.Markdown(
            "§3.5: each position gets a fixed vector of sines and cosines whose wavelengths grow "
            "geometrically from 2π to 10000·2π, added to the token embedding. Nearby positions have similar "
            "vectors, and PE(pos + k) is a linear function of PE(pos) for any fixed offset k."
        )
        positions = gr.Slider(2, most, value=min(64, most), step=1, label="positions shown", elem_id="positions")
        position_view = gr.HTML(position_encoding_html(int(positions.value), d_model), elem_id="pe-box")
    return {"positions": positions, "position_view": position_view}


# ---- the page's events ------------------------------------------------------------------------------------------------


def _wire_events(gr, c: dict, served: Served) -> None:
    """Connect the controls to the handlers below; `served` is handed to each handler that needs it."""
    from functools import partial

    load_outputs = ["model_source", "model_status", "translation_state", "layer", "head", "heatmap", "position_view"]
    for trigger in (c["load_button"].click, c["source_box"].submit):
        trigger(partial(on_load, served=served), inputs=c["source_box"], outputs=[c[n] for n in load_outputs],
                api_name="load")  # fmt: skip
    translate_inputs = ["answers", "model_source", "sentence", "beams", "greedy", "n_best", "gnmt", "alpha"]
    translate_inputs += ["kind", "layer", "head"]
    translate_outputs = ["answers", "notice", "translation", "hypotheses", "translation_state", "token", "heatmap"]
    translate_outputs += ["alignment"]
    for trigger in (c["translate_button"].click, c["sentence"].submit):
        trigger(partial(on_translate, served=served), inputs=[c[n] for n in translate_inputs],
                outputs=[c[n] for n in translate_outputs], api_name="translate")  # fmt: skip
    view_inputs = [c[n] for n in ("translation_state", "kind", "layer", "head", "token")]
    c["kind"].input(partial(on_kind, served=served), inputs=[c["model_source"], *view_inputs],
                    outputs=[c["layer"], c["head"], c["heatmap"], c["alignment"]], api_name="kind")  # fmt: skip
    for control in ("layer", "head", "token"):
        c[control].input(on_view, inputs=view_inputs, outputs=[c["heatmap"], c["alignment"]], api_name="view")
    c["positions"].release(partial(on_positions, served=served), inputs=[c["model_source"], c["positions"]],
                           outputs=c["position_view"], api_name="positions")  # fmt: skip


def on_load(requested: str, *, served: Served):
    """The Load box: the served model, or one the operator allows; a refusal says nothing about the disk."""
    import gradio as gr

    requested = (requested or "").strip()
    shown = requested
    if requested == served.name:  # the served model, by the name the page shows for it
        requested, shown = served.source, served.name
    unchanged = tuple(gr.update() for _ in range(5))
    if requested != served.source and not served.policy.allows(requested):
        return (gr.update(), text_html(f"⚠️ {served.policy.refusal(requested)}"), *unchanged)
    try:
        loaded = load_explorer(requested, shelf=served.shelf)
    except UsageError as error:
        return (gr.update(), text_html(f"⚠️ {error}"), *unchanged)
    except Exception as error:  # never a traceback in the page; the log has it
        logger.exception("loading %s failed", requested)
        reason = f": {error}" if served.policy.anything else " (the server's log says why)"
        return (gr.update(), text_html(f"⚠️ cannot load {requested}{reason}"), *unchanged)
    kind = ATTENTION_KINDS[0]
    layers = layer_choices(loaded, kind)
    return (
        loaded.source,
        describe(loaded, shown),
        None,
        gr.update(choices=layers, value=layers[-1]),
        gr.update(choices=head_choices(loaded, kind), value="mean"),
        render_attention(None, kind, 0, "mean", None)[0],
        position_encoding_html(min(64, loaded.max_source_tokens), loaded.config.d_model),
    )


def on_translate(count, source, text, num_beams, use_greedy, n_best, use_gnmt, alpha, kind, layer, head, *, served):
    """The Translate button: the answer counter, the notice, the translation, the n best and the Look views."""
    import gradio as gr

    answered = int(count or 0) + 1
    empty = ("", [], None, gr.update(choices=[], value=None), *render_attention(None, kind, 0, "mean", None))
    loaded = served.shelf.get(source)
    if loaded is None:
        why = f" ({source} was unloaded to make room for another model; press Load again)" if source else ""
        return (answered, text_html(f"⚠️ No model is loaded{why}."), *empty)
    if served.watch is not None:
        served.watch.follow()  # in the thread that computes: torch's thread count is kept per thread
    started = time.perf_counter()
    try:
        result = translate_sentence(loaded, text or "", num_beams, use_greedy, n_best, use_gnmt, alpha or 0.0)
    except UsageError as error:
        return (answered, text_html(f"⚠️ {error}"), *empty)
    except Exception as error:
        logger.exception("translating %r failed", text)
        return (answered, text_html(f"⚠️ The model failed on this sentence: {error}"), *empty)
    state = result.as_state()
    rows = [
        [h["rank"], h["text"], round(h["score"], 4), round(h["log_prob"], 4), h["tokens"]] for h in result.hypotheses
    ]
    choices = [(f"{i}: {label}", i) for i, label in enumerate(display(result.target_tokens))]
    heatmap, alignment = render_attention(state, kind, layer, head, 0)
    decoding = "greedy search" if use_greedy else f"beam {int(num_beams)}"
    if not use_greedy and int(num_beams) > 1:
        decoding += f", GNMT α={float(alpha or 0.0):g}" if use_gnmt else ", no length penalty"
    done = (
        f"Translated in {time.perf_counter() - started:.2f} s ({decoding}; {len(result.source_tokens)} source "
        f"tokens, {len(result.target_tokens)} output tokens)."
    )
    notice = text_html(*(f"⚠️ {n}" for n in result.notices), done)
    return (answered, notice, result.text, rows, state, gr.update(choices=choices, value=0), heatmap, alignment)


def on_view(state, kind, layer, head, token):
    try:
        return render_attention(state, kind, layer, head, token)
    except Exception as error:
        logger.exception("drawing failed")
        return f"<p id='heatmap'>⚠️ Cannot draw this view: {html.escape(str(error))}</p>", ""


def on_kind(source, state, kind, layer, head, token, *, served):
    import gradio as gr

    loaded = served.shelf.get(source)
    layers, heads = layer_choices(loaded, kind), head_choices(loaded, kind)
    layer = layer if layer in layers else layers[-1]
    head = head if head in heads else "mean"
    return (
        gr.update(choices=layers, value=layer),
        gr.update(choices=heads, value=head),
        *on_view(state, kind, layer, head, token),
    )


def on_positions(source, count, *, served):
    loaded = served.shelf.get(source)
    return position_encoding_html(int(count), loaded.config.d_model if loaded else served.d_model)


# ---- command line ---------------------------------------------------------------------------------------------------


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="vaswani-explore",
        description="Open the attention explorer (a local web page) on a trained model.",
    )
    parser.add_argument("model", metavar="MODEL_FOLDER_OR_REPO", help="a folder written by vaswani-train, or a Hub id")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every machine that can reach this one)"
    )
    parser.add_argument(
        "--port", type=port_number, default=None, help="port (default: Gradio's, 7860 or the next free)"
    )
    parser.add_argument(
        "--name", default=None, help="what the page calls the model (default: a Hub id as given, a folder by its own "
        "name; never its path on this machine)"
    )  # fmt: skip
    parser.add_argument("--share", action="store_true", help="also open a temporary public gradio.live link")
    parser.add_argument(
        "--allow-load", nargs="+", default=None, metavar="PATTERN",
        help="folders (with the folders inside them), Hub ids or fnmatch patterns of them (your-name/*) that visitors "
        "may load from the page; default: anything on a loopback address without --share, nothing otherwise",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=positive_int, default=None,
        help="CPU threads (default: the CPUs free to this command, looked at again as it answers, "
        "training/threads.py; OMP_NUM_THREADS when set)",
    )  # fmt: skip
    parser.add_argument(
        "--verbose", action="store_true", help="the libraries' INFO logs and progress bars too (default: warnings only)"
    )
    return parser


def positive_int(value: str) -> int:
    import argparse

    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of 1 or more")
    return int(value)


def port_number(value: str) -> int:
    import argparse

    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (1 to 65535)")
    return int(value)


def check_port(host: str, port: int | None) -> None:
    """--port must be free on --host: checked before gradio and the model load, not after, as gradio's OSError."""
    import socket

    if port is None:
        return  # gradio takes 7860 or the next free one
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, port))
    except OSError as error:
        raise UsageError(
            f"--port {port}: cannot listen on {host}:{port} ({error.strerror}: another program uses it?); choose "
            "another --port, or leave --port out to take the next free one"
        ) from None


def load_policy(host: str, share: bool, allow_load: list[str] | None) -> LoadPolicy:
    """What visitors may load: what --allow-load names; without it anything when only this machine can reach the
    page (a loopback address, no --share), and nothing when others can."""
    if allow_load is not None:
        return LoadPolicy(tuple(pattern for pattern in allow_load if pattern.strip()))
    return LoadPolicy(anything=host in LOOPBACK_HOSTS and not share)


def reach_notice(host: str, port: int | None, share: bool, policy: LoadPolicy) -> str | None:
    """One line saying who can use a page that others can reach, and whether they may load models; None if local."""
    if host in LOOPBACK_HOSTS and not share:
        return None
    on_port = f"port {port}" if port else "its port (7860 or the next free one, printed below)"
    who = [] if host in LOOPBACK_HOSTS else [f"every machine that can reach this one on {on_port} ({host})"]
    who += ["anyone with the gradio.live link"] if share else []
    loading = (
        f"visitors may load only what --allow-load names ({len(policy.patterns)} pattern(s))"
        if policy.patterns
        else "loading other models from the page is off (allow some with --allow-load PATTERN ...)"
    )
    return f"vaswani-explore: the page can be used by {' and by '.join(who)}; {loading}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = model_problem(args.model)  # the folder is checked before gradio or torch load
    if problem is not None:
        raise UsageError(problem)
    check_port(args.host, args.port)
    _require_gradio()
    setup_logging(args.verbose)  # training/console.py: the commands' one log format, the libraries quiet
    import torch
    import transformers  # noqa: F401  (imported now, so that it is quieted, or not, before the model loads)

    quiet_libraries(args.verbose)
    watch = ThreadWatch(use_threads(args.threads, torch), torch)
    policy = load_policy(args.host, args.share, args.allow_load)
    load_explorer(args.model, pin=True)  # fail here, in one line, rather than in the page
    app = build_app(args.model, allow_load=policy, name=args.name, watch=watch)
    notice = reach_notice(args.host, args.port, args.share, policy)
    if notice:
        print(notice, file=sys.stderr)
    app.launch(server_name=args.host, server_port=args.port, share=args.share, **launch_options())
    return 0


__all__ = [
    "LoadPolicy",
    "ModelShelf",
    "Translation",
    "build_app",
    "load_explorer",
    "load_policy",
    "main",
    "model_problem",
    "reach_notice",
    "translate_sentence",
]
