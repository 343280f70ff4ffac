"""Conversion to CTranslate2 and translation with it: the serving path of a trained model on CPU.

    python -m training.export MODEL_DIR OUT_DIR --format ctranslate2 [--quantization int8]
    python -m training.translate OUT_DIR --engine ctranslate2 --input test.de

CTranslate2 converts Hugging Face models with `ctranslate2.converters.TransformersConverter`, which only knows the
architectures it has a loader for. `register_vaswani_loader()` registers one for `VaswaniConfig` that fills
CTranslate2's own `TransformerSpec`:

- post-LN layers (`pre_norm=False`, no final LayerNorm; `normalize_before=True` models get pre-LN and the final
  LayerNorm of each stack), ReLU (or any activation CTranslate2 knows), the LayerNorm epsilon of the config;
- token embeddings times sqrt(d_model) (`scale_embeddings`, §3.4) and one matrix for encoder input, decoder input
  and the pre-softmax projection (§3.4): the three spec variables hold equal arrays, which CTranslate2 stores once
  (aliases), and the projection has no bias;
- the positional encodings of §3.5 as an explicit table. CTranslate2's built-in sinusoids put all sines first and
  all cosines second; this model interleaves them (sin, cos, sin, cos, ...), so the loader gives the spec the
  model's own table, `max_positions` rows (default: the config's `max_position_embeddings`, 1024 for the presets).
  CTranslate2 has no encoding beyond the table, so sources are truncated to `max_positions` tokens and outputs to
  `max_positions` tokens (the PyTorch model computes the formula for any position and only warns).

Decoding (`CTranslate2Translator.translate`) maps the model's generation_config (the paper's decoding, §6.1, for
models trained here) onto CTranslate2's options:

- num_beams -> beam_size; num_return_sequences -> num_hypotheses; max_new_tokens -> max_decoding_length;
  do_sample/top_k/top_p/temperature -> sampling_topk (0: whole vocabulary)/sampling_topp/sampling_temperature.
- length_penalty alpha -> length_penalty alpha. CTranslate2 ranks finished hypotheses by log P / |Y|^alpha, which is
  generate()'s Hugging Face formula; the paper's GNMT formula log P / ((5 + |Y|) / 6)^alpha
  (length_penalty_type="gnmt") cannot be expressed, so alpha is used in the other formula.
- max_length_offset k (outputs of each source at most its length + k) -> max_decoding_length = the longest source
  of the batch + k: CTranslate2 has one limit per batch. Batches are length-sorted (those of
  `training.serving.decoding.translate_texts`), so the two differ only for the shorter sources of a batch.
- early_stopping="never" (the paper's config: keep searching while a running beam can still win) cannot be
  expressed: CTranslate2 finishes a source once beam_size hypotheses have ended, which is generate()'s
  early_stopping=True (CTranslate2's `patience` > 1 waits for more, not the same rule either).
- min_decoding_length=0: generate() allows an empty output, CTranslate2's default of 1 would not.

What the three inexpressible settings cost in BLEU is measured by benchmarks/serving_speed.py (numbers in
benchmarks/README.md). With generate() set to what CTranslate2 can express (Hugging Face length penalty,
early_stopping=True, the batch limit) the tokens are the same (tests/serving/test_ctranslate2_export.py, and the
benchmark).

`ctranslate2` is imported only when one of these functions runs; without it they raise `CTranslate2NotInstalled`,
whose message names `pip install "hf-vaswani[ctranslate2]"`.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import staging
from ..usage import UsageError, check_loaded_model, tokenizer_problem
from .decoding import DEFAULT_MAX_SENTENCES, DEFAULT_MAX_TOKENS, length_sorted_batches

logger = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "hf-vaswani[ctranslate2]"'
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# Written next to the converted model: what the conversion chose, and the decoding defaults of the source model.
EXPORT_INFO_FILE = "vaswani_ctranslate2.json"
CT2_MODEL_FILE = "model.bin"
# VaswaniConfig's default max_position_embeddings (hf_vaswani/configuration_vaswani.py): what a config.json, or an
# export info file, without the field means.
DEFAULT_MAX_POSITIONS = 1024


class CTranslate2NotInstalled(UsageError, ImportError):
    """The optional dependency is missing; the message says how to install it (one line from the commands)."""


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise CTranslate2NotInstalled(f"CTranslate2 is not installed: {INSTALL_HINT}") from None
    return ctranslate2


def is_ctranslate2_model(path: str | Path) -> bool:
    """True for a folder written by `convert_to_ctranslate2` (or any CTranslate2 model folder)."""
    return (Path(path) / CT2_MODEL_FILE).is_file()


def position_table(max_positions: int, d_model: int):
    """The §3.5 encodings of positions 0..max_positions-1 as a float32 array (max_positions, d_model), computed by
    the model's own function, so the converted model sees exactly what the PyTorch model adds."""
    import torch

    from hf_vaswani.modeling_vaswani import sinusoidal_position_encoding

    return sinusoidal_position_encoding(torch.arange(max_positions), d_model).numpy()


