#!/usr/bin/env python
"""hf_vaswani against `transformers.MarianMTModel`: the same architecture, the same weights, one run, one machine.

    python benchmarks/compare_marian.py --threads 1        # full run, about 7 minutes on one shared CPU core
    python benchmarks/compare_marian.py --quick            # smoke run, about 1.5 minutes (after the first run)
    python benchmarks/compare_marian.py --device cuda      # bf16 with sdpa on a GPU
    python benchmarks/compare_marian.py --profile DIR      # torch.profiler top ops of both models instead

A benchmark, not a test: it prints measured numbers and writes them to JSON (`--output`, by default
`benchmarks/results/compare_marian-<device>.json`); it asserts nothing about time. The one hard check is
correctness: both models must produce the same logits from the same weights before anything is timed.

The two models:
- ours: `VaswaniForConditionalGeneration`, the "small" preset (d_model 256, 3+3 layers, 4 heads, ffn 1024, post-LN,
  relu, scaled and shared embeddings, tied softmax), sdpa attention;
- Marian: `MarianMTModel` configured to the same architecture and vocabulary, holding OUR weights: q/k/v/out,
  fc1/fc2, layer norms, the shared embedding (= model.shared = lm_head), `final_logits_bias` zero. Two differences
  are adjusted so that both compute the same function: Marian's sinusoid table is laid out sin-half/cos-half while
  ours interleaves, so our table is copied into Marian's `embed_positions`; Marian's LayerNorms are built with
  eps 1e-5 (not configurable), so their `eps` is set to our `layer_norm_eps`.

The weights are briefly trained first (our pipeline on Multi30K; cached under `--cache-dir`) so that decoding is
not degenerate; `--model-dir` uses a trained model folder instead.

Measured, each as the median of `--repeats` runs with ours and Marian interleaved (the order alternates):
1. parity: max |logits_ours - logits_marian| on a real batch (must be < 1e-4, else the script stops);
2. training step (forward + backward + Adam step) on the SAME token-count batches (`TokenBatchSampler`), the same
   objective for both, label-smoothed cross-entropy (epsilon 0.1): ours fused in the model with `loss_only=True`,
   Marian's logits through the same fused `F.cross_entropy(label_smoothing=0.1)`;
3. pipeline: `VaswaniTrainer` (token batches, fused label smoothing) against a stock `Seq2SeqTrainer` running
   Marian with 64-sentence batches and `label_smoothing_factor=0.1`, both on the whole training set for the
   optimizer steps that make about `--pipeline-tokens` real tokens (counted in the batches they trained on);
4. generation over test_2016_flickr (the first `--greedy-sentences` / `--beam-sentences`): greedy and beam 4 with
   identical Hugging Face settings on both (`length_penalty=1.0`, no GNMT penalty, the same `max_new_tokens`), on
   the same batches of 64 in corpus order, and ours also through `training.decoding.translate` (length-sorted
   batches of 64, the pipeline); sentences/s, generated tokens/s, and whether both produce identical tokens;
5. peak memory of each, in a fresh subprocess per measurement (CPU: the peak resident set above the resident set
   before the work, via /proc/self/status VmHWM; CUDA: torch.cuda.max_memory_allocated);
   (timings are wall-clock, with process CPU seconds alongside: steadier on a shared machine)
6. model FLOPs utilisation: FLOPs counted explicitly (2mnk per matmul: q/k/v/out projections, attention scores
   and weighted sums, feed-forward, output layer; x3 for training; training counts real tokens only, padding
   excluded; generation counts every row and step that generate() runs) over the matmul peak of the machine
   measured in the same run with the same threads (square `torch.mm`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import hashlib
import io
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    DataCollatorForSeq2Seq,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

import hf_vaswani  # noqa: E402
from hf_vaswani import (  # noqa: E402
    VaswaniConfig,
    VaswaniForConditionalGeneration,
    preset_config,
    sinusoidal_position_encoding,
)
from hf_vaswani_training.arguments import VaswaniTrainingArguments  # noqa: E402
from hf_vaswani_training.batching import TokenBatchSampler  # noqa: E402
from hf_vaswani_training.data import load_parallel_data  # noqa: E402
from hf_vaswani_training.tokenizer import train_joint_bpe  # noqa: E402
from hf_vaswani_training.trainer import VaswaniTrainer  # noqa: E402

logger = logging.getLogger("compare_marian")

DEFAULT_DATA_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
PARITY_TOLERANCE = 1e-4
LABEL_SMOOTHING = 0.1
TARGETS = {  # ours / Marian, from the issue
    "training_step_tokens_per_s": 1.3,
    "pipeline_tokens_per_s": 1.5,
    "greedy_sentences_per_s": 1.5,
    "beam4_sentences_per_s": 1.5,
}


# ---- arguments ------------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="~1 minute smoke run: small sizes, training memory only")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument(
        "--dtype", default=None, choices=["float32", "bfloat16"], help="default: bf16 on CUDA, fp32 on CPU"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement; the median is reported")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (default: benchmarks/results/...)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="Multi30K folder (env MULTI30K_DIR)")
    parser.add_argument("--cache-dir", type=Path, default=RESULTS_DIR / "cache", help="tokenizer, ids, warm weights")
    parser.add_argument("--model-dir", type=Path, default=None, help="a trained hf_vaswani folder to use as weights")
    parser.add_argument("--vocab-size", type=int, default=8000, help="joint BPE size")
    parser.add_argument("--preset", default="small", help="hf_vaswani preset for the architecture")
    parser.add_argument("--warm-steps", type=int, default=None, help="steps of warm-up training (default 400)")
    parser.add_argument("--max-tokens", type=int, default=None, help="TokenBatchSampler max_tokens (default 4096)")
    parser.add_argument("--train-batches", type=int, default=None, help="batches per timed training pass (default 3)")
    parser.add_argument(
        "--pipeline-tokens", type=int, default=None, help="real tokens per pipeline run (default 40000)"
    )
    parser.add_argument("--greedy-sentences", type=int, default=None, help="test sentences, greedy (default 512)")
    parser.add_argument("--beam-sentences", type=int, default=None, help="test sentences, beam 4 (default 192)")
    parser.add_argument("--gen-batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="the same generation limit for both models")
    parser.add_argument(
        "--skip", default="", help="comma-separated sections to skip: training,pipeline,greedy,beam,memory,mfu"
    )
    parser.add_argument("--profile", type=Path, default=None, help="write torch.profiler tables here and exit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: one memory measurement
    args = parser.parse_args(argv)

    quick = args.quick
    defaults = {
        "warm_steps": (400, 400),
        "max_tokens": (4096, 1024),
        "train_batches": (3, 1),
        "pipeline_tokens": (40000, 8000),
        "greedy_sentences": (512, 64),
        "beam_sentences": (192, 32),
    }
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = torch.device(args.device)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.type == "cuda" else "float32"
    args.torch_dtype = getattr(torch, args.dtype)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if quick:
        args.skip |= {"memory-generation"}
    if args.output is None:
        args.output = RESULTS_DIR / f"compare_marian-{args.device.type}{'-quick' if quick else ''}.json"
    return args


# ---- helpers --------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def median(values):
    return statistics.median(values) if values else None


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def autocast(args):
    """bf16 autocast for training on an accelerator (fp32 master weights, as Trainer's --bf16 does)."""
    enabled = args.torch_dtype == torch.bfloat16
    return torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=enabled)


