"""Translate sentences with a trained model: the paper's decoding (§6.1) by default.

    vaswani-translate MODEL_DIR "A mouse sits ." "The dog runs ."
    vaswani-translate MODEL_DIR --input test.en[.gz] --output test.hyp
    cat test.en | vaswani-translate MODEL_DIR --greedy
    vaswani-translate MODEL_DIR "A mouse sits ." --attention-plot attention.png --head all

(`python -m training.translate` from a checkout is the same command.)

Input: the sentences given as arguments, else the lines of --input (UTF-8, `.gz` read as gzip), else standard
input. Output: one line per input line, in input order, on standard output or in --output; an empty input line
gives an empty output line, so line N of the output always translates line N of the input. With
--num_return_sequences N > 1 each line holds the N best outputs (or N samples) separated by tabs, best first.
Tabs and line breaks inside a translation are written as spaces, so that this layout holds.

Decoding defaults come from the model's generation_config.json; for models trained here that is the paper's beam
search: 4 beams, GNMT length penalty alpha = 0.6, outputs at most source length + 50 tokens. Batches are sorted by
length and bounded by --max_tokens source tokens (`training.serving.decoding.translate_texts`). Sources longer than
--max_source_length (default: the tokenizer's model_max_length) are truncated to it, with a warning.

--engine ctranslate2 decodes with CTranslate2 instead (MODEL_DIR written by `vaswani-export --format ctranslate2`):
the same input, output and options, mapped onto CTranslate2's; what of the paper's decoding it cannot express (the
GNMT formula, a per-sentence length limit, early_stopping="never") is listed in training/serving/ctranslate2_export.py.

--attention-plot PNG translates the first non-empty input sentence once more, runs one teacher-forced forward pass
over that translation with eager attention and draws its encoder-decoder attention (training/serving/attention_plot.py).

Arguments, the model folder and the input are checked before torch and transformers are imported, so mistakes
fail in a moment, as one line (training/cli.py). The libraries keep to warnings; --verbose brings back their INFO
logs and progress bars (training/console.py).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import re
import sys
import types
from pathlib import Path

from .. import staging
from ..console import quiet_libraries, setup_logging
from ..data import textfiles
from ..threads import choose_threads, use_threads
from ..usage import (
    ArgumentParser,
    UsageError,
    check_loaded_model,
    check_model_dir,
    check_output_file,
    finite_float,
    float_in,
    non_negative_int,
    positive_float,
    positive_int,
    require_extra,
)
from .decoding import DEFAULT_MAX_TOKENS
from .loading import check_device, weights_shape_problem

logger = logging.getLogger(__name__)

PROGRESS_MIN_LINES = 10  # a progress bar for files and standard input longer than this
DTYPES = ("auto", "float32", "float16", "bfloat16")
# Everything str.splitlines() breaks at, and the tab: written as a space so one output line stays one line.
_LAYOUT_CHARACTERS = re.compile("[\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


# ---- arguments ------------------------------------------------------------------------------------------------------


def _head(value: str) -> int | str | None:
    if value == "all":
        return "all"
    if value in ("mean", "average"):
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a head index, 'mean' or 'all'") from None


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="vaswani-translate",
        description=__doc__.split("\n\n")[0],
        epilog="Decoding options left out take their value from the model's generation_config.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL_DIR", help="a folder written by training.train, or a Hub model id")
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate (else --input/stdin)")

    io = parser.add_argument_group("input and output")
    io.add_argument("--input", metavar="FILE", help="one sentence per line, UTF-8; .gz is decompressed; - is stdin")
    io.add_argument("--output", metavar="FILE", help="write the translations here (.gz compresses) instead of stdout")
    io.add_argument("--quiet", action="store_true", help="no progress bar")
    io.add_argument(
        "--verbose", action="store_true", help="the libraries' INFO logs and progress bars too (else warnings only)"
    )

    decoding = parser.add_argument_group("decoding (default: the model's generation_config)")
    decoding.add_argument("--num_beams", type=positive_int, help="beam size (paper: 4)")
    decoding.add_argument(
        "--length_penalty", type=finite_float, metavar="ALPHA", help="GNMT length penalty (paper: 0.6)"
    )
    modes = decoding.add_mutually_exclusive_group()
    modes.add_argument("--greedy", action="store_true", help="greedy search (num_beams=1)")
    modes.add_argument("--sample", action="store_true", help="sample instead of searching (num_beams=1 by default)")
    decoding.add_argument("--temperature", type=positive_float, help="softmax temperature for --sample (above 0)")
    decoding.add_argument(
        "--top_k", type=non_negative_int, help="sample from the k most likely tokens (--sample; 0: no top-k limit)"
    )
    decoding.add_argument(
        "--top_p", type=float_in(0, 1, low_open=True), help="nucleus sampling threshold, in (0, 1] (--sample)"
    )
    decoding.add_argument("--seed", type=non_negative_int, help="random seed, for reproducible --sample outputs")
    decoding.add_argument(
        "--max_length_offset",
        type=non_negative_int,
        metavar="K",
        help="outputs are at most source length + K tokens (paper: 50)",
    )
    decoding.add_argument(
        "--num_return_sequences",
        type=positive_int,
        default=1,
        metavar="N",
        help="print the N best beams (or N samples) of each sentence on its line, separated by tabs",
    )

    hardware = parser.add_argument_group("batching and hardware")
    hardware.add_argument("--max_tokens", type=positive_int, default=DEFAULT_MAX_TOKENS, help="source tokens per batch")
    hardware.add_argument("--max_source_length", type=positive_int, help="truncate sources to this many tokens")
    hardware.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    hardware.add_argument("--dtype", default="auto", choices=DTYPES, help="auto: the dtype the weights were saved in")
    hardware.add_argument(
        "--engine",
        choices=("torch", "ctranslate2"),
        default="torch",
        help="ctranslate2: MODEL_DIR written by `vaswani-export --format ctranslate2` (a training folder is converted "
        "first); the decoding options map onto CTranslate2's (training/serving/ctranslate2_export.py)",
    )
    hardware.add_argument(
        "--trust_remote_code", action="store_true", help="allow the model folder's/Hub repository's own code to run"
    )
    hardware.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads (default: the CPUs free to this command, training/threads.py; OMP_NUM_THREADS when set)",
    )

    plot = parser.add_argument_group("attention plot")
    plot.add_argument(
        "--attention-plot",
        "--attention_plot",
        dest="attention_plot",
        metavar="PNG",
        help="draw the encoder-decoder attention of the first sentence's translation to this image",
    )
    plot.add_argument("--layer", type=int, help="decoder layer, 0-based, negative from the last (default: the last)")
    plot.add_argument("--head", type=_head, help="head index, 'mean' (default: mean over heads) or 'all' (a grid)")
    return parser


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    if args.sentences and args.input is not None:
        parser.error("give sentences as arguments or --input FILE, not both")
    if args.greedy and args.num_beams not in (None, 1):
        parser.error(f"--greedy means num_beams=1; it contradicts --num_beams {args.num_beams}")
    for name in ("temperature", "top_k", "top_p"):
        if getattr(args, name) is not None and not args.sample:
            parser.error(f"--{name} only applies to sampling: add --sample")
    if (args.layer is not None or args.head is not None) and args.attention_plot is None:
        parser.error("--layer and --head choose what --attention-plot draws: add --attention-plot FILE")
    return args


def check_files(args: argparse.Namespace) -> None:
    """The model folder, the output files and the extras they need, before anything is loaded or translated."""
    if args.engine == "ctranslate2":
        require_extra(["ctranslate2"], "ctranslate2", "--engine ctranslate2")
        if args.attention_plot is not None:
            raise UsageError("--attention-plot needs the PyTorch model: leave out --engine ctranslate2")
    if not (args.engine == "ctranslate2" and (Path(args.model) / "model.bin").is_file()):  # else a CTranslate2 folder
        check_model_dir(args.model, "MODEL_DIR", needs_tokenizer=True)
    check_output_file(args.output, "--output")
    if args.attention_plot is not None:
        check_output_file(args.attention_plot, "--attention-plot")
        require_extra(["matplotlib"], "plot", "--attention-plot")
    defaults = saved_generation_defaults(args.model)
    if defaults is not None:
        generation_kwargs(args, defaults)  # --num_return_sequences against the beams: answered before torch


def saved_generation_defaults(model: str) -> types.SimpleNamespace | None:
    """The num_beams a local model folder decodes with by default (its generation_config.json, read as JSON; 1
    without one, as transformers does), for the checks of generation_kwargs before the model loads. None for a Hub
    id or a CTranslate2 folder (checked once loaded)."""
    folder = Path(model).expanduser()
    if not (folder / "config.json").is_file() or (folder / "model.bin").is_file():
        return None
    try:
        values = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        values = {}
    except (OSError, ValueError):
        return None  # from_pretrained names the problem
    num_beams = values.get("num_beams") if isinstance(values, dict) else None
    return types.SimpleNamespace(num_beams=num_beams if isinstance(num_beams, int) else 1)


# ---- input and output -----------------------------------------------------------------------------------------------


def decode_lines(data: bytes, name: str) -> list[str]:
    """The lines of `data`, stripped of surrounding whitespace; bytes that are not UTF-8 raise a UsageError naming
    `name` and the line (see textfiles.decode_lines)."""
    return [text.strip() for _, text in textfiles.decode_lines(io.BytesIO(data), name)]


def read_sentences(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The input sentences, and whether they came from a file or stdin (which gets a progress bar)."""
    if args.sentences:
        return [sentence.strip() for sentence in args.sentences], False
    if args.input is not None and args.input != "-":
        path = Path(args.input)
        if not path.is_file():
            raise UsageError(f"--input {path}: no such file")
        try:
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError) as error:
            raise UsageError(f"--input {path}: cannot read it as gzip ({error})") from None
        return decode_lines(data, str(path)), True
    if sys.stdin.isatty():
        print("Reading sentences from standard input, one per line (end with Ctrl-D)", file=sys.stderr)
    return decode_lines(sys.stdin.buffer.read(), "<stdin>"), True


