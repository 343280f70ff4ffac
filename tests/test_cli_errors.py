"""Bad input to the console scripts (training/cli.py): each is answered with exit status 2 and ONE line on stderr that
names the file/line/option, what is wrong and the fix, no traceback, and nothing half-written left behind.

The commands run in this process (`cli.train([...])` is what the `vaswani-train` script calls), except where the
test is that torch is never imported: those run in a subprocess.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from hf_vaswani_training import cli, usage
from hf_vaswani_training.data.tokenizer import TRAINED_WITH_FILE, save_trained_tokenizer, train_joint_bpe
from hf_vaswani_training.recipe import options
from hf_vaswani_training.recipe.options import parse_arguments
from hf_vaswani_training.recipe.train import check_arguments
from hf_vaswani_training.serving.decoding import translate_texts
from tests.conftest import REPO_ROOT, TINY_RUN, assert_one_line_error, run_cli, tiny_model

SENTENCES = ["A mouse sits .", "The old dog does not sleep .", "Twenty four birds stand .", "We read the letter ."]
MODEL_MAX_LENGTH = 24


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model folder with its tokenizer (model_max_length 24), as vaswani-translate and vaswani-export read."""
    folder = tmp_path_factory.mktemp("model")
    tokenizer = train_joint_bpe(SENTENCES * 3, vocab_size=64, min_frequency=1, model_max_length=MODEL_MAX_LENGTH)
    model = tiny_model(vocab_size=64)
    assert len(tokenizer) <= model.config.vocab_size
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def corrupted_model_dir(model_dir, tmp_path):
    folder = tmp_path / "corrupted"
    folder.mkdir()
    for path in model_dir.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    return folder


def write_pair(folder, prefix: str, source_lines: list[bytes], target_lines: list[bytes]):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{prefix}.en").write_bytes(b"".join(line + b"\n" for line in source_lines))
    (folder / f"{prefix}.de").write_bytes(b"".join(line + b"\n" for line in target_lines))
    return folder / prefix


def file_run(train_prefix, output_dir) -> list[str]:
    return [*TINY_RUN, "--train_file", train_prefix, "--source_lang", "en", "--target_lang", "de", "--output_dir",
            output_dir]  # fmt: skip


def assert_nothing_written(output_dir):
    assert not output_dir.exists() or not any(output_dir.iterdir()), sorted(p.name for p in output_dir.iterdir())


# ---- missing or broken model folders ---------------------------------------------------------------------------------


def test_translate_a_nonexistent_model_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # a clear local path is answered without the Hub anyway
    output = tmp_path / "out.txt"
    status, stderr = run_cli(
        "translate", tmp_path / "no-such-model", "A mouse sits .", "--output", output, capsys=capsys
    )
    assert_one_line_error(status, stderr, "translate", f"MODEL_DIR {tmp_path / 'no-such-model'}", "no such folder")
    assert not output.exists()


def test_translate_a_hub_like_name_that_is_no_folder_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, stderr = run_cli("translate", "outputs/toy", "A mouse sits .", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "MODEL_DIR outputs/toy", "no such folder", "HF_HUB_OFFLINE")


def test_train_refuses_a_transformers_release_it_was_never_run_on(tmp_path, capsys, monkeypatch):
    options.check_training_transformers(options.TRAINING_MIN_TRANSFORMERS)  # the oldest supported passes
    check = options.check_training_transformers
    monkeypatch.setattr(options, "check_training_transformers", lambda: check("5.0.0"))
    output_dir = tmp_path / "run"
    status, stderr = run_cli("train", *TINY_RUN, "--output_dir", output_dir, capsys=capsys)
    assert_one_line_error(
        status, stderr, "train", "this is 5.0.0", f'"transformers>={options.TRAINING_MIN_TRANSFORMERS},<6"'
    )
    assert not output_dir.exists()


def test_train_from_a_nonexistent_model_folder(tmp_path, capsys):
    output_dir = tmp_path / "run"
    status, stderr = run_cli(
        "train", *TINY_RUN, "--model_name_or_path", tmp_path / "missing", "--output_dir", output_dir, capsys=capsys
    )
    assert_one_line_error(status, stderr, "train", f"--model_name_or_path {tmp_path / 'missing'}", "no such folder")
    assert not output_dir.exists()


