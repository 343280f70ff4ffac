"""`--dataset_name` with a dataset ON THE HUB, end to end against the local Hub stand-in (tests/hub_stub.py).

A miniature of `wmt/wmt14` is uploaded to the stub as that repository is laid out (one folder of parquet files per
language pair, a `translation` column of {"de", "en"} dicts, a README whose `configs:` front matter maps each
configuration to its files). Then, in subprocesses whose HF_ENDPOINT is the stub and whose HF_HOME (so also the
`datasets` cache) starts empty:

- `vaswani-train --dataset_name user/wmt-mini --dataset_config_name de-en` trains from the files it downloaded;
- the same run with HF_HUB_OFFLINE=1 trains from the downloaded copy without a single request to the Hub;
- a configuration the dataset does not have, a missing one and a missing repository are one-line errors;
- `vaswani-prepare-wmt --dataset_name ...` writes the training layout from the Hub dataset.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, Features, Translation

from hf_vaswani_training.data.prepare_wmt import prepare
from hf_vaswani_training.data.toy_corpus import generate_corpus
from tests.conftest import REPO_ROOT, assert_one_line_error, make_hub_folder
from tests.hub_stub import HubStub, hub_env

REPO_ID = "user/wmt-mini"
SIZES = {"train": 60, "validation": 6, "test": 6}
TRAIN_SHARDS = 2  # wmt/wmt14's de-en train split is several parquet files too
# The smallest run that trains, evaluates and writes a model: the data path is what is tested.
RUN = ["--preset", "tiny", "--vocab_size", "200", "--max_tokens", "256", "--max_steps", "2", "--warmup_steps", "1",
       "--save_strategy", "no", "--report_to", "none", "--dataloader_num_workers", "0", "--seed", "3",
       "--max_length_offset", "2"]  # fmt: skip
EN_DE = ["--source_lang", "en", "--target_lang", "de"]
RUN += EN_DE
DE_EN = ["--dataset_name", REPO_ID, "--dataset_config_name", "de-en"]


def hub_data(repo_id: str, config: str | None = None) -> list[str]:
    return ["--dataset_name", repo_id] + ([] if config is None else ["--dataset_config_name", config])


def _corpus() -> dict[str, list[dict[str, str]]]:
    """The toy corpus's pairs as German-English: its target language stands in for German."""
    corpus = generate_corpus(num_train=SIZES["train"], num_validation=SIZES["validation"], num_test=SIZES["test"])
    return {split: [{"de": row["tt"], "en": row["en"]} for row in rows] for split, rows in corpus.items()}


def _readme(configs: dict[str, dict[str, int]]) -> str:
    """A dataset card as wmt/wmt14's: `dataset_info` (features, split sizes) and `configs` (data files) per pair."""
    metadata = {
        "language": ["de", "en", "fr"],
        "task_categories": ["translation"],
        "pretty_name": "WMT14 (a miniature)",
        "dataset_info": [
            {
                "config_name": name,
                "features": [{"name": "translation", "dtype": {"translation": {"languages": name.split("-")}}}],
                "splits": [{"name": split, "num_examples": size} for split, size in sizes.items()],
            }
            for name, sizes in configs.items()
        ],
        "configs": [
            {
                "config_name": name,
                "data_files": [{"split": split, "path": f"{name}/{split}-*"} for split in sizes],
            }
            for name, sizes in configs.items()
        ],
    }
    return f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n\n# WMT14, a few pairs for tests\n"