# ---- data -----------------------------------------------------------------------------------------------------------


def load_corpus(args):
    """Multi30K de->en, an 8k joint BPE (trained once, cached) and the tokenized training pairs (cached)."""
    raw = load_parallel_data(source_lang="de", target_lang="en", data_dir=args.data_dir)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = args.cache_dir / f"tokenizer-bpe{args.vocab_size}"
    if (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    else:
        logger.info(
            "training a joint BPE of %d tokens on Multi30K train (cached in %s)", args.vocab_size, tokenizer_dir
        )
        pairs = raw["train"]["translation"]
        tokenizer = train_joint_bpe((s for p in pairs for s in (p["de"], p["en"])), vocab_size=args.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)
    ids_file = args.cache_dir / f"train-ids-bpe{args.vocab_size}.json"
    if ids_file.is_file():
        ids = json.loads(ids_file.read_text())
    else:
        pairs = raw["train"]["translation"]
        ids = {
            "source": tokenizer([p["de"] for p in pairs])["input_ids"],
            "target": tokenizer(text_target=[p["en"] for p in pairs])["input_ids"],
        }
        ids_file.write_text(json.dumps(ids))
    test = raw["test"]["translation"]
    return tokenizer, ids, [p["de"] for p in test], [p["en"] for p in test]


def features(ids, indices):
    return [
        {"input_ids": ids["source"][i], "attention_mask": [1] * len(ids["source"][i]), "labels": ids["target"][i]}
        for i in indices
    ]


def token_batches(ids, max_tokens: int, count: int | None, seed: int) -> list[list[int]]:
    """The first `count` (None: all) batches of a shuffled TokenBatchSampler epoch over all training pairs."""
    sampler = TokenBatchSampler(
        source_lengths=[len(s) for s in ids["source"]],
        target_lengths=[len(t) for t in ids["target"]],
        max_tokens=max_tokens,
        shuffle=True,
        seed=seed,
    )
    return sampler.all_batches()[:count]


# ---- models ---------------------------------------------------------------------------------------------------------


def vaswani_config(args, tokenizer) -> VaswaniConfig:
    return preset_config(args.preset, tokenizer)


def marian_config(config: VaswaniConfig) -> MarianConfig:
    """MarianConfig with our architecture. Marian has no pre-LN and no layer_norm_eps: see `marian_from_ours`."""
    if config.normalize_before:
        raise ValueError("MarianMTModel is post-LN only; compare a post-LN preset")
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation_function=config.activation_function,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        forced_eos_token_id=None,
        decoder_start_token_id=config.decoder_start_token_id,  # Marian's default is the pad id; ours is <s> = 0
    )


def attention_weights(attention) -> dict[str, torch.Tensor]:
    """q/k/v/out weights and biases of one of our attention modules, whichever projection layout it uses."""
    d = attention.embed_dim
    out = {"out_proj.weight": attention.out_proj.weight, "out_proj.bias": attention.out_proj.bias}
    if hasattr(attention, "q_proj"):
        for name in ("q_proj", "k_proj", "v_proj"):
            out[f"{name}.weight"] = getattr(attention, name).weight
            out[f"{name}.bias"] = getattr(attention, name).bias
        return out
    # Fused layout: in_proj = [W_Q; W_K; W_V] stacked along the output dimension, as nn.MultiheadAttention.
    for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
        out[f"{name}.weight"] = attention.in_proj.weight[index * d : (index + 1) * d]
        out[f"{name}.bias"] = attention.in_proj.bias[index * d : (index + 1) * d]
    return out


