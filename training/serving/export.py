"""Export a trained model to ONNX for incremental greedy decoding with ONNX Runtime.

    vaswani-export MODEL_DIR OUT_DIR [--opset N] [--check]      (or `python -m training.export` from a checkout)
    vaswani-export MODEL_DIR OUT_DIR --format ctranslate2 [--quantization int8] [--check]

`--format ctranslate2` writes a CTranslate2 model instead, through CTranslate2's own converter with a loader for this
architecture (training/serving/ctranslate2_export.py); `vaswani-translate OUT_DIR --engine ctranslate2` translates with it.
Its `--check` (and a quantized export without it, on the sample sentences) prints one line: tokens identical to
generate() (share of sentences) and the mean log-prob difference per token; int8 kernels differ by CPU, so a
quantized model far from generate() on this CPU gets one warning line naming the kernels and what keeps quality.

`--threads N` (default: the CPUs free to this command, training/threads.py) is the count for torch and for the
checks' ONNX Runtime sessions and CTranslate2 translator, which would otherwise take every core; `--verbose` shows the
libraries' INFO logs, which are otherwise kept to warnings (training/console.py). Every format is written staged
(training/staging.py): a failure on the way, a full disk included, leaves nothing half-written at OUT_DIR.

Three graphs, so a loop outside the model can decode with a key/value cache held as plain tensors:

- `encoder.onnx`: input_ids, attention_mask [batch, src_len] int64 → encoder_hidden_states [batch, src_len, d_model].
- `cross_attention.onnx`: encoder_hidden_states → `present.{i}.encoder.key` / `.value` [batch, heads, src_len,
  head_dim] for every decoder layer i: the keys and values of the encoder-decoder attention (§3.2.3). The encoder
  output does not change while decoding, so they are projected once per source, as the model's own cache does.
- `decoder_step.onnx`: one decoder step. decoder_input_ids [batch, 1] int64, encoder_attention_mask [batch, src_len]
  int64, `past_key_values.{i}.decoder.key` / `.value` [batch, heads, past_len, head_dim] (self-attention over the
  tokens so far) and `past_key_values.{i}.encoder.key` / `.value` (the outputs of cross_attention.onnx) →
  logits [batch, 1, vocab] and `present.{i}.decoder.key` / `.value` [batch, heads, past_len + 1, head_dim].
  The first step passes a past of length 0 (arrays of shape [batch, heads, 0, head_dim]): one graph serves every
  step, and the position of the new token is past_len, read from the shape of the past.

The input and output names follow Hugging Face Optimum's. OUT_DIR also gets the tokenizer files and
`export_config.json` (special ids, layers, heads, head_dim, d_model), which is all `onnx_greedy_decode` needs.
`--check` decodes a few sentences with ONNX Runtime and with `model.generate(num_beams=1)` and compares the tokens.

The graphs are traced from the model's own modules (attn_implementation="eager") by the dynamo-based
`torch.onnx.export`; the wrappers below only turn the cache tensors into the model's `EncoderDecoderCache` and back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import staging
from ..console import setup_logging
from ..threads import use_threads
from ..usage import (
    ArgumentParser,
    UsageError,
    check_loaded_model,
    check_model_dir,
    check_output_dir,
    int_in,
    positive_int,
    require_extra,
)
from .ctranslate2_export import QUANTIZATIONS as CT2_QUANTIZATIONS
from .ctranslate2_export import check_out_dir as check_ctranslate2_out_dir
from .loading import weights_shape_problem

if TYPE_CHECKING:
    import numpy as np
    import torch

logger = logging.getLogger(__name__)

ENCODER_FILE = "encoder.onnx"
CROSS_ATTENTION_FILE = "cross_attention.onnx"
DECODER_STEP_FILE = "decoder_step.onnx"
CONFIG_FILE = "export_config.json"
DEFAULT_OPSET = 18
# The opsets vaswani-export can write, fixed here so that --opset is checked before torch loads. torch.onnx's dynamo
# exporter (torch 2.13, onnxscript 0.7) builds every graph at its own opset 18 (TORCHLIB_OPSET) and converts it to
# the opset asked for: down to 17, where LayerNormalization first exists (below, the conversion fails with "No
# Previous Version of LayerNormalization exists" and the files stay at 18), and up to the newest opset of the onnx
# package; ONNX Runtime 1.32 runs (--check) each of 17-28 with identical tokens (measured on the tiny model).
MIN_OPSET, MAX_OPSET = 17, 28
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")
CHECK_SENTENCES = (
    "A man sits on a bench .",
    "Two dogs run through the snow while a child watches them .",
    "Hello !",
)


def _past_names(layer: int, kind: str) -> tuple[str, str]:
    return f"past_key_values.{layer}.{kind}.key", f"past_key_values.{layer}.{kind}.value"


def _present_names(layer: int, kind: str) -> tuple[str, str]:
    return f"present.{layer}.{kind}.key", f"present.{layer}.{kind}.value"


# ---- the graphs -----------------------------------------------------------------------------------------------------


def _graph_modules():
    """The wrapper modules, defined on first use so that `--help` and argument errors need no torch."""
    from torch import nn
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    class EncoderGraph(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.encoder = model.get_encoder()

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class CrossAttentionGraph(nn.Module):
        """The key and value projections of every encoder-decoder attention, laid out as VaswaniAttention caches
        them."""

        def __init__(self, model):
            super().__init__()
            self.layers = model.get_decoder().layers

        def forward(self, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
            batch_size, source_length = encoder_hidden_states.shape[:2]
            outputs = []
            for layer in self.layers:
                attention = layer.encoder_attn
                for projection in (attention.k_proj, attention.v_proj):
                    states = projection(encoder_hidden_states).view(batch_size, source_length, -1, attention.head_dim)
                    outputs.append(states.transpose(1, 2))  # (B, nh, S, hs)
            return tuple(outputs)

    class DecoderStepGraph(nn.Module):
        """One step of the model's own decoder, with its cache passed in and out as tensors.

        `past` holds, per layer, the self-attention key and value and the cross-attention key and value. They fill
        an `EncoderDecoderCache` as `generate()` would have left it, so the decoder reads its position offset from
        the self-attention cache, appends the new key/value there, and takes the cross-attention keys/values from
        the cache instead of projecting the encoder output again.
        """

        def __init__(self, model):
            super().__init__()
            self.decoder = model.get_decoder()
            self.lm_head = model.lm_head

        def forward(
            self, decoder_input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, past: tuple[torch.Tensor, ...]
        ) -> tuple[torch.Tensor, ...]:
            num_layers = len(self.decoder.layers)
            self_attention = DynamicCache([(past[4 * i], past[4 * i + 1]) for i in range(num_layers)])
            cross_attention = DynamicCache([(past[4 * i + 2], past[4 * i + 3]) for i in range(num_layers)])
            cache = EncoderDecoderCache(self_attention, cross_attention)
            # A decoder layer takes its cross-attention path only when it is given encoder_hidden_states; with the
            # cache filled their values are never read (only their shape, for the mask), so a view of the cached
            # keys with that shape stands in for them.
            cross_key = past[2]  # (B, nh, S, hs)
            encoder_hidden_states = cross_key.transpose(1, 2).flatten(2)  # (B, S, d_model)
            hidden_states = self.decoder(
                input_ids=decoder_input_ids,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                use_cache=True,
            ).last_hidden_state
            logits = self.lm_head(hidden_states)  # (B, 1, vocab)
            present = []
            for layer in cache.self_attention_cache.layers:
                present.extend((layer.keys, layer.values))  # (B, nh, past_len + 1, hs)
            return (logits, *present)

    return EncoderGraph, CrossAttentionGraph, DecoderStepGraph


def load_model(model_dir: str | Path, trust_remote_code: bool = False):
    """The model in float32 with eager attention, the implementation whose every op has an ONNX counterpart."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    try:
        import hf_vaswani  # noqa: F401  (registers the Auto classes)
    except ImportError:
        pass
    problem = weights_shape_problem(str(model_dir))  # weights of another model size than the config
    if problem is not None:
        raise UsageError(problem)
    model = AutoModelForSeq2SeqLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", trust_remote_code=trust_remote_code
    )
    check_loaded_model(model, None, str(model_dir))  # NaN weights: refused before anything is written
    return model.eval()


