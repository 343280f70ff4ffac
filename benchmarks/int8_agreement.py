#!/usr/bin/env python
"""int8 against float32 under each instruction set CTranslate2's kernels can be forced to (issue 21).

    python -m benchmarks.int8_agreement --model-dir outputs/toy [--limit 500] [--threads 1]

A benchmark, not a test: it prints measured numbers. The model folder is converted twice (float32, int8); generate()
decodes the toy corpus' test split (greedy, and beam 4 with the rules CTranslate2 expresses: Hugging Face length
penalty 0.6, early_stopping=True; at most 64 new tokens everywhere); then, for each setting, a fresh process
(oneDNN and CTranslate2 read their variables once per process) decodes with CTranslate2 and the table gives
sacreBLEU and the share of sentences whose tokens equal generate()'s:

- the CPU as it is (CTranslate2 picks its kernels: MKL on Intel, oneDNN elsewhere);
- CT2_FORCE_CPU_ISA=GENERIC / AVX / AVX2 / AVX512 (the last only where the CPU has AVX-512): CTranslate2's own
  kernels (softmax, layer norm, activation quantization);
- ONEDNN_MAX_CPU_ISA=AVX2: oneDNN's int8 matrix products as on a CPU without VNNI, where pairs of int8 products are
  added in saturating 16-bit lanes (vpmaddubsw). CT2_FORCE_CPU_ISA does not reach oneDNN; this variable does;
- the int8 file computed in float32 (compute_type="float32", `vaswani-translate --dtype float32`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

MAX_NEW_TOKENS = 64


def decode_ct2(model_dir: str, sentences: list[str], threads: int, compute_type: str) -> dict[str, list]:
    from hf_vaswani_training.serving.ctranslate2_export import CTranslate2Translator

    translator = CTranslate2Translator(model_dir, intra_threads=threads, compute_type=compute_type)
    common = dict(max_new_tokens=MAX_NEW_TOKENS, max_sentences=64)
    greedy = translator.translate_tokens(sentences, num_beams=1, **common)
    beam = translator.translate_tokens(sentences, num_beams=4, length_penalty=0.6, **common)
    return {"greedy": [nbest[0] for nbest in greedy], "beam": [nbest[0] for nbest in beam]}


def decode_generate(model_dir: str, sentences: list[str]) -> dict[str, list]:
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_vaswani  # noqa: F401
    from hf_vaswani_training.serving.ctranslate2_export import strip_special

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = model.config
    outputs: dict[str, list] = {"greedy": [], "beam": []}
    settings = {
        "greedy": dict(num_beams=1),
        "beam": dict(num_beams=4, length_penalty=0.6, length_penalty_type=None, early_stopping=True),
    }
    for start in range(0, len(sentences), 64):
        batch = tokenizer(sentences[start : start + 64], return_tensors="pt", padding=True)
        for name, options in settings.items():
            with torch.no_grad():
                rows = model.generate(
                    **batch, max_new_tokens=MAX_NEW_TOKENS, max_length_offset=None, do_sample=False, **options
                ).tolist()
            outputs[name] += [
                strip_special(row, config.decoder_start_token_id, config.eos_token_id, config.pad_token_id)
                for row in rows
            ]
    return outputs


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--limit", type=int, default=500, help="first N sentences of the toy test split")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", nargs=3, metavar=("CT2_DIR", "SENTENCES_JSON", "COMPUTE_TYPE"), help="internal")
    args = parser.parse_args(argv)
    if args.worker:
        model_dir, sentences_path, compute_type = args.worker
        sentences = json.loads(Path(sentences_path).read_text())
        print(json.dumps(decode_ct2(model_dir, sentences, args.threads, compute_type)))
        return 0

    import sacrebleu
    from transformers import AutoTokenizer

    import hf_vaswani  # noqa: F401  (registers the model type: the tokenizer loads its config without a prompt)
    from hf_vaswani_training.data.toy_corpus import SOURCE_LANG, TARGET_LANG, generate_corpus
    from hf_vaswani_training.serving.ctranslate2_export import convert_to_ctranslate2

    test = generate_corpus(num_train=0)["test"][: args.limit]
    sentences, references = [pair[SOURCE_LANG] for pair in test], [pair[TARGET_LANG] for pair in test]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    flags = set(
        next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    )
    work = Path(tempfile.mkdtemp(prefix="int8-cpus-"))
    float32_dir = convert_to_ctranslate2(args.model_dir, work / "float32")
    int8_dir = convert_to_ctranslate2(args.model_dir, work / "int8", quantization="int8")
    sentences_path = work / "sentences.json"
    sentences_path.write_text(json.dumps(sentences))
    reference_ids = decode_generate(args.model_dir, sentences)

    def row(label: str, ids: dict[str, list]) -> None:
        cells = []
        for name in ("greedy", "beam"):
            same = sum(a == b for a, b in zip(ids[name], reference_ids[name], strict=True))
            texts = [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in ids[name]]
            bleu = sacrebleu.corpus_bleu(texts, [references], force=True).score  # the toy corpus is tokenised
            cells.append(f"{100 * same / len(sentences):5.1f}% {bleu:6.2f}")
        print(f"| {label:<52} | {' | '.join(cells)} |", flush=True)

    def worker(model_dir: Path, compute_type: str = "default", **env: str) -> dict[str, list]:
        command = [
            sys.executable,
            "-m",
            "benchmarks.int8_agreement",
            "--model-dir",
            args.model_dir,
            "--threads",
            str(args.threads),
        ]
        command += ["--worker", str(model_dir), str(sentences_path), compute_type]
        result = subprocess.run(
            command, env={**os.environ, **env}, capture_output=True, text=True, check=True, cwd=REPO_ROOT
        )
        return json.loads(result.stdout.strip().splitlines()[-1])

    print(f"CPU: {cpu_name()}; VNNI: {sorted(flags & {'avx512_vnni', 'avx_vnni'}) or 'none'}; {len(sentences)} test")
    print("| engine, setting | greedy: tokens = generate(), BLEU | beam 4: tokens = generate(), BLEU |")
    print("| --- | --- | --- |")
    row("generate() (PyTorch float32)", reference_ids)
    row("CTranslate2 float32", worker(float32_dir))
    row("CTranslate2 int8, as the CPU is", worker(int8_dir))
    isas = ["GENERIC", "AVX", "AVX2"] + (["AVX512"] if "avx512f" in flags else [])
    for isa in isas:
        row(f"CTranslate2 int8, CT2_FORCE_CPU_ISA={isa}", worker(int8_dir, CT2_FORCE_CPU_ISA=isa))
    row("CTranslate2 int8, ONEDNN_MAX_CPU_ISA=AVX2 (no VNNI)", worker(int8_dir, ONEDNN_MAX_CPU_ISA="AVX2"))
    row(
        "int8 file, compute_type=float32, ONEDNN_MAX_CPU_ISA=AVX2",
        worker(int8_dir, "float32", ONEDNN_MAX_CPU_ISA="AVX2"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