@torch.no_grad()
def marian_from_ours(ours: VaswaniForConditionalGeneration, attn_implementation: str = "sdpa") -> MarianMTModel:
    """A MarianMTModel computing the same function as `ours`, with copies of its weights."""
    config = ours.config
    marian = MarianMTModel._from_config(marian_config(config), attn_implementation=attn_implementation)
    marian.to(ours.device)
    target = marian.model
    target.shared.weight.copy_(ours.model.shared.weight)
    if not (target.encoder.embed_tokens.weight is target.shared.weight is marian.lm_head.weight):
        raise RuntimeError("MarianMTModel did not tie its embeddings and softmax weights")
    marian.final_logits_bias.zero_()
    # Marian's table is sin-half/cos-half; ours interleaves (§3.5 as written). Give Marian ours.
    table = sinusoidal_position_encoding(torch.arange(config.max_position_embeddings), config.d_model)
    target.encoder.embed_positions.weight.copy_(table)
    target.decoder.embed_positions.weight.copy_(table)

    def copy_attention(dst, src):
        for name, tensor in attention_weights(src).items():
            dst.get_parameter(name).copy_(tensor)

    def copy_norm(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)
        dst.eps = src.eps  # Marian hard-codes nn.LayerNorm's 1e-5

    for dst, src in zip(target.encoder.layers, ours.model.encoder.layers, strict=True):
        copy_attention(dst.self_attn, src.self_attn)
        copy_norm(dst.self_attn_layer_norm, src.self_attn_layer_norm)
        dst.fc1.load_state_dict(src.feed_forward.fc1.state_dict())
        dst.fc2.load_state_dict(src.feed_forward.fc2.state_dict())
        copy_norm(dst.final_layer_norm, src.final_layer_norm)
    for dst, src in zip(target.decoder.layers, ours.model.decoder.layers, strict=True):
        copy_attention(dst.self_attn, src.self_attn)
        copy_norm(dst.self_attn_layer_norm, src.self_attn_layer_norm)
        copy_attention(dst.encoder_attn, src.encoder_attn)
        copy_norm(dst.encoder_attn_layer_norm, src.encoder_attn_layer_norm)
        dst.fc1.load_state_dict(src.feed_forward.fc1.state_dict())
        dst.fc2.load_state_dict(src.feed_forward.fc2.state_dict())
        copy_norm(dst.final_layer_norm, src.final_layer_norm)
    marian.train(ours.training)
    return marian


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def warm_model(args, tokenizer, ids) -> tuple[VaswaniForConditionalGeneration, str]:
    """Trained weights: --model-dir, or a few hundred steps of our own pipeline on Multi30K (cached)."""
    if args.model_dir is not None:
        model = VaswaniForConditionalGeneration.from_pretrained(args.model_dir, attn_implementation="sdpa")
        return model, f"loaded from {args.model_dir}"
    config = vaswani_config(args, tokenizer)
    probe = VaswaniForConditionalGeneration(config)
    # The cache is keyed on everything that makes the weights, including the parameter layout of the model file.
    key = hashlib.sha256(
        json.dumps(
            [config.to_diff_dict(), sorted(probe.state_dict()), args.warm_steps, args.seed], sort_keys=True, default=str
        ).encode()
    ).hexdigest()[:12]
    del probe
    folder = args.cache_dir / f"warm-{args.preset}-{args.warm_steps}steps-{key}"
    if (folder / "config.json").is_file():
        return (
            VaswaniForConditionalGeneration.from_pretrained(folder, attn_implementation="sdpa"),
            f"{args.warm_steps} warm-up steps (cached {folder.name})",
        )
    logger.info("warm-up training: %d steps of our pipeline on Multi30K (once; cached in %s)", args.warm_steps, folder)
    torch.manual_seed(args.seed)
    model = VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")
    dataset = _dataset(ids, range(len(ids["source"])))
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = _training_args(
            VaswaniTrainingArguments,
            args,
            output_dir,
            max_steps=args.warm_steps,
            max_tokens=1024,
            learning_rate=1.5e-3,
            lr_scheduler_type="inverse_sqrt",
            warmup_steps=min(100, args.warm_steps // 4),
        )
        trainer = VaswaniTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            processing_class=tokenizer,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
            max_tokens=training_args.max_tokens,
        )
        started = time.perf_counter()
        trainer.train()
        logger.info("warm-up training took %.0f s", time.perf_counter() - started)
    model = trainer.model.to("cpu")
    model.save_pretrained(folder)
    return model, f"{args.warm_steps} warm-up steps (trained now, {time.perf_counter() - started:.0f} s)"


def _dataset(ids, indices):
    import datasets

    return datasets.Dataset.from_list(features(ids, indices))


def _training_args(cls, args, output_dir, **overrides):
    values = dict(
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=args.device.type == "cpu",
        bf16=args.torch_dtype == torch.bfloat16,
        seed=args.seed,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        weight_decay=0.0,
        max_grad_norm=0.0,
        label_smoothing_factor=LABEL_SMOOTHING,
        predict_with_generate=False,
    )
    if cls is VaswaniTrainingArguments:
        values["average_last_n"] = 0
    values.update(overrides)
    return cls(**values)


# ---- 1. parity ------------------------------------------------------------------------------------------------------


@torch.no_grad()
def parity(ours, marian, batch) -> dict:
    ours.eval()
    marian.eval()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}
    logits_ours = ours(**inputs).logits.float()
    logits_marian = marian(**inputs).logits.float()
    # Every decoder position: pad positions of the target are computed the same way by both (no decoder mask).
    difference = (logits_ours - logits_marian).abs().max().item()
    return {"max_abs_logit_difference": difference, "tolerance": PARITY_TOLERANCE, "shape": list(logits_ours.shape)}


# ---- FLOP counting --------------------------------------------------------------------------------------------------


def training_flops(config, batch) -> float:
    """Forward+backward FLOPs (3 x forward) of one training batch, counting real (non-pad) tokens only."""
    d, heads_dim = config.d_model, config.d_model
    fe, fd, vocab = config.encoder_ffn_dim, config.decoder_ffn_dim, config.vocab_size
    source = batch["attention_mask"].sum(-1).double()  # (B,)
    target = (batch["labels"] != -100).sum(-1).double()  # (B,)
    encoder = config.encoder_layers * (
        source * (4 * 2 * d * d + 2 * 2 * d * fe)  # q/k/v/out projections, fc1 + fc2
        + 2 * 2 * source * source * heads_dim  # QK^T and (softmax)V over real keys
    )
    decoder = config.decoder_layers * (
        target * (4 * 2 * d * d + 2 * 2 * d * d + 2 * 2 * d * fd)  # self q/k/v/out, cross q/out, fc1 + fc2
        + source * 2 * 2 * d * d  # cross-attention keys and values of the source
        + 2 * 2 * heads_dim * target * (target + 1) / 2  # causal self-attention: query t sees t keys
        + 2 * 2 * target * source * heads_dim  # cross-attention
    )
    output = target * 2 * d * vocab
    return 3.0 * float((encoder + decoder + output).sum())


