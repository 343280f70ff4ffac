"""training.data.prepare_wmt (WMT files -> the --data_dir layout) and the WMT 2014 recipes, end to end on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.corpora import ParallelDataError, load_parallel_data
from hf_vaswani_training.data.prepare_wmt import main as prepare_main
from hf_vaswani_training.data.prepare_wmt import prepare
from hf_vaswani_training.recipe.options import parse_arguments
from hf_vaswani_training.recipe.train import load_preset, main
from tests.conftest import REPO_ROOT

RECIPES = REPO_ROOT / "training" / "recipe" / "recipes"


def _pair(prefix: Path, en: list[str], de: list[str]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.en").write_text("".join(f"{line}\n" for line in en), encoding="utf-8")
    Path(f"{prefix}.de").write_text("".join(f"{line}\n" for line in de), encoding="utf-8")


def _sgm(path: Path, lang: str, segments: list[str]) -> None:
    body = "".join(f'<seg id="{i}">{text}</seg>\n' for i, text in enumerate(segments, start=1))
    path.write_text(
        f'<srcset setid="newstest2014" srclang="any">\n<doc sysid="ref" docid="a" genre="news" origlang="{lang}">\n'
        f"<p>\n{body}</p>\n</doc>\n</srcset>\n",
        encoding="utf-8",
    )


def test_corpora_are_concatenated_and_sgml_test_sets_extracted(tmp_path):
    _pair(tmp_path / "wmt" / "europarl-v7.de-en", ["a house", "the cat"], ["ein Haus", "die Katze"])
    _pair(tmp_path / "wmt" / "commoncrawl.de-en", ["good day"], ["guten Tag"])
    _pair(tmp_path / "wmt" / "newstest2013", ["one", "two"], ["eins", "zwei"])
    _sgm(tmp_path / "wmt" / "newstest2014-deen-src.en.sgm", "en", ["Fish &amp; chips", "Yes"])
    _sgm(tmp_path / "wmt" / "newstest2014-deen-ref.de.sgm", "de", ["Fisch &amp; Pommes", "Ja"])
    out = tmp_path / "data" / "wmt14-en-de"
    code = prepare_main(
        ["--source_lang", "en", "--target_lang", "de", "--out", str(out),
         "--train", str(tmp_path / "wmt" / "europarl-v7.de-en"), str(tmp_path / "wmt" / "commoncrawl.de-en"),
         "--validation", str(tmp_path / "wmt" / "newstest2013"),
         "--test", f"{tmp_path / 'wmt' / 'newstest2014-deen-src.en.sgm'},{tmp_path / 'wmt' / 'newstest2014-deen-ref.de.sgm'}"]
    )  # fmt: skip
    assert code == 0
    raw = load_parallel_data(
        DataArguments(source_lang="en", target_lang="de", data_dir=out), cache_dir=tmp_path / "cache"
    ).splits
    assert [p["de"] for p in raw["train"]["translation"]] == ["ein Haus", "die Katze", "guten Tag"]
    assert [p["en"] for p in raw["validation"]["translation"]] == ["one", "two"]
    assert raw["test"][0]["translation"] == {"en": "Fish & chips", "de": "Fisch & Pommes"}
    assert not list((tmp_path / "data").glob(".tmp-*"))


def test_misaligned_corpus_stops_with_both_files_and_leaves_no_output(tmp_path, capsys):
    _pair(tmp_path / "wmt" / "bad", ["one", "two", "three"], ["eins", "zwei"])
    out = tmp_path / "out"
    with pytest.raises(ParallelDataError, match=r"bad\.en has 3 lines but .*bad\.de has 2 lines"):
        prepare(out, "en", "de", train=[str(tmp_path / "wmt" / "bad")])
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "wmt"]
    code = prepare_main(["--source_lang", "en", "--target_lang", "de", "--out", str(out), "--train",
                         str(tmp_path / "wmt" / "bad")])  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "not line-aligned" in error


@pytest.mark.parametrize("size,steps,dropout,average", [("base", 100_000, 0.1, 5), ("big", 300_000, 0.3, 20)])
def test_wmt14_recipes_have_the_papers_settings(size, steps, dropout, average):
    model_args, data_args, training_args = parse_arguments([str(RECIPES / f"wmt14-en-de-{size}.json")])
    assert model_args.preset == size and load_preset(size)["d_model"] == {"base": 512, "big": 1024}[size]
    assert model_args.vocab_size == 37000 and model_args.dropout == dropout  # §5.1, Table 3 (P_drop)
    assert training_args.max_steps == steps and training_args.warmup_steps == 4000  # §5.2, §5.3
    assert training_args.label_smoothing_factor == 0.1  # §5.4
    assert training_args.average_last_n == average <= training_args.save_total_limit  # §6.1
    assert training_args.generation_num_beams == 4 and training_args.length_penalty == 0.6  # §6.1
    # ~25k source tokens per update on the paper's 8 GPUs: max_tokens x accumulation x 8 processes.
    per_update = training_args.max_tokens * training_args.gradient_accumulation_steps * 8
    assert 24_000 <= per_update <= 26_000
    assert (data_args.source_lang, data_args.target_lang) == ("en", "de")


@pytest.mark.slow
def test_base_recipe_runs_end_to_end_on_a_synthetic_wmt_corpus(tmp_path):
    """prepare_wmt on the benchmark's synthetic WMT-shaped corpus, then the base recipe with a tiny override."""
    from benchmarks.lib.corpus import write_corpus

    corpus = write_corpus(tmp_path / "synthetic", 600, num_types=500, eval_pairs=(20, 20))
    data_dir = tmp_path / "wmt14-en-de"
    counts = prepare(data_dir, "en", "de", train=[str(corpus / "train")], validation=str(corpus / "valid"),
                     test=str(corpus / "test"))  # fmt: skip
    assert counts == {"train": 600, "valid": 20, "test": 20}
    out = tmp_path / "run"
    results = main(
        [str(RECIPES / "wmt14-en-de-base.json"), "--data_dir", str(data_dir), "--output_dir", str(out),
         "--preset", "tiny", "--vocab_size", "400", "--max_tokens", "1024", "--max_steps", "4", "--warmup_steps", "2",
         "--save_steps", "2", "--save_total_limit", "5", "--average_last_n", "2", "--max_source_length", "128",
         "--max_target_length", "128", "--eval_max_tokens", "2000", "--report_to", "none"]
    )  # fmt: skip
    assert results["train_steps"] == 4
    assert results["averaged_checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    assert "bleu" in results["test"] and results["test"]["sentences"] == 20
    run = json.loads((out / "results.json").read_text())
    assert run["training_args"]["label_smoothing_factor"] == 0.1 and run["training_args"]["generation_num_beams"] == 4