def test_a_corrupted_safetensors_file_is_one_line_everywhere(corrupted_model_dir, tmp_path, capsys):
    weights = str(corrupted_model_dir / "model.safetensors")
    status, stderr = run_cli("translate", corrupted_model_dir, "A mouse sits .", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", weights, "truncated or corrupted")

    out_dir = tmp_path / "onnx"
    status, stderr = run_cli("export", corrupted_model_dir, out_dir, capsys=capsys)
    assert_one_line_error(status, stderr, "export", weights, "truncated or corrupted")
    assert not out_dir.exists()

    output_dir = tmp_path / "run"
    status, stderr = run_cli(
        "train", *TINY_RUN, "--model_name_or_path", corrupted_model_dir, "--output_dir", output_dir, capsys=capsys
    )
    assert_one_line_error(status, stderr, "train", weights, "truncated or corrupted")
    assert not output_dir.exists()

    status, stderr = run_cli("push", corrupted_model_dir, "user/model", "--dry-run", capsys=capsys)
    assert_one_line_error(status, stderr, "push", weights, "truncated or corrupted")


def test_a_garbage_safetensors_header(model_dir, tmp_path, capsys):
    folder = tmp_path / "garbage"
    folder.mkdir()
    for path in model_dir.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + bytes(64))
    status, stderr = run_cli("translate", folder, "A mouse sits .", capsys=capsys)
    assert_one_line_error(
        status, stderr, "translate", str(folder / "model.safetensors"), "is truncated or corrupted", "not valid JSON"
    )


def test_a_model_folder_without_its_tokenizer(tmp_path, capsys):
    tiny_model().save_pretrained(tmp_path / "model")
    status, stderr = run_cli("translate", tmp_path / "model", "A mouse sits .", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "the folder has no tokenizer", "save_pretrained")


def test_a_hub_dataset_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [*TINY_RUN, "--dataset_name", "nobody/no-such-corpus", "--source_lang", "en", "--target_lang", "de"]
    status, stderr = run_cli("train", *argv, "--output_dir", tmp_path / "run", capsys=capsys)
    assert_one_line_error(status, stderr, "train", "--dataset_name nobody/no-such-corpus", "HF_HUB_OFFLINE")
    assert not (tmp_path / "run").exists()


def test_a_folder_without_config_is_not_a_model(tmp_path, capsys):
    status, stderr = run_cli("export", tmp_path, tmp_path / "onnx", capsys=capsys)
    assert_one_line_error(status, stderr, "export", "has no config.json")


# ---- training data ----------------------------------------------------------------------------------------------------


def test_empty_train_files_stop_before_a_tokenizer_is_trained(tmp_path, capsys):
    prefix = write_pair(tmp_path / "data", "train", [b"", b"  "], [b"", b""])
    output_dir = tmp_path / "run"
    status, stderr = run_cli("train", *file_run(prefix, output_dir), capsys=capsys)
    assert_one_line_error(status, stderr, "train", str(tmp_path / "data" / "train.en"), "no sentence pairs")
    assert_nothing_written(output_dir)


def test_source_and_target_line_counts_differ(tmp_path, capsys):
    prefix = write_pair(tmp_path / "data", "train", [b"A mouse sits .", b"We read ."], [b"Oina Musa sittet ."])
    output_dir = tmp_path / "run"
    status, stderr = run_cli("train", *file_run(prefix, output_dir), capsys=capsys)
    line = assert_one_line_error(status, stderr, "train", "not line-aligned", "2 lines", "1 lines")
    assert str(tmp_path / "data" / "train.en") in line and str(tmp_path / "data" / "train.de") in line
    assert_nothing_written(output_dir)


def test_invalid_utf8_in_train_files_names_file_and_line(tmp_path, capsys):
    source = [b"A mouse sits .", b"The dog runs to the caf\xe9 ."]
    prefix = write_pair(tmp_path / "data", "train", source, [b"Oina Musa sittet .", b"Don Hund rinnet ."])
    output_dir = tmp_path / "run"
    status, stderr = run_cli("train", *file_run(prefix, output_dir), capsys=capsys)
    assert_one_line_error(status, stderr, "train", f"{tmp_path / 'data' / 'train.en'}:2", "UTF-8")
    assert_nothing_written(output_dir)