def export_config(model) -> dict:
    config = model.config
    heads = config.decoder_attention_heads
    eos = (
        model.generation_config.eos_token_id
        if model.generation_config.eos_token_id is not None
        else config.eos_token_id
    )
    return {
        "decoder_start_token_id": config.decoder_start_token_id,
        "bos_token_id": config.bos_token_id,
        "pad_token_id": config.pad_token_id,
        "eos_token_id": eos,
        "vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "decoder_attention_heads": heads,
        "head_dim": config.d_model // heads,
        "files": {"encoder": ENCODER_FILE, "cross_attention": CROSS_ATTENTION_FILE, "decoder_step": DECODER_STEP_FILE},
    }


def _export_graph(module, args: tuple, path: Path, input_names, output_names, dynamic_shapes, opset: int) -> None:
    import torch

    with warnings.catch_warnings():
        # An axis name given to several inputs is reported once per repeat, although that is how axes are shared.
        warnings.filterwarnings("ignore", message="# The axis name", category=UserWarning)
        # torch's own pytree code, called by the exporter, trips over its own deprecation.
        warnings.filterwarnings("ignore", message=".*LeafSpec.* is deprecated", category=FutureWarning)
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            verbose=False,
        )
    # One self-contained file per graph: the big preset (~213M parameters) stays well under protobuf's 2 GB limit.
    program.save(str(path), external_data=False)


