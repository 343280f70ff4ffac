"""The model card of a trained run: `training/recipe/templates/model_card.md` filled in from the run's results.

`vaswani-train` calls `write_model_card(output_dir, run)` at the end of a run, where `run` is the `RunRecord` it also
writes to `results.json` (training/recipe/run_record.py); the card becomes the `README.md` of the output folder, which
`vaswani-push` uploads as it is. The top-level `model_card.md` is a filled-in example with every section explained.

The YAML metadata follows the Hub's model card spec (https://huggingface.co/docs/hub/model-cards): `language`
holds ISO 639 codes of real languages only, and `model-index` has one result per evaluated split whose metrics
carry the sacreBLEU signature in `args`.
"""

import re
from pathlib import Path

import yaml

from .run_record import RunRecord
from .schedule import peak_learning_rate

TEMPLATE = Path(__file__).resolve().parent / "templates" / "model_card.md"

LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "cs": "Czech",
    "ro": "Romanian",
    "ru": "Russian",
    "tt": "Toy Teutonic (constructed)",
}
TOY_CORPUS_ID = "hf-vaswani-toy"
# What the Hub's `language` field accepts: an ISO 639-1, 639-2 or 639-3 code, optionally with BCP-47 subtags.
_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")


def card_languages(run: RunRecord) -> list[str]:
    """The `language` metadata: the ISO codes of the real languages of the pair.

    The toy corpus's target is the constructed Toy Teutonic, whose code `tt` is, as an ISO 639-1 code, Tatar: it is
    left out rather than mislabel the model (the card's title and body name it, and the tags say
    `constructed-language`).
    """
    codes = [run.source_lang] + ([] if run.is_toy_corpus else [run.target_lang])
    return [code for code in dict.fromkeys(codes) if code and _LANGUAGE_CODE.match(code)]


def dataset_id(run: RunRecord) -> str:
    """A Hub dataset id when the data came from the Hub, else the name of the local data (or the toy corpus)."""
    data = run.data_args
    if data.dataset_name:
        name = str(data.dataset_name)
        return Path(name).name if Path(name).exists() else name
    if data.data_dir or data.train_file:
        return Path(str(data.data_dir or data.train_file)).name
    return TOY_CORPUS_ID


def card_metadata(run: RunRecord, model_name: str) -> dict:
    """The Hub metadata of the card, as a mapping (dumped as the YAML front matter)."""
    source, target = run.source_lang, run.target_lang
    dataset = dataset_id(run)
    tags = ["translation", "transformer", "attention-is-all-you-need", "vaswani", "hf-vaswani"]
    if run.is_toy_corpus:
        tags.append("constructed-language")
    results = []
    for split in ("test", "validation"):
        scores = run.results.scores.get(split)
        if not scores:
            continue
        dataset_entry = {"type": dataset, "name": dataset, "split": split}
        if run.data_args.dataset_config_name:
            dataset_entry["config"] = run.data_args.dataset_config_name
        results.append(
            {
                "task": {"type": "translation", "name": f"Translation {source}-{target}"},
                "dataset": dataset_entry,
                "metrics": [
                    {
                        "type": "sacrebleu",
                        "name": "sacreBLEU",
                        "value": round(float(scores.bleu), 2),
                        "args": {"signature": scores.bleu_signature},
                    },
                    {
                        "type": "chrf",
                        "name": "chrF",
                        "value": round(float(scores.chrf), 2),
                        "args": {"signature": scores.chrf_signature},
                    },
                ],
            }
        )
    return {
        "library_name": "transformers",
        "pipeline_tag": "translation",
        "license": "apache-2.0",
        "language": card_languages(run),
        "tags": tags,
        "datasets": [dataset],
        "metrics": ["sacrebleu", "chrf"],
        "model-index": [{"name": model_name, "results": results}],
    }