# ---- the converter's loader -----------------------------------------------------------------------------------------

_LOADER = None


def register_vaswani_loader():
    """Register the `VaswaniConfig` loader with `ctranslate2.converters.TransformersConverter` (once per process),
    so that CTranslate2's own converter, and `ct2-transformers-converter` run from Python after this call, convert
    this model. Returns the loader instance."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import_ctranslate2()
    from ctranslate2.converters import transformers as ct2_transformers
    from ctranslate2.specs import transformer_spec

    import hf_vaswani  # noqa: F401  (registers VaswaniConfig and the model with the Auto classes the converter uses)

    @ct2_transformers.register_loader("VaswaniConfig")
    class VaswaniLoader(ct2_transformers.ModelLoader):
        """VaswaniForConditionalGeneration -> TransformerSpec; the mapping is listed in the module docstring."""

        # Rows of the position table; None: the config's max_position_embeddings. Set by convert_to_ctranslate2.
        max_positions: int | None = None

        @property
        def architecture_name(self):
            # The converter looks this name up in `transformers`; the Auto class resolves to our model through the
            # registration `import hf_vaswani` made.
            return "AutoModelForSeq2SeqLM"

        def get_model_spec(self, model):
            check_loaded_model(model, None, model.name_or_path)  # NaN weights: refused, not converted
            config = model.config
            activation = ct2_transformers._SUPPORTED_ACTIVATIONS.get(config.activation_function)
            if activation is None:
                raise UsageError(
                    f"activation_function={config.activation_function!r} has no CTranslate2 equivalent; supported: "
                    f"{', '.join(sorted(ct2_transformers._SUPPORTED_ACTIVATIONS))}"
                )
            encoder = transformer_spec.TransformerEncoderSpec(
                config.encoder_layers,
                config.encoder_attention_heads,
                pre_norm=config.normalize_before,
                activation=activation,
            )
            decoder = transformer_spec.TransformerDecoderSpec(
                config.decoder_layers,
                config.decoder_attention_heads,
                pre_norm=config.normalize_before,
                activation=activation,
            )
            spec = transformer_spec.TransformerSpec(encoder, decoder)
            table = position_table(self.max_positions or config.max_position_embeddings, config.d_model)
            self._set_stack(spec.encoder, model.model.encoder, table)
            self._set_stack(spec.decoder, model.model.decoder, table)
            # The pre-softmax projection: the shared matrix when tied (an equal array, stored once), no bias.
            self.set_linear(spec.decoder.projection, model.lm_head)
            return spec

        def _set_stack(self, spec, stack, table) -> None:
            # sqrt(d_model), §3.4 (1.0 with scale_embedding off): on the embedding module, or on the stack in
            # models saved before the scale moved into it
            scale = getattr(stack.embed_tokens, "embed_scale", None)
            spec.scale_embeddings = float(scale if scale is not None else stack.embed_scale)
            spec.position_encodings.encodings = table  # interleaved sin/cos, §3.5 (see the module docstring)
            self.set_embeddings(spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings, stack)
            if stack.layer_norm is not None:  # pre-LN only
                self.set_layer_norm(spec.layer_norm, stack.layer_norm)
            for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
                self._set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
                self.set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
                if hasattr(layer_spec, "attention"):  # decoder: encoder-decoder attention, §3.2.3
                    self._set_attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
                    self.set_layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
                feed_forward = getattr(layer, "feed_forward", layer)  # fc1/fc2 sat on the layer in older versions
                self.set_linear(layer_spec.ffn.linear_0, feed_forward.fc1)
                self.set_linear(layer_spec.ffn.linear_1, feed_forward.fc2)
                self.set_layer_norm(layer_spec.ffn.layer_norm, layer.final_layer_norm)

        def set_embeddings(self, spec, stack):
            spec.weight = stack.embed_tokens.weight

        def _set_attention(self, spec, attention, self_attention: bool) -> None:
            from ctranslate2.converters import utils
            from ctranslate2.specs import common_spec

            q, k, v = (common_spec.LinearSpec() for _ in range(3))
            self.set_linear(q, attention.q_proj)
            self.set_linear(k, attention.k_proj)
            self.set_linear(v, attention.v_proj)
            # CTranslate2 runs self-attention Q/K/V as one matmul, and cross-attention K/V as one over the encoder
            if self_attention:
                utils.fuse_linear(spec.linear[0], [q, k, v])
            else:
                utils.fuse_linear(spec.linear[0], [q])
                utils.fuse_linear(spec.linear[1], [k, v])
            self.set_linear(spec.linear[-1], attention.out_proj)

        def get_vocabulary(self, model, tokenizer):
            tokens = super().get_vocabulary(model, tokenizer)
            size = model.config.vocab_size
            problem = tokenizer_problem(tokenizer, model.config, model.name_or_path)
            if problem is not None:
                raise UsageError(problem)
            if len(tokens) > size:
                raise UsageError(
                    f"the tokenizer has {len(tokens)} tokens but the model's vocab_size is {size}: the folder's "
                    "tokenizer is not the model's"
                )
            # Rows of the embedding that no token maps to (a vocabulary padded to a round size) still need names.
            return tokens + [f"<vaswani_unused_{i}>" for i in range(len(tokens), size)]

        def set_vocabulary(self, spec, tokens):
            spec.register_source_vocabulary(tokens)
            spec.register_target_vocabulary(tokens)

        def set_config(self, ct2_config, model, tokenizer):
            config = model.config
            names = self.get_vocabulary(model, tokenizer)
            ct2_config.bos_token = names[config.bos_token_id]
            eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
            ct2_config.eos_token = names[eos_id]
            ct2_config.unk_token = tokenizer.unk_token or "<unk>"
            ct2_config.decoder_start_token = names[config.decoder_start_token_id]
            ct2_config.layer_norm_epsilon = config.layer_norm_eps

    _LOADER = ct2_transformers._MODEL_LOADERS["VaswaniConfig"]
    return _LOADER


def check_out_dir(out_dir: Path) -> None:
    # The finished conversion replaces OUT_DIR whole (staging.publish, replace=True): only let it replace a folder
    # that is empty or holds an earlier conversion, never a folder of other files.
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not is_ctranslate2_model(out_dir))):
        raise UsageError(f"{out_dir} exists and is not an empty folder or a CTranslate2 model: choose a new OUT_DIR")


def convert_to_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    quantization: str | None = None,
    max_positions: int | None = None,
    trust_remote_code: bool = False,
) -> Path:
    """Convert a trained model folder to a CTranslate2 model folder with CTranslate2's `TransformersConverter`.

    `quantization`: one of QUANTIZATIONS (CTranslate2's weight types; None keeps float32). `max_positions`: rows of
    the position table, the longest source and output the converted model handles (default: the config's
    max_position_embeddings). OUT_DIR also gets the tokenizer, the source model's generation_config.json and
    EXPORT_INFO_FILE. An existing OUT_DIR is replaced only if it is empty or an earlier conversion.

    Staged (training/staging.py): everything is written to a hidden `.tmp-*` folder beside OUT_DIR and renamed to
    OUT_DIR when complete, so a failure on the way (a conversion error, a full disk: one line naming OUT_DIR and the
    space) leaves no half-written OUT_DIR, and an earlier conversion there as it was.
    """
    ctranslate2 = import_ctranslate2()
    from transformers import AutoTokenizer

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{model_dir} is not a model folder (it has no config.json)")
    if max_positions is not None and max_positions < 2:
        raise UsageError(f"max_positions={max_positions} must be at least 2")
    check_out_dir(out_dir)

    loader = register_vaswani_loader()
    converter = ctranslate2.converters.TransformersConverter(str(model_dir), trust_remote_code=trust_remote_code)
    model_config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    info = {
        "source_model": str(model_dir),
        "quantization": quantization or "float32",
        "max_positions": max_positions or model_config.get("max_position_embeddings", DEFAULT_MAX_POSITIONS),
        "ctranslate2_version": ctranslate2.__version__,
    }
    with staging.staged_folder(out_dir, replace=True) as staged:
        loader.max_positions = max_positions
        try:
            # force: the converter replaces the (empty) staging folder with its own; OUT_DIR is replaced at the end
            converter.convert(str(staged), quantization=quantization, force=True)
        finally:
            loader.max_positions = None
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
        tokenizer.save_pretrained(staged)
        if (model_dir / "generation_config.json").is_file():
            shutil.copyfile(model_dir / "generation_config.json", staged / "generation_config.json")
        (staged / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    logger.info("Converted %s to CTranslate2 (%s) in %s", model_dir, info["quantization"], out_dir)
    return out_dir


# ---- decoding -------------------------------------------------------------------------------------------------------


def _generation_defaults(model_dir: Path) -> dict[str, Any]:
    """The decoding settings of the source model's generation_config.json; the paper's (§6.1) when there is none."""
    from hf_vaswani import PAPER_DECODING  # imports torch: only once decoding is asked for

    names = ("num_beams", "length_penalty", "max_length_offset", "length_penalty_type")
    defaults = {name: PAPER_DECODING[name] for name in names}
    path = model_dir / "generation_config.json"
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        defaults = {key: saved.get(key, None) for key in defaults}
        defaults["num_beams"] = defaults["num_beams"] or 1
        defaults["length_penalty"] = 1.0 if defaults["length_penalty"] is None else defaults["length_penalty"]
    return defaults


class CTranslate2Translator:
    """A converted model and its tokenizer; `translate` has the conventions of `decoding.translate_texts`.

    The method keeps the name `translate`, the one users know from fairseq's hub interface (`model.translate(...)`)
    and OpenNMT-py's `Translator.translate`; on a translator object it cannot be mistaken for the module or the
    console script. `translate_tokens` is the same with token ids out.

    `device`: "cpu", "cuda" or "cuda:N"; `compute_type`: CTranslate2's ("default" runs the type the model was
    converted to); `intra_threads`: OpenMP threads (0: CTranslate2's default, OMP_NUM_THREADS when it is set).
    A training folder (config.json, no model.bin) is converted into a temporary folder first.
    """

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 0,
        trust_remote_code: bool = False,
    ):
        ctranslate2 = import_ctranslate2()
        from transformers import AutoTokenizer

        model_dir = Path(model_dir)
        self._temporary = None
        if not is_ctranslate2_model(model_dir):
            import tempfile

            self._temporary = tempfile.TemporaryDirectory(prefix="vaswani-ct2-")
            logger.info("%s is not a CTranslate2 model: converting it (float32) first", model_dir)
            model_dir = convert_to_ctranslate2(
                model_dir, Path(self._temporary.name) / "model", trust_remote_code=trust_remote_code
            )
        device_type, _, index = device.partition(":")
        self.translator = ctranslate2.Translator(
            str(model_dir),
            device=device_type,
            device_index=int(index or 0),
            compute_type=compute_type,
            intra_threads=intra_threads,
        )
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
        info_path = model_dir / EXPORT_INFO_FILE
        info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
        self.max_positions: int = info.get("max_positions", DEFAULT_MAX_POSITIONS)
        self.generation_defaults = _generation_defaults(model_dir)

    def translate_tokens(
        self,
        sentences: Sequence[str],
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_sentences: int = DEFAULT_MAX_SENTENCES,
        max_source_length: int | None = None,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        max_length_offset: int | None = None,
        max_new_tokens: int | None = None,
        num_return_sequences: int = 1,
        do_sample: bool = False,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
    ) -> list[list[list[int]]]:
        """For each sentence, its `num_return_sequences` outputs as token ids (no decoder start, no EOS), best
        first, in input order. Arguments as in `translate`."""
        defaults = self.generation_defaults
        num_beams = num_beams or (1 if do_sample else defaults["num_beams"])
        length_penalty = defaults["length_penalty"] if length_penalty is None else length_penalty
        if max_length_offset is None and max_new_tokens is None:
            max_length_offset = defaults["max_length_offset"]
        if num_return_sequences > num_beams and not do_sample:
            raise UsageError(
                f"num_return_sequences={num_return_sequences} needs at least as many beams, but num_beams is {num_beams}"
            )
        if not sentences:
            return []
        tokenizer = self.tokenizer
        max_input = min(max_source_length or self.max_positions, self.max_positions)
        blank_as_empty = [sentence if sentence.strip() else "" for sentence in sentences]
        encoded = tokenizer(blank_as_empty, truncation=True, max_length=max_input)["input_ids"]
        sources = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]
        lengths = [len(ids) for ids in encoded]
        options: dict[str, Any] = dict(
            beam_size=num_beams,
            num_hypotheses=num_return_sequences,
            length_penalty=length_penalty,
            min_decoding_length=0,
            max_input_length=max_input,
        )
        if do_sample:
            options.update(
                sampling_topk=top_k or 0, sampling_topp=top_p or 1.0, sampling_temperature=temperature or 1.0
            )
        # An empty source (only padding, BOS, EOS) translates to an empty output, as in decoding.translate_texts.
        nothing = {tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id} - {None}
        outputs: list = [[[] for _ in range(num_return_sequences)] if set(ids) <= nothing else None for ids in encoded]
        kept = [index for index, output in enumerate(outputs) if output is None]
        for kept_batch in length_sorted_batches([lengths[i] for i in kept], max_tokens, max_sentences):
            batch = [kept[position] for position in kept_batch]
            if max_new_tokens is not None:
                limit = max_new_tokens
            elif max_length_offset is not None:
                limit = max(lengths[i] for i in batch) + int(max_length_offset)  # per batch, not per source
            else:
                limit = self.max_positions
            if limit > self.max_positions:
                logger.warning("Outputs limited to %d tokens, the size of the position table", self.max_positions)
                limit = self.max_positions
            results = self.translator.translate_batch([sources[i] for i in batch], max_decoding_length=limit, **options)
            for index, result in zip(batch, results, strict=True):
                outputs[index] = [tokenizer.convert_tokens_to_ids(tokens) for tokens in result.hypotheses]
        return outputs

    def translate(self, sentences: Sequence[str], **kwargs) -> list[str] | list[list[str]]:
        """Translate `sentences` in length-sorted batches of at most `max_tokens` source tokens (at most
        `max_sentences` each), in input order, as `decoding.translate_texts` does with generate().

        Decoding options (num_beams, length_penalty, max_length_offset, max_new_tokens, num_return_sequences,
        do_sample, top_k, top_p, temperature) left as None take the source model's generation_config values;
        the module docstring says how each maps onto CTranslate2. With num_return_sequences > 1 each sentence gets
        a list of its outputs, best first.
        """
        nbest = self.translate_tokens(sentences, **kwargs)
        texts = [[self.tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs] for outputs in nbest]
        return texts if kwargs.get("num_return_sequences", 1) > 1 else [outputs[0] for outputs in texts]


def strip_special(ids: Sequence[int], decoder_start_token_id: int, eos_token_id: int, pad_token_id: int) -> list[int]:
    """A generate() output row as CTranslate2 returns it: without the decoder start token, EOS and padding."""
    ids = list(ids)
    if ids and ids[0] == decoder_start_token_id:
        ids = ids[1:]
    if eos_token_id in ids:
        ids = ids[: ids.index(eos_token_id)]
    return [token for token in ids if token != pad_token_id]


# Mean |log P(CTranslate2) - log P(generate())| per token of generate()'s greedy outputs above which the converted model
# is reported as far from the PyTorch model. int8 with kernels that accumulate in int32 (VNNI; Intel MKL) measured
# 0.016-0.019 nats on the tests' copy model and on the toy model (its weight rounding alone: 0.013); oneDNN's int8 GEMM
# without VNNI (AVX2 or AVX-512 CPUs that lack it, e.g. AMD EPYC before Zen 4) adds pairs of int8 products in
# saturating 16-bit lanes (vpmaddubsw) and measured 0.09 (toy model) to 0.40 (copy model) on the same sentences
# (README, "int8 on other CPUs"). A measured threshold, not a derived one: 0.05 lies between the two.
LOGPROB_WARNING_NATS = 0.05


@dataclass
class Agreement:
    """The converted model against generate() on sample sentences (greedy, the same limit)."""

    sentences: int
    identical: int  # sentences whose tokens equal generate()'s
    mean_logprob_difference: float  # mean |log P(ct2) - log P(torch)| over generate()'s tokens and EOS, in nats

    @property
    def all_identical(self) -> bool:
        return self.identical == self.sentences

    def line(self) -> str:
        share = 100.0 * self.identical / max(self.sentences, 1)
        return (
            f"tokens identical to generate() on {self.identical}/{self.sentences} sentences ({share:.0f}%), "
            f"mean log-prob difference {self.mean_logprob_difference:.3f} nats per token"
        )


def int8_kernel_description() -> str:
    """What selects CTranslate2's int8 matrix products here, in a few words: the CPU's VNNI flags (Linux
    /proc/cpuinfo), its vendor (MKL on Intel, oneDNN elsewhere) and the environment variables that force them."""
    import os

    flags: set[str] = set()
    vendor = "unknown vendor"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "vendor_id":
                vendor = value.strip()
    except OSError:
        pass
    vnni = sorted(flags & {"avx512_vnni", "avx_vnni"})
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "no avx2" if flags else "flags unknown"
    words = [f"{vendor} CPU, {isa}, {'with ' + '/'.join(vnni) if vnni else 'without VNNI'}"]
    names = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "CT2_USE_MKL", "CT2_FORCE_CPU_ISA")
    words += [f"{name}={os.environ[name]}" for name in names if os.environ.get(name)]
    return ", ".join(words)


def compare_with_generate(
    model_dir: str | Path,
    out_dir: str | Path,
    sentences: Sequence[str],
    max_new_tokens: int,
    trust_remote_code: bool = False,
    verbose: bool = True,
    intra_threads: int = 0,
) -> Agreement:
    """Decode `sentences` greedily with the converted model and with generate() (one batch, the same limit), and
    score generate()'s tokens with both (CTranslate2's score_batch; the PyTorch model's log-softmax). `verbose`
    prints each sentence's outputs and, where they differ, both token lists. `intra_threads`: CTranslate2's
    threads, as in `CTranslate2Translator` (the command passes its thread choice, training/threads.py)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    import hf_vaswani  # noqa: F401

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=trust_remote_code).eval()
    translator = CTranslate2Translator(out_dir, intra_threads=intra_threads)
    tokenizer = translator.tokenizer
    batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(
            **batch, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens, max_length_offset=None
        ).tolist()
    config = model.config
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    expected = [strip_special(row, config.decoder_start_token_id, eos_id, config.pad_token_id) for row in generated]
    actual = [nbest[0] for nbest in translator.translate_tokens(sentences, num_beams=1, max_new_tokens=max_new_tokens)]
    identical = 0
    for sentence, ours, theirs in zip(sentences, actual, expected, strict=True):
        identical += ours == theirs
        if verbose:
            text = tokenizer.decode(ours, skip_special_tokens=True)
            print(f"{'same' if ours == theirs else 'DIFFERENT'}: {sentence!r} -> {text!r}")
            if ours != theirs:
                print(f"    ctranslate2: {ours}\n    generate():  {theirs}")

    # Both engines score generate()'s tokens (and EOS) for each source, one sentence at a time (no padding).
    differences: list[float] = []
    for sentence, target in zip(sentences, expected, strict=True):
        source_ids = tokenizer(sentence)["input_ids"]
        scored = translator.translator.score_batch(
            [tokenizer.convert_ids_to_tokens(source_ids)], [tokenizer.convert_ids_to_tokens(target)]
        )[0]
        decoder_input = torch.tensor([[config.decoder_start_token_id, *target]])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([source_ids]), decoder_input_ids=decoder_input).logits[0]
        reference = torch.log_softmax(logits.float(), dim=-1)[torch.arange(len(target) + 1), [*target, eos_id]]
        differences += [abs(a - b) for a, b in zip(scored.log_probs, reference.tolist(), strict=True)]
    mean = sum(differences) / max(len(differences), 1)
    return Agreement(sentences=len(sentences), identical=identical, mean_logprob_difference=mean)