def output_line(translation: str) -> str:
    """A translation as one line of the output: tabs and line breaks inside it become spaces."""
    return _LAYOUT_CHARACTERS.sub(" ", translation)


def write_translations(lines: list[str], output: str | None) -> None:
    text = "".join(line + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = gzip.compress(text.encode("utf-8")) if output.endswith(".gz") else text.encode("utf-8")
    # Written beside it under a hidden name and renamed: a full disk leaves no cut file that looks like a result.
    with staging.staged_file(output) as staged:
        staged.write_bytes(data)


# ---- model and decoding ---------------------------------------------------------------------------------------------


def load_model_and_tokenizer(args: argparse.Namespace):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        import hf_vaswani  # noqa: F401  (registers VaswaniConfig/VaswaniForConditionalGeneration with the Auto classes)
    except ImportError:
        pass  # a folder with its own code still loads with --trust_remote_code

    check_device(args.device)  # before minutes of loading: a GPU asked for where there is none
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = args.dtype if args.dtype == "auto" else getattr(torch, args.dtype)
    problem = weights_shape_problem(args.model)  # weights of another model size: transformers' table, then a traceback
    if problem is not None:
        raise UsageError(problem)
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        model = AutoModelForSeq2SeqLM.from_pretrained(args.model, dtype=dtype, trust_remote_code=args.trust_remote_code)
    except OSError as error:  # what from_pretrained raises for a folder or Hub id it cannot load
        raise UsageError(f"MODEL_DIR {args.model}: cannot be loaded ({error})") from None
    check_loaded_model(model, tokenizer, args.model)  # NaN weights, another model's tokenizer: refused, not garbage
    return model.to(device).eval(), tokenizer


def generation_kwargs(args: argparse.Namespace, generation_config) -> dict:
    """generate() arguments for the options given; everything else stays as the generation config says."""
    kwargs = {}
    if args.greedy:
        kwargs["num_beams"] = 1
    elif args.num_beams is not None:
        kwargs["num_beams"] = args.num_beams
    if args.sample:
        kwargs["do_sample"] = True
        kwargs.setdefault("num_beams", 1)  # plain sampling; --num_beams > 1 with --sample is beam sampling
        for name in ("temperature", "top_k", "top_p"):
            if getattr(args, name) is not None:
                kwargs[name] = getattr(args, name)
    if args.length_penalty is not None:
        kwargs["length_penalty"] = args.length_penalty
    if args.max_length_offset is not None:
        kwargs["max_length_offset"] = args.max_length_offset
    if args.num_return_sequences > 1:
        num_beams = kwargs.get("num_beams", generation_config.num_beams or 1)
        if not args.sample and args.num_return_sequences > num_beams:
            raise UsageError(
                f"--num_return_sequences {args.num_return_sequences} needs at least as many beams, but num_beams is "
                f"{num_beams}: add --num_beams {args.num_return_sequences} (or --sample)"
            )
        kwargs["num_return_sequences"] = args.num_return_sequences
    return kwargs


def _decoder_shape(config) -> tuple[int | None, int | None]:
    """(decoder layers, decoder heads) under the names common seq2seq configs use, for an early --layer check."""
    layers = next((getattr(config, n) for n in ("decoder_layers", "num_decoder_layers") if hasattr(config, n)), None)
    heads = next((getattr(config, n) for n in ("decoder_attention_heads", "num_heads") if hasattr(config, n)), None)
    return layers, heads


def _main_ctranslate2(args: argparse.Namespace, sentences: list[str]) -> int:
    """`--engine ctranslate2`: the same options, input and output, decoded by CTranslate2."""
    import ctranslate2
    import transformers  # noqa: F401  (the tokenizer's library: quieted, or not, before it loads anything)

    from .ctranslate2_export import CTranslate2Translator

    quiet_libraries(args.verbose)

    device = args.device
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    compute_type = "default" if args.dtype == "auto" else args.dtype
    threads = choose_threads(args.threads)  # CTranslate2's OpenMP threads, counted as torch's are
    if threads.line():
        logger.info(threads.line())
    translator = CTranslate2Translator(
        args.model,
        device=device,
        compute_type=compute_type,
        intra_threads=threads.threads,
        trust_remote_code=args.trust_remote_code,
    )
    defaults = types.SimpleNamespace(num_beams=translator.generation_defaults["num_beams"])
    kwargs = generation_kwargs(args, defaults)
    if args.seed is not None:
        ctranslate2.set_random_seed(args.seed)
    indices = [i for i, sentence in enumerate(sentences) if sentence]
    translations = translator.translate(
        [sentences[i] for i in indices], max_tokens=args.max_tokens, max_source_length=args.max_source_length, **kwargs
    )
    lines = [""] * len(sentences)
    for index, translation in zip(indices, translations, strict=True):
        lines[index] = (
            "\t".join(map(output_line, translation)) if isinstance(translation, list) else output_line(translation)
        )
    write_translations(lines, args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Translate as the command line says; a user error raises UsageError (vaswani-translate prints it as one
    line and exits with status 2)."""
    args = parse_arguments(argv)
    check_files(args)
    # training/console.py: the commands' one log format, on stderr (stdout is the translations); the libraries'
    # INFO lines only with --verbose
    setup_logging(args.verbose)
    try:
        sentences, from_stream = read_sentences(args)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.attention_plot is not None and not any(sentences):
        raise UsageError("--attention-plot needs a non-empty input sentence")
    if args.engine == "ctranslate2":
        return _main_ctranslate2(args, sentences)

    import torch
    import transformers

    from .decoding import translate_texts

    quiet_libraries(args.verbose)  # imported only now: no "Loading weights" bar, no INFO lines (unless --verbose)
    use_threads(args.threads, torch)
    model, tokenizer = load_model_and_tokenizer(args)
    try:
        kwargs = generation_kwargs(args, model.generation_config)
        if args.attention_plot is not None:
            from .attention_plot import check_layer_and_head

            layers, heads = _decoder_shape(model.config)
            if layers is not None and heads is not None:
                check_layer_and_head(layers, heads, -1 if args.layer is None else args.layer, args.head)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from None

    # Empty lines are not sent to the model: they come back as empty lines.
    indices = [i for i, sentence in enumerate(sentences) if sentence]
    if args.seed is not None:
        transformers.set_seed(args.seed)
    translations = translate_texts(
        model,
        tokenizer,
        [sentences[i] for i in indices],
        max_tokens=args.max_tokens,
        max_source_length=args.max_source_length,
        progress=from_stream and not args.quiet and len(indices) > PROGRESS_MIN_LINES,
        **kwargs,
    )
    lines = [""] * len(sentences)
    for index, translation in zip(indices, translations, strict=True):
        # the n best of one source share its line, tab-separated, so line N of the output is line N of the input
        lines[index] = (
            "\t".join(map(output_line, translation)) if isinstance(translation, list) else output_line(translation)
        )
    write_translations(lines, args.output)

    if args.attention_plot is not None:
        from .attention_plot import cross_attention, plot_attention

        first = indices[0]
        if args.seed is not None:
            transformers.set_seed(args.seed)  # a sampled plot is reproducible too (not the same sample as line 1)
        weights, source_tokens, target_tokens = cross_attention(
            model, tokenizer, sentences[first], max_source_length=args.max_source_length, **kwargs
        )
        layer = -1 if args.layer is None else args.layer
        try:
            path = plot_attention(weights, source_tokens, target_tokens, args.attention_plot, layer, args.head)
        except ValueError as error:
            raise UsageError(str(error)) from None
        logger.info("Attention of input line %d's translation written to %s", first + 1, path)
    return 0