def written_opsets(out_dir: Path) -> set[int]:
    """The default-domain opsets the three .onnx files in `out_dir` import (their opset_import)."""
    import onnx

    return {
        entry.version
        for name in (ENCODER_FILE, CROSS_ATTENTION_FILE, DECODER_STEP_FILE)
        for entry in onnx.load(str(out_dir / name), load_external_data=False).opset_import
        if entry.domain in ("", "ai.onnx")
    }


def export(model, out_dir: str | Path, opset: int = DEFAULT_OPSET) -> dict:
    """Write encoder.onnx, cross_attention.onnx, decoder_step.onnx and export_config.json to `out_dir`."""
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = export_config(model)
    num_layers, heads, head_dim = config["decoder_layers"], config["decoder_attention_heads"], config["head_dim"]
    encoder_graph, cross_attention_graph, decoder_step_graph = (cls(model).eval() for cls in _graph_modules())

    # Example sizes all different, so that no two dynamic axes are mistaken for one; a past of 0 or 1 would be
    # specialised to a constant by torch.export, hence 3 here and 0 at run time.
    batch, source_length, past_length = 2, 5, 3
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(4, config["vocab_size"], (batch, source_length), generator=generator)
    attention_mask = torch.ones(batch, source_length, dtype=torch.long)
    attention_mask[1, -2:] = 0  # right padding, so the mask is built from the input rather than skipped
    # Named axes: torch.onnx.export makes them dynamic and writes these names as the ONNX dim_params.
    batch_axis, source_axis, past_axis = "batch", "src_len", "past_len"

    with torch.no_grad():
        logger.info("Exporting the encoder to %s", out_dir / ENCODER_FILE)
        _export_graph(
            encoder_graph,
            (input_ids, attention_mask),
            out_dir / ENCODER_FILE,
            ["input_ids", "attention_mask"],
            ["encoder_hidden_states"],
            {"input_ids": {0: batch_axis, 1: source_axis}, "attention_mask": {0: batch_axis, 1: source_axis}},
            opset,
        )
        encoder_hidden_states = encoder_graph(input_ids, attention_mask)

        logger.info("Exporting the cross-attention keys and values to %s", out_dir / CROSS_ATTENTION_FILE)
        cross_names = [name for i in range(num_layers) for name in _present_names(i, "encoder")]
        _export_graph(
            cross_attention_graph,
            (encoder_hidden_states,),
            out_dir / CROSS_ATTENTION_FILE,
            ["encoder_hidden_states"],
            cross_names,
            {"encoder_hidden_states": {0: batch_axis, 1: source_axis}},
            opset,
        )
        cross = cross_attention_graph(encoder_hidden_states)

        logger.info("Exporting one decoder step to %s", out_dir / DECODER_STEP_FILE)
        past, past_names, past_shapes = [], [], []
        for i in range(num_layers):
            past.extend(torch.randn(batch, heads, past_length, head_dim, generator=generator) for _ in range(2))
            past.extend(cross[2 * i : 2 * i + 2])
            past_names.extend((*_past_names(i, "decoder"), *_past_names(i, "encoder")))
            past_shapes.extend([{0: batch_axis, 2: past_axis}] * 2 + [{0: batch_axis, 2: source_axis}] * 2)
        decoder_input_ids = torch.randint(4, config["vocab_size"], (batch, 1), generator=generator)
        present_names = [name for i in range(num_layers) for name in _present_names(i, "decoder")]
        _export_graph(
            decoder_step_graph,
            (decoder_input_ids, attention_mask, tuple(past)),
            out_dir / DECODER_STEP_FILE,
            ["decoder_input_ids", "encoder_attention_mask", *past_names],
            ["logits", *present_names],
            {
                "decoder_input_ids": {0: batch_axis},
                "encoder_attention_mask": {0: batch_axis, 1: source_axis},
                "past": tuple(past_shapes),
            },
            opset,
        )
    written = written_opsets(out_dir)
    if written != {opset}:
        logger.warning("asked for opset %d, but the exporter wrote %s", opset, sorted(written))
    config["opset"] = max(written)  # what the files hold, not what was asked for
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return config