def _yaml_metadata(run: RunRecord, model_name: str) -> str:
    # safe_dump quotes what YAML would otherwise misread (the language code `no` as false, a name with `: `).
    text = yaml.safe_dump(card_metadata(run, model_name), sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{text}---"


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return str(text).replace("\n", " ").replace("|", "\\|")


def render_model_card(run: RunRecord, model_name: str = "hf-vaswani") -> str:
    results, config, args = run.results, run.model_config, run.training_args
    source, target = run.source_lang, run.target_lang
    data = run.data_args
    if data.dataset_name:
        config_name = f" ({data.dataset_config_name})" if data.dataset_config_name else ""
        data_description = f"`{data.dataset_name}`{config_name} from the Hub"
    elif data.data_dir or data.train_file:
        data_description = f"local files ({data.data_dir or data.train_file})"
    else:
        data_description = "the embedded toy corpus of hf-vaswani (`training/data/toy_corpus.py`), generated in code"
    sizes = ", ".join(f"{split} {stats.num_pairs:,}" for split, stats in run.data_stats.items())
    scores_rows = []
    for split in ("validation", "test"):
        if split in results.scores:
            s = results.scores[split]
            scores_rows.append(f"| {split} | {s.sentences} | {s.bleu:.2f} | {s.chrf:.2f} |")
    evaluated = results.scores.get("test", results.scores.get("validation"))
    samples = "\n".join(f"| {_cell(s.source)} | {_cell(s.hypothesis)} | {_cell(s.reference)} |" for s in run.samples)
    d_model = config.get("d_model", 512)
    averaged = results.averaged_checkpoints
    warmup = args.warmup_steps
    values = {
        "metadata": _yaml_metadata(run, model_name),
        "model_name": model_name,
        "source_name": LANGUAGE_NAMES.get(source, source),
        "target_name": LANGUAGE_NAMES.get(target, target),
        "source": source,
        "target": target,
        "data_description": data_description,
        "data_sizes": sizes,
        "d_model": d_model,
        "layers": f"{config.get('encoder_layers', 6)}+{config.get('decoder_layers', 6)}",
        "heads": config.get("encoder_attention_heads", 8),
        "ffn": config.get("encoder_ffn_dim", 2048),
        "dropout": _number(config.get("dropout", 0.1)),
        "attention_dropout": _number(config.get("attention_dropout", 0.0)),
        "activation_dropout": _number(config.get("activation_dropout", 0.0)),
        "layer_norm_eps": _number(config.get("layer_norm_eps", 1e-6)),
        "vocab_size": config.get("vocab_size"),
        "parameters": f"{results.parameters / 1e6:.2f}M",
        "adam": f"β1 = {args.adam_beta1:g}, β2 = {args.adam_beta2:g}, ε = {args.adam_epsilon:g}",
        "lr_scheduler": getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type),  # not the enum's repr
        "learning_rate": f"{args.learning_rate:.3g}",
        "paper_learning_rate": f"{peak_learning_rate(d_model, warmup):.3g}" if warmup >= 1 else "n/a",
        "warmup_steps": _number(warmup),
        "label_smoothing": _number(args.label_smoothing_factor),
        "max_tokens": args.max_tokens,
        "world_size": args.world_size,
        "accumulation": args.gradient_accumulation_steps,
        "steps": results.train_steps,
        "epochs": f"{results.train_epochs:.2f}",
        "train_minutes": results.train_minutes,
        "resumed": (
            f" (resumed at step {results.resumed_from_step}: steps and minutes count every segment of the run)"
            if results.resumed_from_step
            else ""
        ),
        "stopped_early": f"\n- **Stopped early**: {results.stopped_early}." if results.stopped_early else "",
        "averaging": (
            f"average of {', '.join(averaged)} (taken by step count)"
            if averaged
            else f"none (--average_last_n {args.average_last_n})"
        ),
        "final_weights": f"the average of {', '.join(averaged)}" if averaged else "those of the last step",
        "num_beams": args.generation_num_beams,
        "length_penalty": _number(args.length_penalty),
        "max_length_offset": args.max_length_offset,
        "scores_rows": "\n".join(scores_rows) or "| (no evaluation split) | | | |",
        "signature": evaluated.bleu_signature if evaluated else "n/a",
        "chrf_signature": evaluated.chrf_signature if evaluated else "n/a",
        "samples": samples or "| | | |",
        "device": run.device,
        "versions": ", ".join(f"{k} {v}" for k, v in run.versions.items()),
    }
    return TEMPLATE.read_text(encoding="utf-8").format(**values)


def write_model_card(output_dir: str | Path, run: RunRecord, model_name: str | None = None) -> Path:
    output_dir = Path(output_dir)
    path = output_dir / "README.md"
    path.write_text(render_model_card(run, model_name or output_dir.name), encoding="utf-8")
    return path