def check_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    sentences: Sequence[str],
    max_new_tokens: int,
    trust_remote_code: bool = False,
    intra_threads: int = 0,
) -> Agreement:
    """`--check`: print the converted model's and generate()'s greedy outputs for `sentences`, then one line of
    agreement (`Agreement.line`)."""
    agreement = compare_with_generate(
        model_dir, out_dir, sentences, max_new_tokens, trust_remote_code, intra_threads=intra_threads
    )
    print(f"--check: {agreement.line()}")
    return agreement


def agreement_warning(agreement: Agreement, quantization: str) -> str | None:
    """One line when the converted model is far from generate() on this CPU (LOGPROB_WARNING_NATS), naming the
    kernels in use and what keeps quality; None otherwise."""
    if agreement.mean_logprob_difference <= LOGPROB_WARNING_NATS:
        return None
    advice = (
        "translate it with `--dtype float32` (int8 weights, float32 products: no saturation) or export without "
        "--quantization; int8_float16 runs as int8_float32 on CPU and does not help"
        if quantization.startswith("int8")
        else "compare the two models' outputs"
    )
    return (
        f"{quantization} on this CPU ({int8_kernel_description()}) is far from generate(): "
        f"mean log-prob difference {agreement.mean_logprob_difference:.2f} nats > {LOGPROB_WARNING_NATS}; {advice}"
    )


def translate_ctranslate2(model_dir: str | Path, sentences: Sequence[str], **kwargs) -> list[str] | list[list[str]]:
    """One-call form: load `model_dir` (converted, or a training folder converted on the fly) and translate.
    Keyword arguments go to `CTranslate2Translator.translate` (decoding) or its constructor (device, compute_type,
    intra_threads, trust_remote_code)."""
    init_names = ("device", "compute_type", "intra_threads", "trust_remote_code")
    init_kwargs = {name: kwargs.pop(name) for name in init_names if name in kwargs}
    return CTranslate2Translator(model_dir, **init_kwargs).translate(sentences, **kwargs)