def write_wmt_like_folder(folder: Path) -> dict[str, list[dict[str, str]]]:
    """The repository's files: de-en/{train,validation,test}-*.parquet, fr-en/train-*.parquet and README.md."""
    corpus = _corpus()
    for split, rows in corpus.items():
        shards = TRAIN_SHARDS if split == "train" else 1
        for index in range(shards):
            path = folder / "de-en" / f"{split}-{index:05d}-of-{shards:05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            features = Features({"translation": Translation(languages=["de", "en"])})
            Dataset.from_dict({"translation": rows[index::shards]}, features=features).to_parquet(str(path))
    fr = [{"fr": f"phrase {i}", "en": f"sentence {i}"} for i in range(4)]
    features = Features({"translation": Translation(languages=["en", "fr"])})
    (folder / "fr-en").mkdir()
    Dataset.from_dict({"translation": fr}, features=features).to_parquet(str(folder / "fr-en" / "train.parquet"))
    configs = {"de-en": {split: len(rows) for split, rows in corpus.items()}, "fr-en": {"train": len(fr)}}
    (folder / "README.md").write_text(_readme(configs), encoding="utf-8")
    return corpus


def _run(args: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _ok(completed: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return completed


_UPLOAD = textwrap.dedent(
    """
    import sys
    import huggingface_hub

    url = huggingface_hub.create_repo(sys.argv[1], repo_type="dataset")
    huggingface_hub.upload_folder(repo_id=sys.argv[1], folder_path=sys.argv[2], repo_type="dataset",
                                  commit_message="WMT14 miniature")
    print(url)
    """
)

# Several commands in one process (each is what its console script runs): stderr and status of each, as JSON.
_COMMANDS = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from hf_vaswani_training import cli

    results = []
    for command, argv in json.loads(sys.argv[1]):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = getattr(cli, command)(argv)
        results.append({"status": status, "stderr": stderr.getvalue()})
    print("RESULTS " + json.dumps(results))
    """
)


def run_commands(commands: list[tuple[str, list[str]]], env: dict) -> list[dict]:
    completed = _ok(_run([sys.executable, "-c", _COMMANDS, json.dumps(commands)], env))
    return json.loads(completed.stdout.rsplit("RESULTS ", 1)[1])


def assert_error(result: dict, command: str, *fragments: str) -> str:
    """The subprocess's exit status and stderr, checked as the in-process CLI tests check theirs."""
    return assert_one_line_error(result["status"], result["stderr"], command, *fragments)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The stub Hub with user/wmt-mini uploaded by `huggingface_hub.upload_folder(repo_type="dataset")`."""
    root = tmp_path_factory.mktemp("hub_dataset")
    corpus = write_wmt_like_folder(root / "wmt-mini")
    with HubStub() as stub:
        upload_env = hub_env(stub.url, root / "up")
        upload = _ok(_run([sys.executable, "-c", _UPLOAD, REPO_ID, str(root / "wmt-mini")], upload_env))
        assert upload.stdout.strip() == f"{stub.url}/datasets/{REPO_ID}"
        (root / "upload_requests.json").write_text(json.dumps(stub.requests), encoding="utf-8")
        yield stub, corpus, root


@pytest.fixture(scope="module")
def online_run(hub):
    """A training run from the Hub dataset with an empty HF_HOME; its output folder, HF_HOME and the requests."""
    stub, _, root = hub
    stub.requests.clear()
    hf_home, output_dir = root / "home", root / "run-online"
    _ok(_run([sys.executable, "-m", "hf_vaswani_training.train", *RUN, *DE_EN, "--output_dir", str(output_dir)],
             hub_env(stub.url, hf_home)))  # fmt: skip
    return output_dir, hf_home, list(stub.requests)


def test_the_stub_holds_the_dataset_as_uploaded(hub):
    stub, _, root = hub
    files = stub.files(REPO_ID, repo_type="dataset")
    expected = {str(p.relative_to(root / "wmt-mini")) for p in (root / "wmt-mini").rglob("*") if p.is_file()}
    assert set(files) == expected | {".gitattributes"}
    assert "de-en/train-00001-of-00002.parquet" in files
    assert [commit.message for commit in stub.history(REPO_ID, repo_type="dataset")] == [
        "WMT14 miniature",
        "initial commit",
    ]
    assert REPO_ID not in stub.repos  # datasets and models are separate namespaces
    # The parquet files went through git-LFS, as the Hub's .gitattributes of a dataset repo asks.
    assert stub.history(REPO_ID, repo_type="dataset")[0].lfs == {path for path in files if path.endswith(".parquet")}
    uploads = json.loads((root / "upload_requests.json").read_text(encoding="utf-8"))
    assert ["POST", f"/datasets/{REPO_ID}.git/info/lfs/objects/batch", 200] in uploads
    assert not stub.unhandled


_PUSH_TO_HUB = textwrap.dedent(
    """
    import json, sys
    import datasets

    pairs = json.loads(sys.argv[1])
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    splits = {split: datasets.Dataset.from_dict({"translation": rows}, features=features) for split, rows in pairs.items()}
    datasets.DatasetDict(splits).push_to_hub("user/pushed", config_name="de-en")
    loaded = datasets.load_dataset("user/pushed", "de-en")
    print("LOADED " + json.dumps({split: list(loaded[split]["translation"]) for split in loaded}))
    """
)


def test_push_to_hub_then_load_dataset(tmp_path):
    """`DatasetDict.push_to_hub` (LFS uploads of parquet shards from temporary files) and `load_dataset` back."""
    pairs = {split: rows[:5] for split, rows in _corpus().items()}
    with HubStub() as stub:
        completed = _ok(_run([sys.executable, "-c", _PUSH_TO_HUB, json.dumps(pairs)], hub_env(stub.url, tmp_path)))
        files = stub.files("user/pushed", repo_type="dataset")
        assert not stub.unhandled, stub.unhandled
    assert json.loads(completed.stdout.rsplit("LOADED ", 1)[1]) == pairs
    assert {f"de-en/{split}-00000-of-00001.parquet" for split in pairs} <= set(files)
    metadata = yaml.safe_load(files["README.md"].decode().split("---\n")[1])
    assert metadata["configs"][0]["config_name"] == "de-en"


def test_train_from_a_hub_dataset(hub, online_run):
    stub, corpus, _ = hub
    output_dir, hf_home, requests = online_run
    assert not stub.unhandled, stub.unhandled
    downloaded = {
        path.split("/resolve/", 1)[1].split("/", 1)[1]
        for method, path, status in requests
        if method == "GET" and path.startswith(f"/datasets/{REPO_ID}/resolve/") and status == 200
    }
    de_en = {f"de-en/train-0000{i}-of-00002.parquet" for i in range(2)}
    de_en |= {"de-en/validation-00000-of-00001.parquet", "de-en/test-00000-of-00001.parquet"}
    assert de_en <= downloaded, requests
    assert "fr-en/train.parquet" not in downloaded  # the configuration chose the files
    assert (hf_home / "datasets" / "user___wmt-mini" / "de-en").is_dir()  # the `datasets` cache of that HF_HOME

    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    for split, rows in corpus.items():
        stats = results["data_stats"][split]
        assert stats["num_pairs"] == len(rows) and stats["sources"] == [f"{REPO_ID} (de-en)[{split}]"]
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["datasets"] == [REPO_ID]
    assert metadata["model-index"][0]["results"][0]["dataset"]["config"] == "de-en"
    assert (output_dir / "model.safetensors").is_file()


def test_a_second_run_offline_uses_the_downloaded_copy(hub, online_run):
    stub, _, root = hub
    first_output, hf_home, _ = online_run
    stub.requests.clear()
    env = dict(hub_env(stub.url, hf_home), HF_HUB_OFFLINE="1")
    output_dir = root / "run-offline"
    # fr-en is on the Hub but was never downloaded: offline, it is not there.
    results = run_commands(
        [
            ("train", [*RUN, *DE_EN, "--output_dir", str(output_dir)]),
            ("train", [*RUN, *hub_data(REPO_ID, "fr-en"), "--output_dir", str(root / "run-offline-fr")]),
        ],
        env,
    )
    assert results[0]["status"] == 0, results[0]["stderr"][-5000:]
    assert stub.requests == []  # nothing reached the Hub
    first = json.loads((first_output / "results.json").read_text(encoding="utf-8"))
    second = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    assert second["data_stats"] == first["data_stats"]
    assert_error(results[1], "train", f"--dataset_name {REPO_ID} --dataset_config_name fr-en", "HF_HUB_OFFLINE")
    assert not (root / "run-offline-fr").exists()


def test_hub_dataset_errors_are_one_line(hub, tmp_path):
    stub, _, _ = hub
    results = run_commands(
        [
            ("train", [*RUN, *hub_data(REPO_ID, "cs-en"), "--output_dir", str(tmp_path / "a")]),
            ("train", [*RUN, *hub_data(REPO_ID), "--output_dir", str(tmp_path / "b")]),
            ("train", [*RUN, *hub_data("user/no-such-wmt"), "--output_dir", str(tmp_path / "c")]),
            ("prepare_wmt", [*EN_DE, *hub_data(REPO_ID, "cs-en"), "--out", str(tmp_path / "d")]),
            ("prepare_wmt", [*EN_DE, *hub_data("user/no-such-wmt", "de-en"), "--out", str(tmp_path / "e")]),
        ],
        hub_env(stub.url, tmp_path / "home"),
    )
    assert_error(results[0], "train", "--dataset_config_name cs-en", REPO_ID, "de-en, fr-en")
    assert_error(results[1], "train", f"--dataset_name {REPO_ID}", "--dataset_config_name", "de-en, fr-en")
    assert_error(results[2], "train", "--dataset_name user/no-such-wmt", "no such repository on the Hub")
    assert_error(results[3], "prepare-wmt", "--dataset_config_name cs-en", "de-en, fr-en")
    assert_error(results[4], "prepare-wmt", "--dataset_name user/no-such-wmt", "doesn't exist on the Hub")
    assert not [path.name for path in tmp_path.iterdir() if path.name != "home"]
    assert not stub.unhandled, stub.unhandled


def test_prepare_wmt_from_a_hub_dataset(hub, tmp_path):
    stub, corpus, _ = hub
    out = tmp_path / "wmt14-en-de"
    args = [*EN_DE, "--out", str(out), *DE_EN]
    completed = _ok(_run([sys.executable, "-m", "hf_vaswani_training.prepare_wmt", *args],
                         hub_env(stub.url, tmp_path / "home")))  # fmt: skip
    assert f"train: {len(corpus['train'])} pairs" in completed.stdout
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
        for lang in ("en", "de"):
            lines = (out / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()
            assert sorted(lines) == sorted(row[lang] for row in corpus[split]), (name, lang)
    # Each line of one side is the translation of the same line of the other.
    pairs = set(zip(*((out / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de"))))
    assert pairs == {(row["en"], row["de"]) for row in corpus["train"]}
    assert not stub.unhandled, stub.unhandled


def test_prepare_wmt_reads_a_dataset_as_training_does(tmp_path):
    """Split names (dev), two text columns, no test split: the training loader's rules (a local Hub-layout folder)."""
    folder = make_hub_folder(
        tmp_path / "hub",
        {"train": {"de": ["eins", "zwei"], "en": ["one", "two"]}, "dev": {"de": ["drei"], "en": ["three"]}},
    )
    out = tmp_path / "out"
    assert prepare(out, "en", "de", dataset_name=str(folder), dataset_config_name="de-en") == {"train": 2, "valid": 1}
    assert (out / "train.de").read_text(encoding="utf-8") == "eins\nzwei\n"
    assert (out / "valid.en").read_text(encoding="utf-8") == "three\n"
    assert sorted(path.name for path in out.iterdir()) == ["train.de", "train.en", "valid.de", "valid.en"]
