"""The model card of a trained run: `training/templates/model_card.md` filled in from the run's results."""

import json
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "templates" / "model_card.md"

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "tt": "toy Teutonic (constructed)"}


def _yaml_metadata(run: dict, model_name: str) -> str:
    """Hugging Face card metadata; written by hand (JSON scalars are valid YAML) to avoid a YAML dependency."""
    source, target = run["source_lang"], run["target_lang"]
    dataset = run["data_args"].get("dataset_name") or run["data_args"].get("data_dir") or "hf-vaswani-toy"
    dataset_name = Path(str(dataset)).name
    metrics = []
    for split in ("test", "validation"):
        scores = run["results"].get(split)
        if not scores:
            continue
        for key, name in (("bleu", "sacreBLEU"), ("chrf", "chrF")):
            metrics.append(
                f"          - type: {key}\n"
                f"            name: {name} ({split})\n"
                f"            value: {round(float(scores[key]), 2)}\n"
                f"            args: {json.dumps(scores[key + '_signature'])}"
            )
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: translation",
        "license: apache-2.0",
        "tags:",
        "  - translation",
        "  - vaswani",
        "  - transformer",
        "  - attention-is-all-you-need",
        "  - hf-vaswani",
        "language:",
        *(f"  - {code}" for code in (source, target) if len(code) == 2 and code != "tt"),
        "datasets:",
        f"  - {json.dumps(dataset_name)}",
        "model-index:",
        f"  - name: {json.dumps(model_name)}",
        "    results:",
        "      - task:",
        "          type: translation",
        f"          name: Translation {source}-{target}",
        "        dataset:",
        f"          type: {json.dumps(dataset_name)}",
        f"          name: {json.dumps(dataset_name)}",
        "        metrics:",
        *metrics,
        "---",
    ]
    return "\n".join(lines)


def render_model_card(run: dict, model_name: str = "hf-vaswani") -> str:
    results, config, args = run["results"], run["model_config"], run["training_args"]
    source, target = run["source_lang"], run["target_lang"]
    data = run["data_args"]
    if data.get("dataset_name"):
        data_description = f"`{data['dataset_name']}` ({data.get('dataset_config_name')}) from the Hub"
    elif data.get("data_dir") or data.get("train_file"):
        data_description = f"local files ({data.get('data_dir') or data.get('train_file')})"
    else:
        data_description = "the embedded toy corpus of hf-vaswani (`training/toy_corpus.py`), generated in code"
    sizes = ", ".join(f"{split} {stats['num_pairs']:,}" for split, stats in run["data_stats"].items())
    scores_rows = []
    for split in ("validation", "test"):
        if split in results:
            s = results[split]
            scores_rows.append(f"| {split} | {s['sentences']} | {s['bleu']:.2f} | {s['chrf']:.2f} |")
    signature = results.get("test", results.get("validation", {})).get("bleu_signature", "n/a")
    chrf_signature = results.get("test", results.get("validation", {})).get("chrf_signature", "n/a")
    samples = "\n".join(
        f"| {s['source']} | {s['hypothesis']} | {s['reference']} |".replace("\n", " ") for s in run["samples"]
    )
    values = {
        "metadata": _yaml_metadata(run, model_name),
        "model_name": model_name,
        "source_name": LANGUAGE_NAMES.get(source, source),
        "target_name": LANGUAGE_NAMES.get(target, target),
        "source": source,
        "target": target,
        "data_description": data_description,
        "data_sizes": sizes,
        "d_model": config.get("d_model", 512),
        "layers": f"{config.get('encoder_layers', 6)}+{config.get('decoder_layers', 6)}",
        "heads": config.get("encoder_attention_heads", 8),
        "ffn": config.get("encoder_ffn_dim", 2048),
        "dropout": config.get("dropout", 0.1),
        "vocab_size": config.get("vocab_size"),
        "parameters": f"{results['parameters'] / 1e6:.2f}M",
        "learning_rate": f"{args['learning_rate']:.3g}",
        "warmup_steps": args["warmup_steps"],
        "label_smoothing": args["label_smoothing_factor"],
        "max_tokens": args["max_tokens"],
        "world_size": args["world_size"],
        "steps": results["train_steps"],
        "epochs": f"{results['train_epochs']:.2f}",
        "train_minutes": results["train_minutes"],
        "averaged": ", ".join(results["averaged_checkpoints"]) or "none",
        "num_beams": args["generation_num_beams"],
        "length_penalty": args["length_penalty"],
        "max_length_offset": args["max_length_offset"],
        "scores_rows": "\n".join(scores_rows) or "| (no evaluation split) | | | |",
        "signature": signature,
        "chrf_signature": chrf_signature,
        "samples": samples or "| | | |",
        "device": run.get("device", "cpu"),
        "versions": ", ".join(f"{k} {v}" for k, v in run["versions"].items()),
    }
    return TEMPLATE.read_text(encoding="utf-8").format(**values)


def write_model_card(output_dir: str | Path, run: dict, model_name: str | None = None) -> Path:
    output_dir = Path(output_dir)
    path = output_dir / "README.md"
    path.write_text(render_model_card(run, model_name or output_dir.name), encoding="utf-8")
    return path