class GenerationFlopCounter:
    """Counts the FLOPs generate() executes (every row and step, padding included), from forward hooks."""

    def __init__(self, model):
        self.model = model
        self.config = model.config
        self.flops = 0.0
        self.decoder_row_steps = 0  # rows x new positions the decoder computed, finished rows included
        self.handles = []

    def __enter__(self):
        self.handles.append(self.model.get_encoder().register_forward_pre_hook(self._encoder, with_kwargs=True))
        self.handles.append(self.model.get_decoder().register_forward_pre_hook(self._decoder, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def _encoder(self, module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        rows, length = input_ids.shape
        c, d = self.config, self.config.d_model
        self.flops += (
            c.encoder_layers * rows * (length * (8 * d * d + 4 * d * c.encoder_ffn_dim) + 4 * length * length * d)
        )

    def _decoder(self, module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        rows, new = input_ids.shape
        cache = kwargs.get("past_key_values")
        past = cache.get_seq_length() if cache is not None else 0
        source = kwargs["encoder_hidden_states"].shape[1]
        c, d = self.config, self.config.d_model
        per_layer = rows * (
            new * (8 * d * d + 4 * d * d + 4 * d * c.decoder_ffn_dim)
            + 4 * new * (past + new) * d
            + 4 * new * source * d
            + (4 * source * d * d if past == 0 else 0)  # cross-attention keys/values, once per generate()
        )
        self.flops += c.decoder_layers * per_layer + rows * new * 2 * d * c.vocab_size
        self.decoder_row_steps += rows * new


def matmul_peak(args, seconds: float = 1.0) -> float:
    """Achievable matmul FLOP/s in the benchmark's dtype: best of a few timed loops of a square torch.mm."""
    n = 2048 if args.device.type == "cpu" else 8192
    dtype = args.torch_dtype
    a = torch.randn(n, n, device=args.device, dtype=dtype)
    b = torch.randn(n, n, device=args.device, dtype=dtype)
    torch.mm(a, b)
    synchronize(args.device)
    best = 0.0
    for _ in range(3):
        calls, started = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            calls += 1
            if calls % 4 == 0 or args.device.type == "cpu":
                synchronize(args.device)
                elapsed = time.perf_counter() - started
                if elapsed >= seconds / 3:
                    break
        best = max(best, 2 * n**3 * calls / elapsed)
    return best


# ---- 2. training step on the same batches ---------------------------------------------------------------------------


def training_step(model, batch, optimizer, args, is_ours: bool) -> None:
    """One optimizer step on the paper's objective, label-smoothed cross-entropy (epsilon 0.1, §5.4), for both.

    Ours computes it inside the model (fused, output layer at labelled positions only: `loss_only`, as
    `VaswaniTrainer` asks for it). MarianMTModel cannot smooth: its logits go through the same fused
    `F.cross_entropy(label_smoothing=0.1)`, the cheapest way to train Marian on that objective.
    """
    with autocast(args):
        if is_ours:
            loss = model(**batch, label_smoothing=LABEL_SMOOTHING, loss_only=True).loss
        else:
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}
            logits = model(**inputs).logits
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(),
                batch["labels"].flatten(),
                ignore_index=-100,
                label_smoothing=LABEL_SMOOTHING,
            )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class Stopwatch:
    """Wall-clock and process CPU seconds (all threads) of a block; CPU time is the steadier on a shared machine."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        synchronize(self.device)
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def summarize(name_seconds: dict, name_cpu: dict) -> dict:
    return {
        name: {
            "seconds": median(values),
            "seconds_all": values,
            "cpu_seconds": median(name_cpu[name]),
            "cpu_seconds_all": name_cpu[name],
        }
        for name, values in name_seconds.items()
    }


def bench_training(models: dict, batches, args, config) -> dict:
    optimizers = {
        name: torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)
        for name, model in models.items()
    }
    for model in models.values():
        model.train()
    largest = max(batches, key=lambda b: b["input_ids"].numel() + b["labels"].numel())
    for name, model in models.items():  # first step: Adam state, allocator and kernel warm-up
        training_step(model, largest, optimizers[name], args, name == "ours")
    synchronize(args.device)
    target_tokens = sum(int((b["labels"] != -100).sum()) for b in batches)
    source_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].numel() + b["labels"].numel() for b in batches)
    flops = sum(training_flops(config, b) for b in batches)
    seconds, cpu = {name: [] for name in models}, {name: [] for name in models}
    for repeat in range(args.repeats):
        order = list(models) if repeat % 2 == 0 else list(models)[::-1]
        for name in order:
            with Stopwatch(args.device) as watch:
                for batch in batches:
                    training_step(models[name], batch, optimizers[name], args, name == "ours")
            seconds[name].append(watch.wall)
            cpu[name].append(watch.cpu)
        logger.info("training step repeat %d: %s", repeat + 1, {k: round(v[-1], 2) for k, v in seconds.items()})
    result = {
        "batches": len(batches),
        "sentences": sum(int(b["input_ids"].shape[0]) for b in batches),
        "target_tokens": target_tokens,
        "source_tokens": source_tokens,
        "padding_fraction": 1 - (target_tokens + source_tokens) / padded,
        "flops": flops,
        "objective": "label-smoothed cross-entropy, epsilon 0.1, both (Marian's computed on its logits)",
    }
    for name, timing in summarize(seconds, cpu).items():
        s = timing["seconds"]
        result[name] = {
            **timing,
            "target_tokens_per_s": target_tokens / s,
            "tokens_per_s": (target_tokens + source_tokens) / s,
            "cpu_tokens_per_s": (target_tokens + source_tokens) / timing["cpu_seconds"],
            "flop_per_s": flops / s,
        }
    return result


# ---- 3. the training pipelines --------------------------------------------------------------------------------------


class CountingCollator:
    """A data collator that records the real (non-pad) source and target tokens of every batch it makes."""

    def __init__(self, collator):
        self.collator = collator
        self.counts: list[tuple[int, int]] = []

    def __call__(self, features):
        batch = self.collator(features)
        self.counts.append((int(batch["attention_mask"].sum()), int((batch["labels"] != -100).sum())))
        return batch

    def tokens(self, batches: int) -> tuple[int, int]:
        """Tokens of the first `batches` batches (the DataLoader may have made one more ahead of time)."""
        used = self.counts[:batches]
        return sum(c[0] for c in used), sum(c[1] for c in used)


def bench_pipeline(ours, marian, tokenizer, ids, args) -> dict:
    """Both Trainers on the whole training set, each for the number of optimizer steps that makes about
    `--pipeline-tokens` real tokens; throughput is the tokens of the batches they trained on over `train()`'s time."""
    dataset = _dataset(ids, range(len(ids["source"])))
    lengths = np.array([len(s) for s in ids["source"]]) + np.array([len(t) for t in ids["target"]])
    sampler_batches = token_batches(ids, args.max_tokens, None, args.seed)
    tokens_per_batch = {
        "ours": lengths.sum() / len(sampler_batches),
        "marian": lengths.mean() * 64,
    }
    max_steps = {name: max(2, round(args.pipeline_tokens / per_batch)) for name, per_batch in tokens_per_batch.items()}

    def run(name):
        model = copy.deepcopy(ours if name == "ours" else marian).train()
        collator = CountingCollator(DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100))
        with tempfile.TemporaryDirectory() as output_dir:
            if name == "ours":
                training_args = _training_args(
                    VaswaniTrainingArguments, args, output_dir, max_steps=max_steps[name], max_tokens=args.max_tokens
                )
                trainer = VaswaniTrainer(
                    model=model,
                    args=training_args,
                    train_dataset=dataset,
                    processing_class=tokenizer,
                    data_collator=collator,
                    max_tokens=training_args.max_tokens,
                )
            else:
                training_args = _training_args(
                    Seq2SeqTrainingArguments,
                    args,
                    output_dir,
                    max_steps=max_steps[name],
                    per_device_train_batch_size=64,
                )
                trainer = Seq2SeqTrainer(
                    model=model,
                    args=training_args,
                    train_dataset=dataset,
                    processing_class=tokenizer,
                    data_collator=collator,
                )
            with Stopwatch(args.device) as watch, contextlib.redirect_stdout(io.StringIO()):
                trainer.train()  # the stdout it writes is its final metrics line
            steps = trainer.state.global_step
        del trainer, model
        gc.collect()
        return watch, steps, collator.tokens(steps)

    seconds, cpu = {"ours": [], "marian": []}, {"ours": [], "marian": []}
    tokens = {}
    for repeat in range(args.repeats):
        for name in ("ours", "marian") if repeat % 2 == 0 else ("marian", "ours"):
            watch, steps, tokens[name] = run(name)
            seconds[name].append(watch.wall)
            cpu[name].append(watch.cpu)
        logger.info("pipeline repeat %d: %s", repeat + 1, {k: round(v[-1], 2) for k, v in seconds.items()})
    result = {
        "data": f"all {len(dataset)} training pairs, the first optimizer steps of an epoch",
        "ours_batching": f"VaswaniTrainer: TokenBatchSampler max_tokens={args.max_tokens}, fused label smoothing",
        "marian_batching": "Seq2SeqTrainer: 64 sentences, stock LabelSmoother (label_smoothing_factor=0.1)",
    }
    for name, timing in summarize(seconds, cpu).items():
        source_tokens, target_tokens = tokens[name]
        s = timing["seconds"]
        result[name] = {
            **timing,
            "optimizer_steps": max_steps[name],
            "source_tokens": source_tokens,
            "target_tokens": target_tokens,
            "target_tokens_per_s": target_tokens / s,
            "tokens_per_s": (source_tokens + target_tokens) / s,
            "cpu_tokens_per_s": (source_tokens + target_tokens) / timing["cpu_seconds"],
        }
    return result


# ---- 4. generation --------------------------------------------------------------------------------------------------


def generation_config(num_beams: int, args, config) -> GenerationConfig:
    values = dict(
        do_sample=False,
        num_beams=num_beams,
        max_new_tokens=args.max_new_tokens,
        bos_token_id=config.bos_token_id,
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        use_cache=True,
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
    `training.decoding.translate`, which batches the same number of sentences sorted by length (the pipeline)."""
    from hf_vaswani_training.decoding import translate

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
        "ours_translate": lambda: translate(
            models["ours"], tokenizer, sources, max_tokens=10**9, max_sentences=args.gen_batch_size
        ),
    }
    for model in models.values():  # warm-up
        model.generate(**batches[0])
    outputs, flops, row_steps = {}, {}, {}
    seconds, cpu = {name: [] for name in runs}, {name: [] for name in runs}
    for repeat in range(args.repeats):
        for name in list(runs) if repeat % 2 == 0 else list(runs)[::-1]:
            model = models["marian" if name == "marian" else "ours"]
            with GenerationFlopCounter(model) as counter, Stopwatch(args.device) as watch:
                produced = runs[name]()
            seconds[name].append(watch.wall)
            cpu[name].append(watch.cpu)
            outputs[name], flops[name], row_steps[name] = produced, counter.flops, counter.decoder_row_steps
        logger.info("beam %d repeat %d: %s", num_beams, repeat + 1, {k: round(v[-1], 2) for k, v in seconds.items()})

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
        "ours_translate_batching": f"hf_vaswani_training.decoding.translate: length-sorted, {args.gen_batch_size} sentences a batch",
    }
    for name, timing in summarize(seconds, cpu).items():
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


# ---- 5. peak memory, one subprocess per measurement -----------------------------------------------------------------


def _rss_kib() -> tuple[int | None, int | None]:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None, None
    values = {k: int(m.group(1)) for k in ("VmRSS", "VmHWM") if (m := re.search(rf"{k}:\s+(\d+)", status))}
    return values.get("VmRSS"), values.get("VmHWM")


def _release_free_heap() -> None:
    """Give the allocator's free pages back to the OS (glibc), so that the memory freed while building the model
    (Marian is built from our weights, which are then dropped) cannot absorb the measured work unseen."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def run_probe(spec: dict) -> dict:
    """Inside the subprocess: build one model, then measure the peak of one task above the state before it."""
    args = parse_args(spec["argv"])
    configure_threads(args)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(spec["tokenizer_dir"])
    inputs = torch.load(spec["inputs_file"], weights_only=True)
    # Both models are built in both probes and the other one dropped, so that both start from the same state.
    ours = VaswaniForConditionalGeneration.from_pretrained(spec["model_dir"], attn_implementation="sdpa")
    marian = marian_from_ours(ours)
    model = ours if spec["model"] == "ours" else marian
    del ours, marian
    model.to(args.device)
    task = spec["task"]
    if task == "training":
        batch = {k: v.to(args.device) for k, v in inputs["training_batch"].items()}
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)
        model.train()
    else:
        batch = {k: v.to(args.device) for k, v in inputs["generation_batch"].items()}
        model.to(args.torch_dtype)  # as in the timed generation
        model.eval()
        model.generation_config = generation_config(1 if task == "greedy" else 4, args, model.config)
    del tokenizer
    gc.collect()
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)
        torch.cuda.reset_peak_memory_stats(args.device)
        before = torch.cuda.memory_allocated(args.device)
    else:
        _release_free_heap()
        reset = _reset_peak_rss()
        before, _ = _rss_kib()
        before *= 1024
    for _ in range(2):  # two steps: the second runs with the optimizer state the first created
        if task == "training":
            training_step(model, batch, optimizer, args, spec["model"] == "ours")
        else:
            with torch.no_grad():
                model.generate(**batch)
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)
        peak = torch.cuda.max_memory_allocated(args.device)
        how = "torch.cuda.max_memory_allocated"
    else:
        _, hwm = _rss_kib()
        if reset:
            peak, how = hwm * 1024, "VmHWM after clear_refs"
        else:
            import resource

            peak, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"
    return {"peak_bytes_above_start": peak - before, "start_bytes": before, "method": how}