def test_missing_data_dir(tmp_path, capsys):
    output_dir = tmp_path / "run"
    argv = [*TINY_RUN, "--data_dir", tmp_path / "nope", "--source_lang", "en", "--target_lang", "de"]
    status, stderr = run_cli("train", *argv, "--output_dir", output_dir, capsys=capsys)
    assert_one_line_error(status, stderr, "train", f"--data_dir {tmp_path / 'nope'}", "no such folder")
    assert not output_dir.exists()


def test_missing_train_file(tmp_path, capsys):
    output_dir = tmp_path / "run"
    status, stderr = run_cli("train", *file_run(tmp_path / "absent.jsonl", output_dir), capsys=capsys)
    assert_one_line_error(status, stderr, "train", str(tmp_path / "absent.jsonl"), "does not exist")
    assert_nothing_written(output_dir)


# ---- a tokenizer already in output_dir -------------------------------------------------------------------------------


def _tokenizer_in(output_dir, **trained_with):
    tokenizer = train_joint_bpe(SENTENCES, vocab_size=40, min_frequency=1)
    save_trained_tokenizer(tokenizer, output_dir, trained_with)
    assert not [p for p in output_dir.iterdir() if p.name.startswith(".tmp-")]  # no staging left


def test_a_tokenizer_trained_with_another_vocab_size_is_not_reused(tmp_path, capsys):
    output_dir = tmp_path / "run"
    _tokenizer_in(output_dir, vocab_size=4, min_frequency=2, source_lang="en", target_lang="tt")
    before = sorted(p.name for p in output_dir.iterdir())
    status, stderr = run_cli("train", *TINY_RUN, "--output_dir", output_dir, capsys=capsys)
    assert_one_line_error(status, stderr, "train", "--vocab_size 300", "trained with vocab_size=4", "--output_dir")
    assert sorted(p.name for p in output_dir.iterdir()) == before  # not overwritten either


def test_a_tokenizer_with_no_record_is_not_reused(tmp_path, capsys):
    output_dir = tmp_path / "run"
    _tokenizer_in(output_dir, vocab_size=300, min_frequency=2)
    (output_dir / TRAINED_WITH_FILE).unlink()  # as a run of an older version, or a copy by hand, leaves it
    status, stderr = run_cli("train", *TINY_RUN, "--output_dir", output_dir, capsys=capsys)
    assert_one_line_error(status, stderr, "train", "no record", f"--tokenizer_name_or_path {output_dir}")


def test_a_tokenizer_trained_with_the_same_options_is_reused(tmp_path):
    output_dir = tmp_path / "run"
    _tokenizer_in(output_dir, vocab_size=300, min_frequency=2, source_lang="en", target_lang="tt")
    assert json.loads((output_dir / TRAINED_WITH_FILE).read_text())["vocab_size"] == 300
    check_arguments(*parse_arguments([*TINY_RUN, "--output_dir", str(output_dir)]))  # no error: a run continues
    with pytest.raises(usage.UsageError, match="--bpe_min_frequency 3"):
        check_arguments(*parse_arguments([*TINY_RUN, "--output_dir", str(output_dir), "--bpe_min_frequency", "3"]))


# ---- recipes and options ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typo", ["max_step", "max_stpes"])
def test_a_recipe_key_typo_names_the_recipe_and_the_closest_key(tmp_path, capsys, typo):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"preset": "tiny", typo: 3, "output_dir": str(tmp_path / "run")}))
    status, stderr = run_cli("train", recipe, capsys=capsys)
    assert_one_line_error(status, stderr, "train", str(recipe), f"unknown key '{typo}'", "did you mean 'max_steps'")
    assert not (tmp_path / "run").exists()


def test_no_prefix_matching_on_the_command_line(tmp_path, capsys):
    status, stderr = run_cli("train", *TINY_RUN, "--max_step", "3", "--output_dir", tmp_path / "run", capsys=capsys)
    assert_one_line_error(status, stderr, "train", "unknown option --max_step", "did you mean --max_steps")
    status, stderr = run_cli("translate", tmp_path, "A .", "--num_beam", "3", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "unknown option --num_beam", "did you mean --num_beams")