def copy_tokenizer_files(model_dir: str | Path, out_dir: str | Path) -> list[str]:
    copied = []
    for name in TOKENIZER_FILES:
        source = Path(model_dir) / name
        if source.is_file():
            shutil.copy2(source, Path(out_dir) / name)
            copied.append(name)
    return copied


# ---- greedy decoding with ONNX Runtime ------------------------------------------------------------------------------


class OnnxGreedyDecoder:
    """The three exported graphs in ONNX Runtime sessions (CPU), and the greedy loop over them."""

    def __init__(self, out_dir: str | Path, num_threads: int | None = None):
        import onnxruntime

        out_dir = Path(out_dir)
        self.config = json.loads((out_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
            options.inter_op_num_threads = num_threads

        def session(name: str):
            return onnxruntime.InferenceSession(str(out_dir / name), options, providers=["CPUExecutionProvider"])

        self.encoder = session(ENCODER_FILE)
        self.cross_attention = session(CROSS_ATTENTION_FILE)
        self.decoder_step = session(DECODER_STEP_FILE)

    def __call__(self, input_ids, attention_mask=None, max_new_tokens: int = 32) -> list[list[int]]:
        import numpy as np

        config = self.config
        pad, start = config["pad_token_id"], config["decoder_start_token_id"]
        eos = config["eos_token_id"]
        eos_ids = np.asarray(eos if isinstance(eos, list) else [eos], dtype=np.int64)
        input_ids = _as_int64(input_ids)
        attention_mask = (input_ids != pad).astype(np.int64) if attention_mask is None else _as_int64(attention_mask)
        if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"input_ids {input_ids.shape} and attention_mask {attention_mask.shape} must be [batch, src_len]"
            )
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 0")
        batch = input_ids.shape[0]

        (encoder_hidden_states,) = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        cross = self.cross_attention.run(None, {"encoder_hidden_states": encoder_hidden_states})
        feeds = {"encoder_attention_mask": attention_mask}
        empty = np.zeros((batch, config["decoder_attention_heads"], 0, config["head_dim"]), dtype=np.float32)
        for i in range(config["decoder_layers"]):
            key, value = _past_names(i, "decoder")
            feeds[key], feeds[value] = empty, empty
            key, value = _past_names(i, "encoder")
            feeds[key], feeds[value] = cross[2 * i], cross[2 * i + 1]
        output_names = [output.name for output in self.decoder_step.get_outputs()]

        # As generate() does greedily: argmax each step, pad rows that have finished, stop when all have.
        tokens = np.full((batch, 1), start, dtype=np.int64)
        sequences = [tokens[:, 0]]
        unfinished = np.ones(batch, dtype=bool)
        for _ in range(max_new_tokens):
            feeds["decoder_input_ids"] = tokens
            outputs = dict(zip(output_names, self.decoder_step.run(None, feeds)))
            next_tokens = outputs["logits"][:, -1, :].argmax(-1).astype(np.int64)
            next_tokens = np.where(unfinished, next_tokens, pad)
            sequences.append(next_tokens)
            unfinished &= ~np.isin(next_tokens, eos_ids)
            if not unfinished.any():
                break
            tokens = next_tokens[:, None]
            for i in range(config["decoder_layers"]):
                for past_name, present_name in zip(_past_names(i, "decoder"), _present_names(i, "decoder")):
                    feeds[past_name] = outputs[present_name]
        return np.stack(sequences, axis=1).tolist()


def _as_int64(values) -> np.ndarray:
    import numpy as np

    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.int64)