def bench_memory(args, model_dir, inputs_file, tasks) -> dict:
    results = {}
    for task in tasks:
        results[task] = {}
        for name in ("ours", "marian"):
            spec = {
                "argv": sys.argv[1:],
                "tokenizer_dir": str(args.cache_dir / f"tokenizer-bpe{args.vocab_size}"),
                "inputs_file": str(inputs_file),
                "model_dir": str(model_dir),
                "model": name,
                "task": task,
            }
            completed = subprocess.run(
                [sys.executable, __file__, "--probe", json.dumps(spec)],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
            line = [ln for ln in completed.stdout.splitlines() if ln.startswith("PROBE ")]
            if completed.returncode != 0 or not line:
                raise RuntimeError(f"memory probe {name}/{task} failed:\n{completed.stderr[-3000:]}")
            results[task][name] = json.loads(line[-1][len("PROBE ") :])
            logger.info("memory %s %s: %.1f MiB", task, name, results[task][name]["peak_bytes_above_start"] / 2**20)
    return results


# ---- profiles -------------------------------------------------------------------------------------------------------


def profile_models(models: dict, train_batch, gen_batch, args, config) -> None:
    """torch.profiler over one training step, one greedy and one beam-4 batch of each model: top ops by self time."""
    from torch.profiler import ProfilerActivity, profile

    args.profile.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.type == "cuda" else [])
    on_device = args.device.type != "cpu"
    sort_by = "self_device_time_total" if on_device else "self_cpu_time_total"

    def self_time(event):  # microseconds
        return event.self_device_time_total if on_device else event.self_cpu_time_total

    summary = {}
    for name, model in models.items():
        is_ours = name == "ours"
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)

        def train(model=model, optimizer=optimizer, is_ours=is_ours):
            model.train()
            training_step(model, train_batch, optimizer, args, is_ours)

        def decode(beams, model=model):
            model.eval()
            model.generation_config = generation_config(beams, args, config)
            with torch.no_grad():
                model.generate(**gen_batch)

        tasks = {
            "training_step": train,
            "generate_greedy": lambda decode=decode: decode(1),
            "generate_beam4": lambda decode=decode: decode(4),
        }
        for task, run in tasks.items():
            run()  # warm-up (Adam state, first-call costs)
            with profile(activities=activities) as prof, Stopwatch(args.device) as watch:
                run()
            table = prof.key_averages().table(sort_by=sort_by, row_limit=30)
            (args.profile / f"{name}-{task}.txt").write_text(
                f"{name} {task}: {watch.wall:.3f} s wall, {watch.cpu:.3f} s CPU under the profiler\n{table}\n"
            )
            events = sorted(prof.key_averages(), key=self_time, reverse=True)
            total = sum(self_time(e) for e in events)
            top = [
                {"op": e.key, "self_ms": self_time(e) / 1e3, "share": self_time(e) / total, "calls": e.count}
                for e in events[:15]
            ]
            summary[f"{name}/{task}"] = {"seconds": watch.wall, "cpu_seconds": watch.cpu, "top_ops": top}
            print(f"\n== {name} {task}: {watch.wall:.3f} s wall, {watch.cpu:.3f} s CPU (profiled) ==")
            for e in top[:12]:
                print(f"  {e['op'][:48]:48s} {e['self_ms']:9.1f} ms {100 * e['share']:5.1f}%  {e['calls']:7d} calls")
    (args.profile / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nprofiles written to {args.profile}")


# ---- report ---------------------------------------------------------------------------------------------------------


def ratio(a, b):
    return a / b if a and b else None


def build_table(results: dict) -> list[dict]:
    """Rows of (measure, ours, Marian, ours/Marian on wall-clock, the same ratio on CPU time, target)."""
    rows = []

    def add(label, section, key, cpu_key=None, ours="ours", target=None, unit=""):
        data = results.get(section)
        if not data or ours not in data:
            return
        a, b = data[ours][key], data["marian"][key]
        cpu_ratio = ratio(data[ours][cpu_key], data["marian"][cpu_key]) if cpu_key else None
        rows.append(
            {
                "measure": label,
                "ours": a,
                "marian": b,
                "ratio": ratio(a, b),
                "cpu_time_ratio": cpu_ratio,
                "target": target,
                "lower_is_better": False,
                "unit": unit,
            }
        )

    step, pipe = TARGETS["training_step_tokens_per_s"], TARGETS["pipeline_tokens_per_s"]
    add("train step, same batches: tgt tok/s", "training_step", "target_tokens_per_s", "cpu_tokens_per_s", target=step)
    add("train step, same batches: src+tgt tok/s", "training_step", "tokens_per_s", "cpu_tokens_per_s", target=step)
    add("pipeline (Trainer): tgt tok/s", "pipeline", "target_tokens_per_s", "cpu_tokens_per_s", target=pipe)
    add("pipeline (Trainer): src+tgt tok/s", "pipeline", "tokens_per_s", "cpu_tokens_per_s", target=pipe)
    for section, label in (("greedy", "greedy"), ("beam4", "beam 4")):
        target = TARGETS[f"{section}_sentences_per_s"]
        add(f"{label}, same batches: sent/s", section, "sentences_per_s", "cpu_sentences_per_s", target=target)
        add(f"{label}, same batches: gen tok/s", section, "generated_tokens_per_s", "cpu_sentences_per_s")
        add(
            f"{label}, translate() vs batches: sent/s",
            section,
            "sentences_per_s",
            "cpu_sentences_per_s",
            ours="ours_translate",
            target=target,
        )
    for task in ("training", "greedy", "beam4"):
        memory = results.get("memory", {}).get(task)
        if memory:
            a = memory["ours"]["peak_bytes_above_start"] / 2**20
            b = memory["marian"]["peak_bytes_above_start"] / 2**20
            rows.append(
                {
                    "measure": f"peak memory, {task} (MiB)",
                    "ours": a,
                    "marian": b,
                    "ratio": ratio(a, b),
                    "cpu_time_ratio": None,
                    "target": 1.0 if task == "training" else None,
                    "lower_is_better": True,
                    "unit": "MiB",
                }
            )
    peak = results.get("mfu", {}).get("matmul_peak_flop_per_s")
    if peak:
        for label, section in (
            ("MFU train step (%)", "training_step"),
            ("MFU greedy (%)", "greedy"),
            ("MFU beam 4 (%)", "beam4"),
        ):
            data = results.get(section)
            if data and "ours" in data:
                a, b = 100 * data["ours"]["flop_per_s"] / peak, 100 * data["marian"]["flop_per_s"] / peak
                rows.append(
                    {
                        "measure": label,
                        "ours": a,
                        "marian": b,
                        "ratio": ratio(a, b),
                        "cpu_time_ratio": None,
                        "target": None,
                        "lower_is_better": False,
                        "unit": "%",
                    }
                )
    return rows


def print_report(results: dict) -> None:
    meta = results["meta"]
    print()
    print(f"hf_vaswani vs MarianMTModel: {meta['device']} ({meta['cpu']}), {meta['dtype']}, {meta['threads']} threads")
    print(
        f"  load average {meta['loadavg_start']} -> {meta['loadavg_end']}; median of {meta['repeats']} interleaved repeats"
    )
    print(f"  weights: {meta['weights']}")
    parity_info = results["parity"]
    print(f"  parity: max |logit difference| = {parity_info['max_abs_logit_difference']:.2e} (< {PARITY_TOLERANCE:g})")
    for key in ("greedy", "beam4"):
        if key in results:
            g = results[key]
            print(
                f"  {key}: identical tokens for {g['identical_sentences']}/{g['sentences']} sentences on the same batches; "
                f"translate() gives Marian's text for {g['translate_identical_texts']}/{g['sentences']}"
            )
    print()
    header = f"{'measure':42s} {'ours':>10s} {'Marian':>10s} {'ratio':>7s} {'CPU-time':>8s}  {'target':<12s}"
    print(header)
    print("-" * len(header))
    for row in results["table"]:
        r, target = row["ratio"], row["target"]
        target_text = ""
        if target is not None and r is not None:
            met = r <= target if row["lower_is_better"] else r >= target
            target_text = f"{'<=' if row['lower_is_better'] else '>='}{target:g} {'met' if met else 'MISSED'}"
        cpu_ratio = f"{row['cpu_time_ratio']:8.2f}" if row["cpu_time_ratio"] else " " * 8
        ratio_text = f"{r:7.2f}" if r is not None else " " * 7
        print(
            f"{row['measure']:42s} {row['ours']:10.1f} {row['marian']:10.1f} {ratio_text} {cpu_ratio}  {target_text:<12s}"
        )
    print(
        "ratio = ours / Marian on wall-clock; CPU-time = the same ratio on process CPU seconds (steadier when shared)"
    )
    if "mfu" in results:
        print(f"matmul peak: {results['mfu']['matmul_peak_flop_per_s'] / 1e9:.1f} GFLOP/s ({results['mfu']['method']})")


def configure_threads(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)


def main(argv=None) -> dict:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    transformers.utils.logging.set_verbosity_error()
    if args.probe:
        result = run_probe(json.loads(args.probe))
        print("PROBE " + json.dumps(result))
        return result
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    configure_threads(args)
    load = loadavg()
    if args.device.type == "cpu" and load and load[0] + torch.get_num_threads() > (os.cpu_count() or 1) + 0.5:
        logger.warning(
            "load average %.1f on %d cores: %d threads will compete with other processes (OpenMP threads wait on "
            "each other); --threads 1 gives steadier ratios on a shared machine",
            load[0],
            os.cpu_count(),
            torch.get_num_threads(),
        )
    started = time.perf_counter()
    results: dict = {
        "meta": {
            "device": str(args.device),
            "cpu": cpu_name(),
            "dtype": args.dtype,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "hf_vaswani": hf_vaswani.__version__,
            "loadavg_start": loadavg(),
            "repeats": args.repeats,
            "quick": args.quick,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "arguments": {k: str(v) for k, v in vars(args).items() if k not in ("torch_dtype",)},
        }
    }

    tokenizer, ids, test_sources, _ = load_corpus(args)
    ours, weights_origin = warm_model(args, tokenizer, ids)
    config = ours.config
    ours.to(args.device)
    marian = marian_from_ours(ours)
    results["meta"].update(
        weights=weights_origin,
        architecture={
            k: getattr(config, k)
            for k in (
                "d_model",
                "encoder_layers",
                "decoder_layers",
                "encoder_attention_heads",
                "encoder_ffn_dim",
                "vocab_size",
            )
        },
        parameters={"ours": count_parameters(ours), "marian": count_parameters(marian)},
    )
    logger.info("setup done in %.0f s (%s)", time.perf_counter() - started, weights_origin)

    collator = DataCollatorForSeq2Seq(tokenizer, model=ours, label_pad_token_id=-100)
    batch_indices = token_batches(ids, args.max_tokens, args.train_batches, args.seed)
    train_batches = [{k: v.to(args.device) for k, v in collator(features(ids, b)).items()} for b in batch_indices]

    # ---- 1. parity, in float32, before anything is timed ----
    results["parity"] = parity(ours, marian, train_batches[0])
    logger.info("parity: max |logit difference| %.2e", results["parity"]["max_abs_logit_difference"])
    if not results["parity"]["max_abs_logit_difference"] < PARITY_TOLERANCE:
        raise SystemExit(f"the two models disagree: {results['parity']}; nothing timed")

    gen_batches_all = generation_batches(tokenizer, test_sources, args.gen_batch_size, args.device)

    if args.profile is not None:
        profile_models(
            {"ours": copy.deepcopy(ours), "marian": copy.deepcopy(marian)},
            train_batches[0],
            gen_batches_all[0],
            args,
            config,
        )
        return results

    # ---- 6. matmul peak (also re-measured at the end; the best is the peak) ----
    peaks = [] if "mfu" in args.skip else [matmul_peak(args)]

    # ---- 2. training step, the same batches ----
    if "training" not in args.skip:
        models = {"ours": copy.deepcopy(ours), "marian": copy.deepcopy(marian)}
        results["training_step"] = bench_training(models, train_batches, args, config)
        del models
        gc.collect()

    # ---- 4. generation: the trained weights, eval mode, the model dtype of the run ----
    gen_models = {
        "ours": copy.deepcopy(ours).to(args.torch_dtype),
        "marian": copy.deepcopy(marian).to(args.torch_dtype),
    }
    if "greedy" not in args.skip:
        sources = test_sources[: args.greedy_sentences]
        results["greedy"] = bench_generation(gen_models, tokenizer, sources, 1, args, config)
    if "beam" not in args.skip:
        sources = test_sources[: args.beam_sentences]
        results["beam4"] = bench_generation(gen_models, tokenizer, sources, 4, args, config)
    del gen_models
    gc.collect()

    # ---- 3. pipelines ----
    if "pipeline" not in args.skip:
        results["pipeline"] = bench_pipeline(ours, marian, tokenizer, ids, args)

    # ---- 5. memory ----
    if "memory" not in args.skip:
        with tempfile.TemporaryDirectory() as scratch:
            model_dir = Path(scratch) / "model"
            ours.to("cpu").save_pretrained(model_dir)
            ours.to(args.device)
            inputs_file = Path(scratch) / "inputs.pt"
            largest = max(train_batches, key=lambda b: b["input_ids"].numel() + b["labels"].numel())
            torch.save(
                {
                    "training_batch": {k: v.cpu() for k, v in largest.items()},
                    "generation_batch": {k: v.cpu() for k, v in gen_batches_all[0].items()},
                },
                inputs_file,
            )
            tasks = ["training"] + ([] if "memory-generation" in args.skip else ["greedy", "beam4"])
            results["memory"] = bench_memory(args, model_dir, inputs_file, tasks)

    if "mfu" not in args.skip:
        peaks.append(matmul_peak(args))
        results["mfu"] = {
            "matmul_peak_flop_per_s": max(peaks),
            "matmul_peak_all": peaks,
            "method": f"square torch.mm {'2048' if args.device.type == 'cpu' else '8192'}, {args.dtype}, "
            f"{torch.get_num_threads()} threads",
        }

    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["seconds"] = time.perf_counter() - started
    results["table"] = build_table(results)
    results["ratios"] = {row["measure"]: row["ratio"] for row in results["table"]}
    print_report(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten to {args.output} ({results['meta']['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
