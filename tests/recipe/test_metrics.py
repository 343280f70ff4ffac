"""The offline translation metric against sacrebleu computed directly, and its loading through `evaluate`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import sacrebleu

from hf_vaswani_training.recipe.metrics import TRANSLATION_METRIC_PATH, compute_translation_scores
from tests.conftest import REPO_ROOT

PREDICTIONS = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Resumption of the session was declared.",
]
REFERENCES = [
    "The cat sat on the mat.",
    "The quick brown fox jumped over the lazy dog.",
    "I declare resumed the session of the European Parliament.",
]
SECOND_REFERENCES = [
    "A cat was sitting on the mat.",
    "A fast brown fox leaps over the lazy dog.",
    "The session is resumed.",
]


def test_scores_equal_sacrebleu_corpus_functions() -> None:
    scores = compute_translation_scores(PREDICTIONS, REFERENCES)
    bleu = sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES])
    chrf = sacrebleu.corpus_chrf(PREDICTIONS, [REFERENCES])
    assert 0 < scores["bleu"] < 100
    assert scores["bleu"] == pytest.approx(bleu.score)
    assert scores["bleu_precisions"] == pytest.approx(bleu.precisions)
    assert scores["bleu_bp"] == pytest.approx(bleu.bp)
    assert (scores["sys_len"], scores["ref_len"]) == (bleu.sys_len, bleu.ref_len)
    assert scores["chrf"] == pytest.approx(chrf.score)


def test_multiple_references_equal_sacrebleu() -> None:
    per_prediction = [list(pair) for pair in zip(REFERENCES, SECOND_REFERENCES, strict=True)]
    scores = compute_translation_scores(PREDICTIONS, per_prediction)
    streams = [REFERENCES, SECOND_REFERENCES]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, streams).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(PREDICTIONS, streams).score)
    assert scores["bleu_signature"].startswith("nrefs:2|")
    # A second reference can only add matching n-grams.
    assert scores["bleu"] > compute_translation_scores(PREDICTIONS, REFERENCES)["bleu"]


def test_variable_number_of_references_equals_sacrebleu_with_gaps() -> None:
    per_prediction = [
        [REFERENCES[0], SECOND_REFERENCES[0]],
        [REFERENCES[1]],
        [REFERENCES[2], SECOND_REFERENCES[2]],
    ]
    scores = compute_translation_scores(PREDICTIONS, per_prediction)
    # sacreBLEU's documented form of a missing reference: None in that stream.
    streams = [REFERENCES, [SECOND_REFERENCES[0], None, SECOND_REFERENCES[2]]]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, streams).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(PREDICTIONS, streams).score)
    assert scores["bleu_signature"].startswith("nrefs:var|")
    with pytest.raises(ValueError, match="prediction 1 has no reference"):
        compute_translation_scores(PREDICTIONS, [[REFERENCES[0]], [], [REFERENCES[2]]])


def test_perfect_prediction_scores_100() -> None:
    scores = compute_translation_scores(REFERENCES, REFERENCES)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["bleu_bp"] == pytest.approx(1.0)


def test_signatures_name_tokenizer_and_case() -> None:
    scores = compute_translation_scores(PREDICTIONS, REFERENCES)
    assert "tok:13a" in scores["bleu_signature"].split("|")
    assert "case:mixed" in scores["bleu_signature"].split("|")
    assert f"version:{sacrebleu.__version__}" in scores["bleu_signature"]
    assert "case:mixed" in scores["chrf_signature"].split("|")
    intl = compute_translation_scores(PREDICTIONS, REFERENCES, tokenize="intl")
    assert "tok:intl" in intl["bleu_signature"].split("|")


def test_case_matters_unless_lowercase() -> None:
    lowered = [prediction.lower() for prediction in REFERENCES]
    cased = compute_translation_scores(lowered, REFERENCES)
    assert cased["bleu"] < 100
    assert cased["chrf"] < 100
    uncased = compute_translation_scores(lowered, REFERENCES, lowercase=True)
    assert uncased["bleu"] == pytest.approx(100.0)
    assert "case:lc" in uncased["bleu_signature"].split("|")


def test_mismatched_lengths_name_both_counts() -> None:
    with pytest.raises(ValueError, match=r"3 predictions but 2 references"):
        compute_translation_scores(PREDICTIONS, REFERENCES[:2])


def test_a_single_string_is_rejected() -> None:
    with pytest.raises(TypeError, match="lists of strings"):
        compute_translation_scores(PREDICTIONS[0], REFERENCES[0])


@pytest.fixture(scope="module")
def offline_evaluate_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Load the metric with `evaluate.load` in a fresh process that is offline and cannot open a socket.

    A fresh process because evaluate and huggingface_hub read the offline switches and cache paths at import.
    """
    cache_home = tmp_path_factory.mktemp("hf_home")
    script = textwrap.dedent(
        f"""
        import importlib.abc, json, socket, sys

        def refuse(*args, **kwargs):
            raise OSError("test: network access attempted")

        socket.socket.connect = refuse
        socket.create_connection = refuse

        class BlockRepositoryPackages(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("training", "hf_vaswani"):
                    raise ImportError(f"test: the metric module imported {{name}}")
                return None

        predictions, references = {PREDICTIONS!r}, {REFERENCES!r}
        second_refs = {SECOND_REFERENCES!r}

        # evaluate imports a copy of the file from its cache, where this repository may not be importable.
        sys.meta_path.insert(0, BlockRepositoryPackages())
        import evaluate

        standalone = evaluate.load({str(TRANSLATION_METRIC_PATH)!r}, keep_in_memory=True)
        standalone_scores = standalone.compute(predictions=predictions, references=references)
        sys.meta_path.pop(0)

        from hf_vaswani_training.recipe.metrics import load_translation_metric

        metric = load_translation_metric()
        results = {{
            "standalone": standalone_scores,
            "single": metric.compute(predictions=predictions, references=references),
            "multi": metric.compute(
                predictions=predictions, references=[list(pair) for pair in zip(references, second_refs)]
            ),
            "lowercase": metric.compute(
                predictions=[p.lower() for p in predictions], references=references, lowercase=True
            ),
            "module_file": type(metric).__module__,
        }}
        try:
            metric.compute(predictions=predictions, references=references[:2])
        except ValueError as error:
            results["mismatch_error"] = str(error)
        print(json.dumps(results))
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(cache_home),
        "HF_MODULES_CACHE": str(cache_home / "modules"),
    }
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    results["cache_home"] = cache_home
    return results


def assert_same_scores(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, str):
            assert actual[key] == value, key
        else:
            assert actual[key] == pytest.approx(value), key


def test_evaluate_load_offline_equals_direct_computation(offline_evaluate_results: dict) -> None:
    expected = compute_translation_scores(PREDICTIONS, REFERENCES)
    assert_same_scores(offline_evaluate_results["standalone"], expected)
    assert_same_scores(offline_evaluate_results["single"], expected)
    per_prediction = [[r, s] for r, s in zip(REFERENCES, SECOND_REFERENCES, strict=True)]
    assert_same_scores(offline_evaluate_results["multi"], compute_translation_scores(PREDICTIONS, per_prediction))
    lowered = [prediction.lower() for prediction in PREDICTIONS]
    assert_same_scores(
        offline_evaluate_results["lowercase"], compute_translation_scores(lowered, REFERENCES, lowercase=True)
    )


def test_evaluate_loads_the_shipped_file(offline_evaluate_results: dict) -> None:
    # evaluate imports a copy of the local script from its modules cache, named after the file.
    assert offline_evaluate_results["module_file"].endswith(".translation_metrics")
    copies = list((offline_evaluate_results["cache_home"] / "modules").rglob(TRANSLATION_METRIC_PATH.name))
    assert [copy.read_text() for copy in copies] == [TRANSLATION_METRIC_PATH.read_text()]


def test_evaluate_mismatched_lengths_name_both_counts(offline_evaluate_results: dict) -> None:
    message = offline_evaluate_results["mismatch_error"]
    assert "predictions (3)" in message and "references (2)" in message