def onnx_greedy_decode(
    out_dir: str | Path,
    input_ids,
    attention_mask,
    max_new_tokens: int,
    num_threads: int | None = None,
) -> list[list[int]]:
    """Greedy decoding with the graphs in `out_dir`, token for token what `model.generate(num_beams=1,
    max_new_tokens=max_new_tokens)` returns: the decoder start token first, each row ended by its EOS and padded
    with the pad id after it, the batch stopped when every row has ended or after `max_new_tokens` tokens.

    `input_ids` and `attention_mask` are [batch, src_len] (torch tensors, numpy arrays or nested lists); an
    `attention_mask` of None is taken as input_ids != pad. `generate()`'s per-row limit of source length +
    max_length_offset is not applied: `max_new_tokens` is the only limit.
    """
    return OnnxGreedyDecoder(out_dir, num_threads=num_threads)(input_ids, attention_mask, max_new_tokens)


# ---- command line ---------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="vaswani-export",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL_DIR", help="a folder written by vaswani-train")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="where to write the .onnx files, tokenizer and config")
    parser.add_argument(
        "--format",
        choices=("onnx", "ctranslate2"),
        default="onnx",
        help="onnx: three graphs for ONNX Runtime; ctranslate2: a CTranslate2 model (pip install "
        '"hf-vaswani[ctranslate2]")',
    )
    parser.add_argument(
        "--opset",
        type=int_in(MIN_OPSET, MAX_OPSET, ", the opsets the exporter can write"),
        default=DEFAULT_OPSET,
        help=f"ONNX opset version, {MIN_OPSET} to {MAX_OPSET} (--format onnx)",
    )
    parser.add_argument(
        "--quantization",
        choices=CT2_QUANTIZATIONS,
        help="--format ctranslate2: weight type of the converted model (default: float32)",
    )
    parser.add_argument(
        "--check", action="store_true", help="compare ONNX Runtime greedy decoding with model.generate(num_beams=1)"
    )
    parser.add_argument(
        "--sentence",
        action="append",
        metavar="TEXT",
        help="a sentence for --check (repeatable; default: three built-in English sentences)",
    )
    parser.add_argument("--max_new_tokens", type=positive_int, default=32, help="decoding limit for --check")
    parser.add_argument("--trust_remote_code", action="store_true", help="allow the model folder's own code to run")
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads for torch, and for ONNX Runtime and CTranslate2 in the checks (default: the CPUs free to this "
        "command, training/threads.py; OMP_NUM_THREADS when set)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the libraries' INFO logs (default: their warnings and errors only)"
    )
    return parser


def check(
    model,
    tokenizer,
    out_dir: str | Path,
    sentences: Sequence[str],
    max_new_tokens: int,
    num_threads: int | None = None,
) -> bool:
    """Print ONNX Runtime's and generate()'s greedy tokens for `sentences`; True when they are the same. `num_threads`:
    ONNX Runtime's (None: its default, every core)."""
    import torch

    batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(
            **batch, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens, max_length_offset=None
        ).tolist()
    actual = onnx_greedy_decode(
        out_dir, batch["input_ids"], batch["attention_mask"], max_new_tokens, num_threads=num_threads
    )
    all_equal = True
    for sentence, ours, theirs in zip(sentences, actual, expected):
        equal = ours == theirs
        all_equal &= equal
        print(
            f"{'same' if equal else 'DIFFERENT'}: {sentence!r} -> {tokenizer.decode(ours, skip_special_tokens=True)!r}"
        )
        if not equal:
            print(f"    onnxruntime: {ours}\n    generate():  {theirs}")
    print(f"--check: {'tokens identical' if all_equal else 'tokens differ'} on {len(sentences)} sentences")
    return all_equal


