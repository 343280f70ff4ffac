"""A model folder that loads but cannot translate correctly is refused in one line (exit 2), not served: weights that
are NaN or infinite, a tokenizer that is not the model's, a config of another model type; and the Hub that cannot be
reached ends `vaswani-push` in one line naming the host (training/usage.py, training/serving/push.py)."""

import json
import os
import shutil
import socket

import pytest
import torch

import hf_vaswani
from hf_vaswani_training import usage
from hf_vaswani_training.data import tokenizer as tokenizer_module
from hf_vaswani_training.data.tokenizer import save_trained_tokenizer, train_joint_bpe
from hf_vaswani_training.serving import explore, export, push
from tests.conftest import assert_one_line_error, run_cli, tiny_model

SENTENCES = ["A mouse sits .", "The old dog does not sleep .", "Twenty four birds stand .", "We read the letter ."]


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe(SENTENCES * 3, vocab_size=64, min_frequency=1, model_max_length=24)


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory, tokenizer):
    """A tiny model with the tokenizer it was made for and the record vaswani-train writes beside it."""
    folder = tmp_path_factory.mktemp("good")
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
    save_trained_tokenizer(tokenizer, folder, {"vocab_size": 64, "min_frequency": 1, "tokens": len(tokenizer)})
    return folder


def copy_of(folder, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def test_the_names_usage_keeps_are_the_ones_the_package_writes():
    assert usage.MODEL_TYPE == hf_vaswani.VaswaniConfig.model_type
    assert usage.TRAINED_WITH_FILE == tokenizer_module.TRAINED_WITH_FILE


def test_a_good_folder_passes(good_dir, tokenizer):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(good_dir)
    usage.check_loaded_model(model, tokenizer, str(good_dir))  # raises nothing


# ---- non-finite weights ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nan_dir(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("nan")
    model = tiny_model(vocab_size=len(tokenizer))
    with torch.no_grad():
        model.model.encoder.layers[1].feed_forward.fc1.weight[0, :3] = float("nan")
        model.model.decoder.layers[0].feed_forward.fc2.bias[0] = float("inf")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_translate_refuses_nan_weights_naming_the_file_and_tensor(nan_dir, capsys):
    status, stderr = run_cli("translate", nan_dir, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status,
        stderr,
        "translate",
        f"{nan_dir / 'model.safetensors'}: 3 of 2048 weights are not finite (NaN/Inf) in ",
        "encoder.layers.1.feed_forward.fc1.weight, and in 1 more tensors",
        "the model is broken (a diverged run?)",
    )
    assert capsys.readouterr().out == ""


def test_export_explorer_and_training_refuse_nan_weights(nan_dir, tmp_path, capsys):
    with pytest.raises(usage.UsageError, match="not finite"):
        export.load_model(nan_dir)
    with pytest.raises(usage.UsageError, match="not finite"):
        explore.load_explorer(str(nan_dir), shelf=explore.ModelShelf())
    output_dir = tmp_path / "run"
    run_args = ["--model_name_or_path", nan_dir, "--toy_num_train", "20", "--toy_num_validation", "2"]
    run_args += ["--toy_num_test", "2", "--max_steps", "1", "--report_to", "none", "--output_dir", output_dir]
    status, stderr = run_cli("train", *run_args, capsys=capsys)
    assert_one_line_error(status, stderr, "train", str(nan_dir / "model.safetensors"), "not finite")


def test_ctranslate2_conversion_refuses_nan_weights(nan_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_vaswani_training.serving.ctranslate2_export import convert_to_ctranslate2

    with pytest.raises(usage.UsageError, match="not finite"):
        convert_to_ctranslate2(nan_dir, tmp_path / "ct2")


# ---- a tokenizer that is not the model's -------------------------------------------------------------------------------


def test_a_tokenizer_of_another_size_is_refused(good_dir, tmp_path, capsys):
    other = train_joint_bpe([*SENTENCES, "Seven red foxes jump over the fence ."] * 3, vocab_size=100)
    assert len(other) != 64
    folder = copy_of(good_dir, tmp_path)
    other.save_pretrained(folder)  # another model's tokenizer files, the folder's record left as it was
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status, stderr, "translate", f"{folder / 'tokenizer.json'} has {len(other)} tokens but", "records 64"
    )
    (folder / usage.TRAINED_WITH_FILE).unlink()  # no record: the config's vocab_size is compared
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status,
        stderr,
        "translate",
        f"{folder / 'tokenizer.json'} has {len(other)} tokens but {folder / 'config.json'} says vocab_size 64",
    )


