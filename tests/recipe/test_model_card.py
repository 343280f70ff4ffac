"""The model card a training run writes as README.md: Hub metadata that parses and matches results.json, a body
with every placeholder filled, and the documented example card (model_card.md) in step with the template."""

import copy
import json
import re

import pytest
import yaml

from hf_vaswani_training.recipe.model_card import TEMPLATE, render_model_card
from hf_vaswani_training.recipe.run_record import RunRecord, Sample
from hf_vaswani_training.recipe.train import main
from tests.conftest import REPO_ROOT, TINY
from tests.hub_stub import validate_card_metadata

PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def split_card(text: str) -> tuple[dict, str]:
    """(metadata, body) of a model card, the metadata parsed with yaml.safe_load."""
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    assert match, "a model card starts with a YAML block between two '---' lines"
    return yaml.safe_load(match.group(1)), match.group(2)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("card") / "vaswani-tiny"
    args = ["--max_steps", "3", "--average_last_n", "0", "--toy_num_validation", "4", "--toy_num_test", "5"]
    main([*TINY, "--output_dir", str(output_dir), *args])
    return output_dir


@pytest.fixture(scope="module")
def run(run_dir) -> RunRecord:
    return RunRecord.from_dict(json.loads((run_dir / "results.json").read_text()))


def test_results_json_is_the_run_record(run_dir, run):
    """results.json keeps its layout: reading it into a RunRecord and writing it back changes nothing."""
    written = json.loads((run_dir / "results.json").read_text())
    assert json.loads(json.dumps(run.to_dict(), default=str)) == written
    assert set(run.results.scores) == {"validation", "test"} and run.results.scores["test"].sentences == 5
    assert run.training_args.label_smoothing_factor == 0.1 and run.data_stats["test"].num_pairs == 5


def test_metadata_is_valid_yaml_with_the_hub_fields(run_dir):
    metadata, _ = split_card((run_dir / "README.md").read_text(encoding="utf-8"))
    assert metadata["library_name"] == "transformers"
    assert metadata["pipeline_tag"] == "translation"
    assert metadata["license"] == "apache-2.0"
    assert {"translation", "transformer", "hf-vaswani"} <= set(metadata["tags"])
    # The toy corpus: English -> Toy Teutonic. `tt` would be ISO 639-1 for Tatar, so only `en` is listed, and the
    # constructed language is tagged.
    assert metadata["language"] == ["en"]
    assert "constructed-language" in metadata["tags"]
    assert metadata["datasets"] == ["hf-vaswani-toy"]
    assert validate_card_metadata((run_dir / "README.md").read_text(encoding="utf-8")) == []


def test_model_index_holds_the_runs_scores_and_signatures(run_dir, run):
    metadata, _ = split_card((run_dir / "README.md").read_text(encoding="utf-8"))
    (model,) = metadata["model-index"]
    assert model["name"] == "vaswani-tiny"
    by_split = {result["dataset"]["split"]: result for result in model["results"]}
    assert set(by_split) == {"validation", "test"}
    for split, result in by_split.items():
        scores = run.results.scores[split]
        assert result["task"] == {"type": "translation", "name": "Translation en-tt"}
        assert result["dataset"]["type"] == result["dataset"]["name"] == "hf-vaswani-toy"
        metrics = {metric["type"]: metric for metric in result["metrics"]}
        assert metrics["sacrebleu"]["value"] == round(scores.bleu, 2)
        assert metrics["chrf"]["value"] == round(scores.chrf, 2)
        assert metrics["sacrebleu"]["args"] == {"signature": scores.bleu_signature}
        assert metrics["chrf"]["args"] == {"signature": scores.chrf_signature}
        assert "tok:13a" in metrics["sacrebleu"]["args"]["signature"]
        assert "version:" in metrics["sacrebleu"]["args"]["signature"]


def test_huggingface_hub_reads_the_same_eval_results(run_dir, run):
    from huggingface_hub import ModelCard

    card = ModelCard((run_dir / "README.md").read_text(encoding="utf-8"))
    results = {(r.dataset_split, r.metric_type): r for r in card.data.eval_results}
    assert results[("test", "sacrebleu")].metric_value == round(run.results.scores["test"].bleu, 2)
    assert results[("validation", "chrf")].metric_args == {"signature": run.results.scores["validation"].chrf_signature}
    assert card.data.library_name == "transformers" and card.data.language == ["en"]


def test_body_is_filled_in(run_dir, run):
    _, body = split_card((run_dir / "README.md").read_text(encoding="utf-8"))
    assert PLACEHOLDER.findall(body) == []
    assert body.lstrip().startswith("# vaswani-tiny: a Transformer (Vaswani et al., 2017) for English → Toy Teutonic")
    test = run.results.scores["test"]
    assert f"| test | {test.sentences} | {test.bleu:.2f} | {test.chrf:.2f} |" in body
    assert f"sacreBLEU signature: `{test.bleu_signature}`" in body
    assert "| checkpoint averaging | none (--average_last_n 0) |" in body
    assert "| learning-rate schedule | stock `inverse_sqrt`:" in body  # the scheduler's name, not its enum's repr
    for sample in run.samples:
        assert sample.source in body


def test_metadata_for_real_languages_and_awkward_values(run):
    """A Norwegian->German run on local files: `no` must stay a string (YAML 1.1 reads a bare `no` as false),
    and names with `: ` or `|` must not break the YAML or the tables."""
    run = copy.deepcopy(run)
    run.source_lang, run.target_lang = "no", "de"
    run.data_args.data_dir = "/data/nb-de: v2"
    run.samples = [Sample(source="a | b", hypothesis="c", reference="d")]
    metadata, body = split_card(render_model_card(run, "model: v1"))
    assert metadata["language"] == ["no", "de"]
    assert metadata["datasets"] == ["nb-de: v2"]
    assert metadata["model-index"][0]["name"] == "model: v1"
    assert "constructed-language" not in metadata["tags"]
    assert "| a \\| b | c | d |" in body

    run.data_args.data_dir, run.data_args.dataset_name, run.data_args.dataset_config_name = None, "wmt/wmt14", "de-en"
    metadata, _ = split_card(render_model_card(run, "m"))
    assert metadata["datasets"] == ["wmt/wmt14"]  # a Hub dataset id keeps its namespace
    assert metadata["model-index"][0]["results"][0]["dataset"]["config"] == "de-en"


def _sections(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def _table_first_column(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def test_example_card_is_consistent_with_the_template(run_dir):
    example = (REPO_ROOT / "model_card.md").read_text(encoding="utf-8")
    template = TEMPLATE.read_text(encoding="utf-8")
    generated = (run_dir / "README.md").read_text(encoding="utf-8")
    example_metadata, example_body = split_card(example)
    generated_metadata, generated_body = split_card(generated)

    # The same metadata fields, and the example's first lines say it is an example filled in by training.
    assert list(example_metadata) == list(generated_metadata)
    assert example.splitlines()[1].startswith("# EXAMPLE model card")
    assert "vaswani-train" in example[:600] and "README.md" in example[:600]
    assert example_metadata["model-index"][0]["results"][0]["metrics"][0]["args"]["signature"].startswith("nrefs:")
    assert PLACEHOLDER.findall(example_body) == []

    # The same sections and the same rows of the deviation table as the cards training writes.
    assert _sections(example_body) == _sections(generated_body) == _sections(template)
    header = "| what | this model | paper | why |"
    assert _table_first_column(example_body, header) == _table_first_column(template, header)
    assert _table_first_column(generated_body, header) == _table_first_column(template, header)
