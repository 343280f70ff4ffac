"""The shipped `multi30k` recipes read Multi30K from the Hub (`bentrevett/multi30k`), so they work from a wheel, and
`--data_dir` on the command line replaces the recipe's dataset with local files (issue 21, point 6).

The Hub is the local stand-in (tests/hub_stub.py) holding a small dataset laid out as bentrevett/multi30k is:
`train.jsonl`, `val.jsonl`, `test.jsonl` with one `en` and one `de` text column, and a README. The recipe's data path
(the front door's checks, the argument parser with the recipe, `load_parallel_data`) runs in subprocesses whose
HF_ENDPOINT is the stub and whose HF_HOME starts empty, then again offline from what the first run downloaded.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.recipe.options import as_request, parse_arguments, split_recipe
from tests.conftest import MULTI30K_DIR, REPO_ROOT
from tests.hub_stub import HubStub, hub_env

REPO_ID = "bentrevett/multi30k"
RECIPES = ["multi30k", "multi30k-full"]
SPLITS = {"train": 24, "validation": 4, "test": 3}
FILES = {"train": "train.jsonl", "validation": "val.jsonl", "test": "test.jsonl"}


def _corpus() -> dict[str, list[dict[str, str]]]:
    return {
        split: [{"en": f"A dog number {i} runs in {split}.", "de": f"Ein Hund Nummer {i} läuft in {split}."}
                for i in range(size)]
        for split, size in SPLITS.items()
    }  # fmt: skip


_UPLOAD = textwrap.dedent(
    """
    import sys
    import huggingface_hub

    huggingface_hub.create_repo(sys.argv[1], repo_type="dataset")
    huggingface_hub.upload_folder(repo_id=sys.argv[1], folder_path=sys.argv[2], repo_type="dataset")
    """
)

# The recipe's data path as vaswani-train runs it: the front door, then the parser, then the loader.
_LOAD = textwrap.dedent(
    """
    import json, sys
    from hf_vaswani_training.data.corpora import load_parallel_data
    from hf_vaswani_training.recipe.options import parse_arguments, preflight_train

    request = preflight_train(json.loads(sys.argv[1]))
    model_args, data_args, training_args = parse_arguments(request)
    splits, stats = load_parallel_data(data_args, seed=training_args.seed)
    print("RESULT " + json.dumps({
        "dataset_name": data_args.dataset_name,
        "data_dir": data_args.data_dir,
        "sources": {split: list(s.sources) for split, s in stats.items()},
        "pairs": {split: list(dataset["translation"]) for split, dataset in splits.items()},
    }))
    """
)


def _run(args: list[str], env: dict) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", _LOAD, json.dumps(args)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return json.loads(completed.stdout.rsplit("RESULT ", 1)[1])


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi30k_hub")
    folder = root / "multi30k"
    folder.mkdir()
    corpus = _corpus()
    for split, rows in corpus.items():
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (folder / FILES[split]).write_text(lines, encoding="utf-8")
    (folder / "README.md").write_text("---\nlanguage:\n- en\n- de\n---\n\n# Multi30K (a few pairs)\n", encoding="utf-8")
    with HubStub() as stub:
        upload = subprocess.run(
            [sys.executable, "-c", _UPLOAD, REPO_ID, str(folder)], env=hub_env(stub.url, root / "up"),
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert upload.returncode == 0, upload.stderr[-3000:]
        yield stub, corpus, root


def _expected_pairs(corpus: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
    return {split: [{"de": row["de"], "en": row["en"]} for row in rows] for split, rows in corpus.items()}


def test_the_recipe_reads_multi30k_from_the_hub_then_offline(hub):
    stub, corpus, root = hub
    home = root / "home"
    stub.requests.clear()
    online = _run(["multi30k", "--output_dir", str(root / "out")], hub_env(stub.url, home))
    assert online["dataset_name"] == REPO_ID and online["data_dir"] is None
    assert online["pairs"] == _expected_pairs(corpus)  # de -> en, every split, in order
    assert online["sources"]["validation"] == [f"{REPO_ID}[validation]"]
    assert any(path.startswith(f"/datasets/{REPO_ID}/resolve/") for _, path, _ in stub.requests)
    assert not stub.unhandled, stub.unhandled

    stub.requests.clear()
    offline = _run(["multi30k", "--output_dir", str(root / "out")], dict(hub_env(stub.url, home), HF_HUB_OFFLINE="1"))
    assert offline == online
    assert stub.requests == []  # nothing reached the Hub


def _write_multi30k_layout(folder: Path, corpus: dict[str, list[dict[str, str]]]) -> None:
    """The layout of ../shared/data/multi30k (see its README): gzipped line-aligned X.de.gz / X.en.gz per split."""
    folder.mkdir()
    names = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
    for split, rows in corpus.items():
        for lang in ("de", "en"):
            with gzip.open(folder / f"{names[split]}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(row[lang] + "\n" for row in rows))


def test_data_dir_on_the_command_line_replaces_the_recipes_dataset_and_never_asks_the_hub(hub):
    stub, corpus, root = hub
    folder = root / "local-multi30k"
    _write_multi30k_layout(folder, {split: rows[:2] for split, rows in corpus.items()})
    stub.requests.clear()
    result = _run(["multi30k", "--data_dir", str(folder), "--output_dir", str(root / "out")],
                  hub_env(stub.url, root / "home-local"))  # fmt: skip
    assert result["dataset_name"] is None and result["data_dir"] == str(folder)
    assert result["pairs"] == _expected_pairs({split: rows[:2] for split, rows in corpus.items()})
    assert result["sources"]["test"][0] == str(folder / "test_2016_flickr.de.gz")
    assert stub.requests == []  # the recipe's Hub dataset was dropped before the front door's Hub check


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_shipped_recipes_name_the_hub_dataset(recipe):
    _, values, _ = split_recipe([recipe])
    assert values["dataset_name"] == REPO_ID and "data_dir" not in values
    assert (values["source_lang"], values["target_lang"]) == ("de", "en")


@pytest.mark.parametrize(
    "argv",
    [["--data_dir", "elsewhere"], ["--data_dir=elsewhere"], ["--train_file", "x.jsonl"], ["--test-file", "t"]],
)
def test_local_files_on_the_command_line_drop_the_recipes_dataset(argv):
    _, values, rest = split_recipe(["multi30k", *argv])
    assert not {"dataset_name", "dataset_config_name", "source_column", "target_column"} & set(values)
    assert values["source_lang"] == "de" and rest == argv


def test_a_dataset_on_the_command_line_drops_the_recipes_files():
    _, values, _ = split_recipe(["wmt14-en-de-base", "--dataset_name", "wmt/wmt14", "--dataset_config_name", "de-en"])
    assert "data_dir" not in values
    _, values, _ = split_recipe(["wmt14-en-de-base"])
    assert values["data_dir"] == "data/wmt14-en-de"


@pytest.mark.skipif(not MULTI30K_DIR.is_dir(), reason=f"Multi30K not found at {MULTI30K_DIR}")
def test_recipe_with_data_dir_reads_what_the_old_recipe_read(tmp_path):
    """`vaswani-train multi30k --data_dir ../shared/data/multi30k` gives the data the recipe read before it named
    the Hub dataset (data_dir ../shared/data/multi30k, de -> en)."""
    _, data_args, _ = parse_arguments(
        as_request(["multi30k", "--data_dir", str(MULTI30K_DIR), "--output_dir", str(tmp_path / "out")])
    )
    assert data_args.dataset_name is None
    now = load_parallel_data(data_args, cache_dir=tmp_path / "cache")
    before = load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", data_dir=str(MULTI30K_DIR)), cache_dir=tmp_path / "cache"
    )
    assert now.stats == before.stats
    assert {split: s.num_pairs for split, s in now.stats.items()} == {"train": 29000, "validation": 1014, "test": 1000}
    for split in now.splits:
        assert list(now.splits[split]["translation"]) == list(before.splits[split]["translation"])