def check_arguments(args: argparse.Namespace) -> None:
    """The model folder, OUT_DIR and the export extra, before torch is imported or anything is written."""
    check_model_dir(args.model, "MODEL_DIR", hub_allowed=False)
    check_output_dir(args.out_dir, "OUT_DIR")
    if args.sentence and not args.check:
        raise UsageError("--sentence chooses what --check decodes: add --check")
    if args.format == "ctranslate2":
        if args.opset != DEFAULT_OPSET:
            raise UsageError("--opset applies to --format onnx only")
        require_extra(["ctranslate2"], "ctranslate2", "vaswani-export --format ctranslate2")
        check_ctranslate2_out_dir(Path(args.out_dir))
        return
    if args.quantization is not None:
        raise UsageError("--quantization applies to --format ctranslate2 only: add --format ctranslate2")
    require_extra(["onnx", "onnxscript", *(["onnxruntime"] if args.check else [])], "export", "vaswani-export")


def main(argv: list[str] | None = None) -> int:
    """Export as the command line says: 0 when done (and --check found the same tokens), 1 when --check found
    different tokens. A user error raises UsageError (vaswani-export prints it as one line, exit status 2)."""
    args = build_parser().parse_args(argv)
    check_arguments(args)
    setup_logging(args.verbose)  # training/console.py: the commands' one log format, libraries quiet unless --verbose
    import torch

    # One count for torch, ONNX Runtime and CTranslate2: left to themselves the two engines take every core.
    threads = use_threads(args.threads, torch).threads
    # torch.onnx warns, for every graph, about torchvision operators it cannot register; they are not used here.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    if args.format == "ctranslate2":
        return _export_ctranslate2(args, threads)
    model = load_model(args.model, trust_remote_code=args.trust_remote_code)
    out_dir = Path(args.out_dir)
    created = not out_dir.exists()
    try:
        # Staged, export_config.json last: a full disk leaves no graphs without their config, which a reader would
        # take for a whole export; files get the user's mode.
        with staging.staged_files(out_dir, seal=CONFIG_FILE) as staged:
            export(model, staged, opset=args.opset)
            copied = copy_tokenizer_files(args.model, staged)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # the folder this run made, if nothing is in it
        raise
    print(f"Wrote {ENCODER_FILE}, {CROSS_ATTENTION_FILE}, {DECODER_STEP_FILE} and {CONFIG_FILE} to {args.out_dir}")
    if not copied:
        logger.warning("%s has no tokenizer files to copy", args.model)
    if args.check:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        sentences = args.sentence or list(CHECK_SENTENCES)
        if not check(model, tokenizer, args.out_dir, sentences, args.max_new_tokens, num_threads=threads):
            return 1
    return 0


def _export_ctranslate2(args: argparse.Namespace, threads: int) -> int:
    from .ctranslate2_export import agreement_warning, check_ctranslate2, compare_with_generate, convert_to_ctranslate2

    convert_to_ctranslate2(
        args.model, args.out_dir, quantization=args.quantization, trust_remote_code=args.trust_remote_code
    )
    quantization = args.quantization or "float32"
    print(f"Wrote a CTranslate2 model ({quantization}) and its tokenizer to {args.out_dir}")
    sentences = args.sentence or list(CHECK_SENTENCES)
    if args.check:
        agreement = check_ctranslate2(
            args.model, args.out_dir, sentences, args.max_new_tokens, args.trust_remote_code, intra_threads=threads
        )
    elif quantization != "float32":
        # Quantized kernels differ by CPU (docs/serving.md, "int8 on other CPUs"): a quantized export always measures
        # itself on the sample sentences (a few seconds), so that a model far from generate() on this CPU is never
        # silent.
        agreement = compare_with_generate(
            args.model,
            args.out_dir,
            sentences,
            args.max_new_tokens,
            args.trust_remote_code,
            verbose=False,
            intra_threads=threads,
        )
        print(f"{quantization} on this CPU: {agreement.line()}")
    else:
        return 0
    warning = agreement_warning(agreement, quantization)
    if warning is not None:
        logger.warning(warning)
    # Quantized weights change the logits: their outputs may differ from generate()'s without anything wrong.
    if args.check and not agreement.all_identical and quantization == "float32":
        return 1
    return 0