def test_a_bad_value_in_a_recipe_names_the_recipe(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("preset: tiny\nmax_steps: lots\n")
    status, stderr = run_cli("train", recipe, capsys=capsys)
    assert_one_line_error(status, stderr, "train", str(recipe), "max_steps", "'lots'")


def test_recipes_by_name(tmp_path, capsys):
    model_args, _, training_args = parse_arguments(["toy", "--output_dir", str(tmp_path)])
    assert model_args.preset == "toy" and training_args.max_steps == 1200
    status, stderr = run_cli("train", "toyy", capsys=capsys)
    assert_one_line_error(status, stderr, "train", "recipe toyy", "did you mean toy?")


def test_generation_num_beams_zero(tmp_path, capsys):
    status, stderr = run_cli("train", *TINY_RUN, "--generation_num_beams", "0", "--output_dir", tmp_path, capsys=capsys)
    assert_one_line_error(status, stderr, "train", "--generation_num_beams 0", "1 or more")


def test_unknown_preset_and_output_dir_that_is_a_file(tmp_path, capsys):
    status, stderr = run_cli("train", *TINY_RUN, "--preset", "tinny", "--output_dir", tmp_path / "run", capsys=capsys)
    assert_one_line_error(status, stderr, "train", "tinny", "did you mean tiny?")
    afile = tmp_path / "afile"
    afile.write_text("")
    status, stderr = run_cli("train", *TINY_RUN, "--output_dir", afile, capsys=capsys)
    assert_one_line_error(status, stderr, "train", f"--output_dir {afile}", "is a file")


@pytest.mark.parametrize("offset", ["-5", "-100"])
def test_translate_negative_max_length_offset(model_dir, capsys, offset):
    status, stderr = run_cli("translate", model_dir, "A mouse sits .", "--max_length_offset", offset, capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "--max_length_offset", f"{offset} must be 0 or more")


def test_translate_zero_beams_and_missing_input(model_dir, tmp_path, capsys):
    status, stderr = run_cli("translate", model_dir, "A mouse sits .", "--num_beams", "0", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "--num_beams", "positive integer")
    status, stderr = run_cli("translate", model_dir, "--input", tmp_path / "absent.txt", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", f"--input {tmp_path / 'absent.txt'}", "no such file")
    status, stderr = run_cli("translate", model_dir, "A .", "--output", tmp_path / "no" / "out.txt", capsys=capsys)
    assert_one_line_error(status, stderr, "translate", "--output", "does not exist")


# ---- missing extras ----------------------------------------------------------------------------------------------------


def test_attention_plot_without_matplotlib(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    plot, output = tmp_path / "attention.png", tmp_path / "out.txt"
    status, stderr = run_cli(
        "translate", model_dir, "A mouse sits .", "--attention-plot", plot, "--output", output, capsys=capsys
    )
    assert_one_line_error(status, stderr, "translate", "--attention-plot", 'pip install "hf-vaswani[plot]"')
    assert not plot.exists() and not output.exists()  # checked before translating, not after


def test_export_without_onnxscript(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    out_dir = tmp_path / "onnx"
    status, stderr = run_cli("export", model_dir, out_dir, capsys=capsys)
    assert_one_line_error(status, stderr, "export", "onnxscript", 'pip install "hf-vaswani[export]"')
    assert not out_dir.exists()


# ---- long input ------------------------------------------------------------------------------------------------------


def test_a_20000_word_line_is_truncated_with_a_warning(model_dir, capsys, caplog):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    long_line = " ".join(["mouse"] * 20_000)
    status, stderr = run_cli("translate", model_dir, long_line, "--greedy", "--max_length_offset", "2", capsys=capsys)
    assert status == 0, stderr
    assert "1 of 1 sentences are longer than 24 tokens (the tokenizer's model_max_length)" in caplog.text
    assert "truncated" in caplog.text and "indexing errors" not in caplog.text + stderr

    # What reached generate(): the first 23 tokens and the EOS, so the output is at most 24 + 2 tokens long.
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    seen = []
    generate = model.generate
    model.generate = lambda **kwargs: seen.append(kwargs["input_ids"]) or generate(**kwargs)
    translate_texts(model, tokenizer, [long_line], num_beams=1, max_length_offset=2)
    (long_ids,) = seen[0].tolist()
    assert len(long_ids) == MODEL_MAX_LENGTH and long_ids[-1] == tokenizer.eos_token_id
    assert long_ids[:-1] == tokenizer(long_line)["input_ids"][: MODEL_MAX_LENGTH - 1]
    # A sentence within the limit is not touched.
    seen.clear()
    translate_texts(model, tokenizer, ["A mouse sits ."], num_beams=1)
    assert seen[0][0].tolist() == tokenizer("A mouse sits .")["input_ids"]


# ---- --debug, and no torch for the early answers ------------------------------------------------------------------------


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    with pytest.raises(usage.UsageError, match="no such folder"):
        cli.translate([str(tmp_path / "missing"), "A .", "--debug"])
    monkeypatch.setenv(usage.DEBUG_ENV, "1")
    with pytest.raises(usage.UsageError, match="no such folder"):
        cli.translate([str(tmp_path / "missing"), "A ."])


def test_early_errors_come_before_torch_is_imported(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        from hf_vaswani_training import cli
        codes = [
            cli.translate([{str(tmp_path / "missing")!r}, "A ."]),
            cli.train(["toy", "--data_dir", {str(tmp_path / "nope")!r}]),
            cli.train(["toyy"]),
            cli.export([{str(tmp_path / "missing")!r}, {str(tmp_path / "out")!r}]),
            cli.explore([{str(tmp_path / "missing")!r}]),
            cli.explore(["someone/model", "--hots", "0.0.0.0"]),
        ]
        heavy = sorted(n for n in ("torch", "transformers", "datasets", "gradio") if n in sys.modules)
        print(codes, heavy)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert completed.stdout.strip() == "[2, 2, 2, 2, 2, 2] []", completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 6 and "Traceback" not in completed.stderr
    assert lines[4].startswith(f"vaswani-explore: error: model {tmp_path / 'missing'}: no such folder")
    hint = "did you mean --host? (see vaswani-explore --help)"
    assert lines[5] == f"vaswani-explore: error: unknown option --hots; {hint}"


def test_python_dash_m_from_the_checkout_uses_the_same_commands(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "training.translate", str(tmp_path / "missing"), "A ."],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2 and completed.stderr.startswith("vaswani-translate: error: MODEL_DIR")


def test_every_command_answers_a_bad_argument_before_torch_datasets_or_gradio(tmp_path):
    """A wrong option, a misspelt recipe key and the value checks that need no torch are answered by each command's
    front door with the standard library only."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"preset": "tiny", "max_stpes": 3}))
    script = textwrap.dedent(
        f"""
        import sys
        from hf_vaswani_training import cli
        codes = [
            cli.train(["toy", "--bogus", "1"]),
            cli.train([{str(recipe)!r}]),
            cli.train(["toy", "--max_steps", "0"]),
            cli.train(["toy", "--learning_rate", "nan"]),
            cli.train(["toy", "--output_dir", ""]),
            cli.average(["--bogus"]),
            cli.prepare_wmt(["--bogus"]),
            cli.push(["--bogus"]),
            cli.export(["--bogus"]),
            cli.translate(["--bogus"]),
        ]
        heavy = sorted(name for name in ("torch", "transformers", "datasets", "gradio") if name in sys.modules)
        print(codes, heavy)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert completed.stdout.strip() == f"{[2] * 10} []", completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 10 and "Traceback" not in completed.stderr, completed.stderr
    assert lines[0].startswith("vaswani-train: error: unknown option --bogus")
    assert "unknown key 'max_stpes'" in lines[1] and "did you mean 'max_steps'" in lines[1]
    assert "--max_steps 0" in lines[2] and "--learning_rate nan" in lines[3] and "--output_dir is empty" in lines[4]
    for line, prog in zip(lines[5:], ["average", "prepare-wmt", "push", "export", "translate"], strict=True):
        assert line.startswith(f"vaswani-{prog}: error: "), line


def test_the_option_names_read_before_torch_cover_every_option_of_the_real_parser():
    """options.training_option_names() reads the argument dataclasses' source with ast; it must know every field the real
    HfArgumentParser accepts (else a valid option would be refused before torch loads)."""
    from hf_vaswani_training.data.arguments import DataArguments
    from hf_vaswani_training.recipe.arguments import ModelArguments, VaswaniTrainingArguments
    from hf_vaswani_training.recipe.options import _TrainArgumentParser

    parser = _TrainArgumentParser((ModelArguments, DataArguments, VaswaniTrainingArguments))
    fields = {action.dest for action in parser._actions if action.option_strings and action.dest != "help"}
    assert fields and fields <= options.training_option_names()


def test_checkpoint_names_spelled_out_are_the_trainers():
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from hf_vaswani_training.recipe import checkpoints

    assert (checkpoints.PREFIX_CHECKPOINT_DIR, checkpoints.TRAINER_STATE_NAME) == (
        PREFIX_CHECKPOINT_DIR,
        TRAINER_STATE_NAME,
    )
