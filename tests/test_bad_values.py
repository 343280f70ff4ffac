"""Bad values, answered in one line (issue 27): out-of-range or non-finite numbers, a recipe value of the wrong type,
an opset the exporter cannot write, a malformed preset, and a tokenizer that is not the model's (same size, other
ids). The break-it list is data: BAD_VALUES below, one row per input; a new row is one line.

Each row runs its console script in a fresh Python (as `vaswani-...` runs it) and must exit with status 2 and one
`vaswani-COMMAND: error: ...` line holding every fragment; rows marked `before_torch` must also answer before torch,
transformers, datasets or gradio are imported (the check needs no model).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import make_model_folder

HEAVY = ("torch", "transformers", "datasets", "gradio")

# (row id, command, argv (placeholders: {model}, {other_ids}, {other_size}, {broken_tokenizer}, {tmp}), fragments of
# the error line, before_torch)
BAD_VALUES = [
    # vaswani-translate: every numeric option finite and in range, where it is parsed
    ("length-penalty-nan", "translate", ["{model}", "--length_penalty", "nan", "A ."], ["--length_penalty", "nan must be a finite number"], True),
    ("length-penalty-inf", "translate", ["{model}", "--length_penalty=-inf", "A ."], ["--length_penalty", "must be a finite number"], True),
    ("top-p-above-1", "translate", ["{model}", "--sample", "--top_p", "2", "A ."], ["--top_p", "2 must be in (0, 1]"], True),
    ("top-p-0", "translate", ["{model}", "--sample", "--top_p", "0", "A ."], ["--top_p", "0 must be in (0, 1]"], True),
    ("top-k-negative", "translate", ["{model}", "--sample", "--top_k", "-1", "A ."], ["--top_k", "-1 must be 0 or more"], True),
    ("temperature-0", "translate", ["{model}", "--sample", "--temperature", "0", "A ."], ["--temperature", "0 must be above 0"], True),
    ("temperature-nan", "translate", ["{model}", "--sample", "--temperature", "nan", "A ."], ["--temperature", "must be a finite number"], True),
    ("beams-0", "translate", ["{model}", "--num_beams", "0", "A ."], ["--num_beams", "must be a positive integer"], True),
    ("max-tokens-0", "translate", ["{model}", "--max_tokens", "0", "A ."], ["--max_tokens", "must be a positive integer"], True),
    ("seed-negative", "translate", ["{model}", "--seed", "-1", "A ."], ["--seed", "must be 0 or more"], True),
    ("returns-above-beams", "translate", ["{model}", "--num_beams", "2", "--num_return_sequences", "3", "A ."], ["--num_return_sequences 3 needs at least as many beams", "num_beams is 2", "--num_beams 3"], True),
    ("returns-above-saved-beams", "translate", ["{model}", "--num_return_sequences", "5", "A ."], ["--num_return_sequences 5", "num_beams is 4"], True),
    # the tokenizer beside the model is not the one it was trained with
    ("translate-other-ids", "translate", ["{other_ids}", "A ."], ["{other_ids}/tokenizer.json is another tokenizer", "{other_ids}/config.json says the model was trained with tokenizer_fingerprint sha256:"], True),
    ("translate-other-size", "translate", ["{other_size}", "A ."], ["{other_size}/tokenizer.json has 200 tokens", "{other_size}/config.json says vocab_size 300"], True),
    ("translate-broken-tokenizer", "translate", ["{broken_tokenizer}", "A ."], ["{broken_tokenizer}/tokenizer.json: not valid JSON"], True),
    ("explore-other-ids", "explore", ["{other_ids}"], ["{other_ids}/tokenizer.json is another tokenizer", "tokenizer_fingerprint"], True),
    ("export-other-ids", "export", ["{other_ids}", "{tmp}/onnx"], ["{other_ids}/tokenizer.json is another tokenizer"], True),
    ("train-from-other-ids", "train", ["toy", "--model_name_or_path", "{other_ids}", "--output_dir", "{tmp}/run"], ["{other_ids}/tokenizer.json is another tokenizer"], True),
    # vaswani-export: only the opsets the exporter can write
    ("opset-1", "export", ["{model}", "{tmp}/onnx", "--opset", "1"], ["--opset", "1 must be from 17 to 28"], True),
    ("opset-16", "export", ["{model}", "{tmp}/onnx", "--opset", "16"], ["--opset", "16 must be from 17 to 28"], True),
    ("opset-99", "export", ["{model}", "{tmp}/onnx", "--opset", "99"], ["--opset", "99 must be from 17 to 28"], True),
    # vaswani-train: recipe values of the field's type, numbers in range, the preset file
    ("recipe-list-for-int", "train", ["{tmp}/list_steps.yaml", "--output_dir", "{tmp}/run"], ["{tmp}/list_steps.yaml: key 'max_steps'", "[30] (a list)", "an integer"], True),
    ("recipe-float-for-int", "train", ["{tmp}/float_steps.json", "--output_dir", "{tmp}/run"], ["{tmp}/float_steps.json: key 'max_steps'", "2.5 (a number)"], True),
    ("recipe-string-for-bool", "train", ["{tmp}/string_flag.yaml", "--output_dir", "{tmp}/run"], ["{tmp}/string_flag.yaml: key 'fp16'", "'yes' (a string)", "true or false"], True),
    ("recipe-mapping-for-float", "train", ["{tmp}/mapping_rate.yaml", "--output_dir", "{tmp}/run"], ["key 'learning_rate'", "(a mapping)", "a number"], True),
    ("recipe-dropout-nan", "train", ["{tmp}/nan_dropout.yaml", "--output_dir", "{tmp}/run"], ["{tmp}/nan_dropout.yaml: key 'dropout'", "must be a finite number"], True),
    ("eval-split-typo", "train", ["toy", "--final_eval_splits", "validation,tset", "--output_dir", "{tmp}/run"], ["--final_eval_splits validation,tset", "'tset' is not a split", "or none"], True),
    ("label-smoothing-1", "train", ["toy", "--label_smoothing_factor", "1", "--output_dir", "{tmp}/run"], ["--label_smoothing_factor 1", "must be in [0, 1)"], True),
    ("dropout-above-1", "train", ["toy", "--dropout", "1.5", "--output_dir", "{tmp}/run"], ["--dropout 1.5", "must be in [0, 1)"], True),
    ("warmup-negative", "train", ["toy", "--warmup_steps", "-4", "--output_dir", "{tmp}/run"], ["--warmup_steps -4", "must be 0 or more"], True),
    ("max-tokens-negative", "train", ["toy", "--max_tokens", "-1", "--output_dir", "{tmp}/run"], ["--max_tokens -1", "must be 0 or more"], True),
    ("beams-0-train", "train", ["toy", "--generation_num_beams", "0", "--output_dir", "{tmp}/run"], ["--generation_num_beams 0", "must be 1 or more"], True),
    ("adam-beta2-1", "train", ["toy", "--adam_beta2", "1", "--output_dir", "{tmp}/run"], ["--adam_beta2 1", "must be in [0, 1)"], True),
    ("train-file-missing", "train", ["--preset", "tiny", "--train_file", "{tmp}/nope", "--source_lang", "en", "--target_lang", "de", "--output_dir", "{tmp}/run"], ["--train_file {tmp}/nope", "{tmp}/nope.en", "does not exist"], True),
    ("train-file-half-missing", "train", ["--preset", "tiny", "--train_file", "{tmp}/half", "--source_lang", "en", "--target_lang", "de", "--output_dir", "{tmp}/run"], ["--train_file {tmp}/half", "{tmp}/half.de", "does not exist"], True),
    ("validation-jsonl-missing", "train", ["--preset", "tiny", "--validation_file", "{tmp}/valid.jsonl", "--source_lang", "en", "--target_lang", "de", "--output_dir", "{tmp}/run"], ["--validation_file {tmp}/valid.jsonl: data file", "does not exist"], True),
    ("unknown-preset", "train", ["toy", "--preset", "tinyy", "--output_dir", "{tmp}/run"], ["--preset tinyy", "presets are", "did you mean tiny?"], True),
    ("malformed-preset", "train", ["toy", "--preset", "{tmp}/broken_preset.json", "--output_dir", "{tmp}/run"], ["--preset {tmp}/broken_preset.json, line 1", "not valid JSON"], True),
    ("preset-not-an-object", "train", ["toy", "--preset", "{tmp}/list_preset.json", "--output_dir", "{tmp}/run"], ["--preset {tmp}/list_preset.json", "a JSON object"], True),
]  # fmt: skip

FILES = {
    "list_steps.yaml": "preset: tiny\nmax_steps: [30]\n",
    "float_steps.json": '{"preset": "tiny", "max_steps": 2.5}',
    "string_flag.yaml": "preset: tiny\nfp16: 'yes'\n",
    "mapping_rate.yaml": "preset: tiny\nlearning_rate: {peak: 1}\n",
    "nan_dropout.yaml": "preset: tiny\ndropout: .nan\n",
    "broken_preset.json": '{"d_model": 32,,}',
    "list_preset.json": "[32, 2]",
    "half.en": "A man .\n",
}


def fingerprinted_folder(folder):
    """make_model_folder's folder with the fingerprint vaswani-train records in config.json."""
    from hf_vaswani_training.usage import TOKENIZER_FINGERPRINT_KEY, tokenizer_fingerprint

    make_model_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    config[TOKENIZER_FINGERPRINT_KEY] = tokenizer_fingerprint(json.loads((folder / "tokenizer.json").read_text()))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def swap_two_ids(tokenizer_json: dict) -> dict:
    """The same tokens and size with two ordinary tokens' ids exchanged: another run's tokenizer, as far as the ids
    the model learnt are concerned."""
    vocab = tokenizer_json["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[10], sorted(vocab, key=vocab.get)[20]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    return tokenizer_json


def smaller_tokenizer(folder):
    """Another BPE of the same corpus with 200 tokens, for a model of 300."""
    from hf_vaswani_training.data.tokenizer import train_joint_bpe
    from hf_vaswani_training.data.toy_corpus import generate_corpus

    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 300
    corpus = generate_corpus(num_train=300, num_validation=0, num_test=0)["train"]
    tokenizer = train_joint_bpe([text for pair in corpus for text in (pair["en"], pair["tt"])], vocab_size=200)
    assert len(tokenizer) == 200
    return tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_values")
    model = fingerprinted_folder(root / "model")
    paths = {"model": model, "tmp": root}
    for name in ("other_ids", "other_size", "broken_tokenizer"):
        paths[name] = shutil.copytree(model, root / name)
    tokenizer_json = json.loads((model / "tokenizer.json").read_text())
    (paths["other_ids"] / "tokenizer.json").write_text(json.dumps(swap_two_ids(tokenizer_json)))
    smaller_tokenizer(model).save_pretrained(paths["other_size"])
    (paths["broken_tokenizer"] / "tokenizer.json").write_text((model / "tokenizer.json").read_text()[:1000])
    for name, text in FILES.items():
        (root / name).write_text(text)
    return paths


RUN = textwrap.dedent(
    """
    import json, sys
    from hf_vaswani_training import cli
    status = getattr(cli, sys.argv[1])(sys.argv[2:])
    print(json.dumps([status, sorted(name for name in {heavy} if name in sys.modules)]))
    """
).format(heavy=HEAVY)


@pytest.mark.parametrize(
    ("command", "argv", "fragments", "before_torch"),
    [row[1:] for row in BAD_VALUES],
    ids=[row[0] for row in BAD_VALUES],
)
def test_a_bad_value_is_one_line(folders, command, argv, fragments, before_torch):
    values = {name: str(path) for name, path in folders.items()}
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_VASWANI_DEBUG": "0"}
    completed = subprocess.run(
        [sys.executable, "-c", RUN, command, *(token.format(**values) for token in argv)],
        cwd=folders["tmp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    status, heavy = json.loads(completed.stdout.strip().splitlines()[-1])
    stderr = completed.stderr
    assert status == 2 and "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith(f"vaswani-{command}: error: ")]
    assert len(errors) == 1 and stderr.rstrip("\n").endswith(errors[0]), stderr
    for fragment in fragments:
        assert fragment.format(**values) in errors[0], (fragment, errors[0])
    if before_torch:
        assert heavy == [], f"answered only after importing {heavy}: {errors[0]}"
    assert not (folders["tmp"] / "run").exists() and not (folders["tmp"] / "onnx").exists()


# ---- the tokenizer fingerprint ---------------------------------------------------------------------------------------


def test_the_fingerprint_follows_the_ids_not_the_file_bytes(folders, tmp_path):
    from transformers import AutoTokenizer

    from hf_vaswani_training.usage import loaded_tokenizer_fingerprint, tokenizer_fingerprint

    tokenizer_json = json.loads((folders["model"] / "tokenizer.json").read_text())
    fingerprint = tokenizer_fingerprint(tokenizer_json)
    assert fingerprint.startswith("sha256:") and len(fingerprint) == 7 + 64
    # saved again by transformers, keys reordered, merges spelt "a b": the same vocabulary and merges
    tokenizer = AutoTokenizer.from_pretrained(folders["model"])
    tokenizer.save_pretrained(tmp_path)
    assert tokenizer_fingerprint(json.loads((tmp_path / "tokenizer.json").read_text())) == fingerprint
    assert loaded_tokenizer_fingerprint(tokenizer) == fingerprint
    reordered = dict(reversed(list(tokenizer_json.items())))
    reordered["model"] = dict(tokenizer_json["model"])
    reordered["model"]["vocab"] = dict(reversed(list(tokenizer_json["model"]["vocab"].items())))
    reordered["model"]["merges"] = [" ".join(pair) for pair in tokenizer_json["model"]["merges"]]
    assert tokenizer_fingerprint(reordered) == fingerprint
    # other ids, another merge order, another added token: another fingerprint
    assert tokenizer_fingerprint(swap_two_ids(json.loads(json.dumps(tokenizer_json)))) != fingerprint
    merges_swapped = json.loads(json.dumps(tokenizer_json))
    merges_swapped["model"]["merges"][:2] = merges_swapped["model"]["merges"][1::-1]
    assert tokenizer_fingerprint(merges_swapped) != fingerprint


def test_a_loaded_tokenizer_with_other_ids_is_refused_after_loading_too(folders):
    """The check of a loaded model (Hub models, vaswani-push, the explorer's other folders) compares the fingerprint
    of the tokenizer as loaded."""
    from transformers import AutoConfig, AutoTokenizer

    from hf_vaswani_training.usage import tokenizer_problem

    config = AutoConfig.from_pretrained(folders["model"])
    assert config.tokenizer_fingerprint.startswith("sha256:")  # an unknown config key survives loading
    assert tokenizer_problem(AutoTokenizer.from_pretrained(folders["model"]), config, str(folders["model"])) is None
    other = AutoTokenizer.from_pretrained(folders["other_ids"])
    problem = tokenizer_problem(other, config, str(folders["other_ids"]))
    assert problem is not None and "is another tokenizer than the model's" in problem


def test_a_folder_trained_before_fingerprints_keeps_working(folders, tmp_path):
    from hf_vaswani_training.usage import TOKENIZER_FINGERPRINT_KEY, check_model_dir

    folder = shutil.copytree(folders["other_ids"], tmp_path / "old")
    config = json.loads((folder / "config.json").read_text())
    del config[TOKENIZER_FINGERPRINT_KEY]
    (folder / "config.json").write_text(json.dumps(config))
    check_model_dir(str(folder), "MODEL_DIR", needs_tokenizer=True)  # no record: nothing to compare, no error


def test_training_records_the_fingerprint_of_its_tokenizer_in_config_json(folders, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    from hf_vaswani_training.data.arguments import DataArguments
    from hf_vaswani_training.recipe.arguments import ModelArguments
    from hf_vaswani_training.recipe.train import build_model
    from hf_vaswani_training.usage import UsageError, tokenizer_fingerprint

    tokenizer = AutoTokenizer.from_pretrained(folders["model"])
    model = build_model(ModelArguments(preset="tiny"), DataArguments(), tokenizer)
    model.save_pretrained(tmp_path)
    saved = AutoConfig.from_pretrained(tmp_path).tokenizer_fingerprint
    assert saved == tokenizer_fingerprint(json.loads((folders["model"] / "tokenizer.json").read_text()))
    # continuing from a model with another tokenizer (--tokenizer_name_or_path) is refused
    other = AutoTokenizer.from_pretrained(folders["other_ids"])
    arguments = ModelArguments(model_name_or_path=str(tmp_path), tokenizer_name_or_path=str(folders["other_ids"]))
    with pytest.raises(UsageError, match=r"tokenizer_fingerprint sha256:.*\(other ids\)"):
        build_model(arguments, DataArguments(), other)


# ---- the opset vaswani-export writes and records ---------------------------------------------------------------------


@pytest.mark.slow
def test_export_records_the_opset_it_wrote(tmp_path):
    import onnx

    from hf_vaswani_training.serving.export import MIN_OPSET, export, written_opsets
    from tests.conftest import tiny_model

    config = export(tiny_model(), tmp_path, opset=MIN_OPSET)
    assert config["opset"] == MIN_OPSET == json.loads((tmp_path / "export_config.json").read_text())["opset"]
    assert written_opsets(tmp_path) == {MIN_OPSET}
    assert {e.version for e in onnx.load(str(tmp_path / "encoder.onnx")).opset_import if e.domain == ""} == {17}


def test_the_opset_bounds_are_within_the_installed_onnx():
    import onnx.defs
    from torch.onnx._internal.exporter import _constants

    from hf_vaswani_training.serving.export import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

    assert MIN_OPSET <= DEFAULT_OPSET == _constants.TORCHLIB_OPSET <= MAX_OPSET <= onnx.defs.onnx_opset_version()


# ---- the explorer's decoding controls ---------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), None])
def test_the_explorer_never_decodes_with_a_length_penalty_that_is_not_a_number(alpha):
    from hf_vaswani import PAPER_DECODING
    from hf_vaswani_training.serving.explore import generation_options

    kwargs, notices = generation_options(4, False, 1, True, alpha)
    assert kwargs["length_penalty"] == PAPER_DECODING["length_penalty"]
    assert bool(notices) == (alpha is not None)  # an empty box is the paper's value, a nan is said
    assert generation_options(4, False, 1, True, 1.0)[0]["length_penalty"] == 1.0