def test_a_vocabulary_padded_to_a_round_size_is_accepted_only_without_a_record(tokenizer, tmp_path):
    model = tiny_model(vocab_size=len(tokenizer) + 8)  # 72 rows, 64 tokens: padded to a multiple of 8
    assert usage.tokenizer_problem(tokenizer, model.config, str(tmp_path)) is None
    model = tiny_model(vocab_size=len(tokenizer) + 3)  # 67: not a round size
    assert "says vocab_size 67" in usage.tokenizer_problem(tokenizer, model.config, str(tmp_path))


def test_special_token_ids_that_differ_are_refused(good_dir, tmp_path, capsys):
    folder = copy_of(good_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["pad_token_id"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status,
        stderr,
        "translate",
        f"{folder / 'tokenizer.json'} has pad_token_id 1 but {folder / 'config.json'} says pad_token_id 3",
    )


def test_a_record_that_contradicts_results_json_is_refused(good_dir, tmp_path, capsys):
    folder = copy_of(good_dir, tmp_path)
    results = {"model_args": {"vocab_size": 8000, "bpe_min_frequency": 1}, "source_lang": "en", "target_lang": "de"}
    (folder / "results.json").write_text(json.dumps(results))
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status, stderr, "translate", "trained with vocab_size=64", "results.json says the model was trained with"
    )


# ---- a config of another model type ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["bert", None])
def test_a_config_of_another_model_type_is_named(good_dir, tmp_path, capsys, model_type):
    folder = copy_of(good_dir, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.pop("model_type")
    if model_type is not None:
        config["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(config))
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    line = assert_one_line_error(
        status, stderr, "translate", f"{folder / 'config.json'}: ", "not a vaswani model (this tool serves hf-vaswani"
    )
    assert ("model_type 'bert'" in line) == (model_type == "bert")
    assert "trust_remote_code" not in line
    status, stderr = run_cli("export", folder, tmp_path / "onnx", capsys=capsys)
    assert_one_line_error(status, stderr, "export", "not a vaswani model")


# ---- the Hub out of reach --------------------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_push_to_an_unreachable_hub_is_one_line_naming_the_host(good_dir, monkeypatch):
    from huggingface_hub import constants

    port = _closed_port()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(usage.UsageError) as raised:
        push.push_model_folder(good_dir, "someone/model", token="hf_not_a_real_token", validate=False)
    message = str(raised.value)
    assert f"cannot reach the Hub at 127.0.0.1:{port}" in message and "refused" in message, message
    assert "\n" not in message


def test_a_dns_failure_names_the_host(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    error = RuntimeError("upload failed")
    error.__cause__ = socket.gaierror(-2, "Name or service not known")
    message = push.network_problem(error)
    assert message.startswith("cannot reach the Hub at hub.invalid (its name does not resolve"), message
    assert push.network_problem(ValueError("a 404 from the Hub")) is None


def test_push_to_hub_training_against_an_unreachable_hub_is_one_line(tmp_path):
    """The Trainer creates the Hub repository when it is built; a Hub that cannot be reached then is one line."""
    import subprocess
    import sys

    port = _closed_port()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_TOKEN": "hf_not_a_real_token"}
    env.pop("HF_HUB_OFFLINE", None)
    args = ["--preset", "tiny", "--vocab_size", "300", "--toy_num_train", "50", "--max_steps", "1", "--report_to"]
    args += ["none", "--save_strategy", "no", "--toy_num_validation", "5", "--toy_num_test", "5"]
    args += ["--push_to_hub", "True", "--hub_model_id", "someone/model", "--output_dir", str(tmp_path / "run")]
    completed = subprocess.run(
        [sys.executable, "-m", "hf_vaswani_training.train", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = completed.stderr.strip().splitlines()
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert lines[-1].startswith("vaswani-train: error: --push_to_hub: cannot reach the Hub at 127.0.0.1:"), lines[-1]
    assert "Traceback" not in completed.stderr


def test_a_pickled_weights_file_that_would_run_code_is_refused_before_torch_loads_it(tmp_path):
    """torch's weights_only loader refuses such a file too, but with a traceback; here it is one line naming it,
    read from the pickle's opcodes without running it. A real torch.save state dict passes the same reading."""
    import pickle
    import subprocess
    import sys

    import torch

    from hf_vaswani_training import usage

    state = {"weight": torch.arange(6.0).reshape(2, 3), "step": torch.tensor(3)}
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert usage.pickle_problem(tmp_path / "pytorch_model.bin") is None

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "vaswani"}')
    (bad / "tokenizer.json").write_text("{}")
    (bad / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Payload()}))
    completed = subprocess.run(
        [sys.executable, "-m", "hf_vaswani_training.translate", str(bad), "A ."],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2 and len(completed.stderr.strip().splitlines()) == 1, completed.stderr
    assert f"{bad / 'pytorch_model.bin'}: refused: the pickle would call" in completed.stderr
    assert "system" in completed.stderr and not (tmp_path / "ran").exists()
