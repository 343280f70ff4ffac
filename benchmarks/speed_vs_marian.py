#!/usr/bin/env python
"""hf_vaswani against `transformers.MarianMTModel`: the same architecture, the same weights, one run, one machine.

    python -m benchmarks.speed_vs_marian --threads 1        # full run, about 7 minutes on one shared CPU core
    python -m benchmarks.speed_vs_marian --quick            # smoke run, about 1.5 minutes (after the first run)
    python -m benchmarks.speed_vs_marian --device cuda      # bf16 with sdpa on a GPU
    python -m benchmarks.speed_vs_marian --profile DIR      # torch.profiler top ops of both models instead

A benchmark, not a test: it prints measured numbers and writes them to JSON (`--output`, by default
`benchmarks/results/speed_vs_marian-<device>.json`); it asserts nothing about time. The one hard check is
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
   the same batches of 64 in corpus order, and ours also through `training.serving.decoding.translate_texts` (length-sorted
   batches of 64, the pipeline); sentences/s, generated tokens/s, and whether both produce identical tokens;
5. peak memory of each, in a fresh subprocess per measurement (CPU: the peak resident set above the resident set
   before the work, via /proc/self/status VmHWM; CUDA: torch.cuda.max_memory_allocated);
   (timings are wall-clock, with process CPU seconds alongside: steadier on a shared machine)
6. model FLOPs utilisation: FLOPs counted explicitly (2mnk per matmul: q/k/v/out projections, attention scores
   and weighted sums, feed-forward, output layer; x3 for training; training counts real tokens only, padding
   excluded; generation counts every row and step that generate() runs) over the matmul peak of the machine
   measured in the same run with the same threads (square `torch.mm`).

This file is the recipe: which measure runs when, on which copies of the models. The harness (command line,
timing, interleaved repeats, report, JSON) and each measure live in benchmarks/lib/.
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

import torch
import transformers
from transformers import DataCollatorForSeq2Seq

import hf_vaswani
from benchmarks.lib.decoding import bench_generation, generation_batches
from benchmarks.lib.harness import (
    configure_threads,
    cpu_name,
    loadavg,
    parse_args,
    warn_if_crowded,
    write_results,
)
from benchmarks.lib.memory import bench_memory, run_probe
from benchmarks.lib.mfu import matmul_peak
from benchmarks.lib.model_pairs import (
    PARITY_TOLERANCE,
    count_parameters,
    features,
    load_corpus,
    marian_from_ours,
    parity,
    token_batches,
    warm_model,
)
from benchmarks.lib.pipeline import bench_pipeline
from benchmarks.lib.profiling import profile_models
from benchmarks.lib.training_step import bench_training

logger = logging.getLogger("speed_vs_marian")


def main(argv=None) -> dict:
    args = parse_args(argv, description=__doc__.split("\n\n")[0])
    warnings.filterwarnings("ignore")
    transformers.utils.logging.set_verbosity_error()
    if args.probe:
        result = run_probe(json.loads(args.probe))
        print("PROBE " + json.dumps(result))
        return result
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    configure_threads(args)
    if args.device.type == "cpu":
        warn_if_crowded()
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

    write_results(results, args.output, started)
    return results


if __name__ == "__main__":
    main()
