"""`python -m training.translate` and `training.serving.attention_plot`, against generate()/translate_texts() called directly."""

import gzip
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_vaswani
from hf_vaswani_training.recipe.train import main as train_main
from hf_vaswani_training.serving.attention_plot import cross_attention, plot_attention
from hf_vaswani_training.serving.decoding import translate_texts
from hf_vaswani_training.serving.translate import main
from hf_vaswani_training.usage import UsageError
from tests.conftest import REPO_ROOT, TINY

SENTENCES = [
    "A mouse sits .",
    "The dog runs through the green grass .",
    "Because I am kind , eight tall neighbors do not take the white potatoes .",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A folder from hf_vaswani_training.recipe.train (tokenizer, config, generation config with beam 4, GNMT 0.6, offset 5) whose
    weights are then re-initialised: after 30 steps beam search ends every sentence at once, and empty outputs
    would make "the CLI prints what translate_texts() returns" true of a CLI that ignores the model. Random weights give
    long outputs that differ between sentences and between beam and greedy search."""
    trained = tmp_path_factory.mktemp("trained")
    train_main([*TINY, "--output_dir", str(trained), "--max_steps", "30", "--average_last_n", "0",
                "--toy_num_test", "2", "--toy_num_validation", "2"])  # fmt: skip
    trained_model = AutoModelForSeq2SeqLM.from_pretrained(trained)
    torch.manual_seed(0)
    model = hf_vaswani.VaswaniForConditionalGeneration(trained_model.config)
    model.generation_config = trained_model.generation_config
    folder = tmp_path_factory.mktemp("model")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(trained).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def loaded(model_dir):
    return AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)


def start_cli(*args, stdin=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hf_vaswani_training.translate", *map(str, args)],
        cwd=REPO_ROOT,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, stdout.decode("utf-8"), stderr.decode("utf-8")


def stdout_lines(process: subprocess.Popen) -> list[str]:
    returncode, stdout, stderr = finish(process)
    assert returncode == 0, stderr
    return stdout.split("\n")[:-1]


INPUT_LINES = [SENTENCES[0], "", SENTENCES[1], "   ", SENTENCES[2]]


@pytest.fixture(scope="module")
def cli(model_dir, tmp_path_factory):
    """The three model-loading command lines, started together: each spends most of its time importing torch and
    transformers, so running them side by side saves most of that wait."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "input.txt").write_text("\n".join(INPUT_LINES) + "\n", encoding="utf-8")
    (folder / "stdin.txt").write_text("\n".join(SENTENCES), encoding="utf-8")  # no newline after the last line
    with open(folder / "stdin.txt", "rb") as stdin:
        processes = {
            "arguments": start_cli(model_dir, *SENTENCES[:2], "--attention-plot", folder / "attention.png"),
            "input": start_cli(model_dir, "--input", folder / "input.txt"),
            "stdin": start_cli(model_dir, "--greedy", stdin=stdin),
        }
    yield processes, folder
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


# ---- the command line -----------------------------------------------------------------------------------------------


def test_cli_arguments_print_what_translate_returns_and_plot(cli, loaded):
    (processes, folder), (model, tokenizer) = cli, loaded
    expected = translate_texts(model, tokenizer, SENTENCES[:2])
    assert stdout_lines(processes["arguments"]) == expected
    assert all(expected) and len(set(expected)) == 2  # a comparison that a model-less CLI would fail
    plot = folder / "attention.png"
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_input_file_gives_one_output_line_per_input_line(cli, loaded):
    (processes, _), (model, tokenizer) = cli, loaded
    output = stdout_lines(processes["input"])
    assert len(output) == len(INPUT_LINES)
    assert output[1] == output[3] == ""
    assert [output[0], output[2], output[4]] == translate_texts(model, tokenizer, SENTENCES)


def test_cli_stdin_greedy_equals_generate_with_one_beam(cli, loaded):
    (processes, _), (model, tokenizer) = cli, loaded
    output = stdout_lines(processes["stdin"])
    expected = []
    for sentence in SENTENCES:
        generated = model.generate(**tokenizer(sentence, return_tensors="pt"), num_beams=1)
        expected.append(tokenizer.decode(generated[0], skip_special_tokens=True))
    assert output == expected
    assert output != translate_texts(
        model, tokenizer, SENTENCES
    )  # the paper's beam search differs: --greedy did something


def test_cli_invalid_utf8_names_file_and_line(model_dir, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("A mouse sits .\n\nThe dog runs to the café .\n".encode("latin-1"))
    returncode, _, message = finish(start_cli(model_dir, "--input", path))
    assert returncode != 0
    assert str(path) in message and "line 3" in message and "UTF-8" in message


def test_sampling_with_a_seed_is_reproducible(model_dir, capsys):
    def sample(seed):
        main([str(model_dir), *SENTENCES, "--sample", "--seed", str(seed), "--top_k", "20"])
        return capsys.readouterr().out

    first = sample(1)
    assert first == sample(1)
    assert first != sample(2)
    assert len(first.splitlines()) == len(SENTENCES)


def test_n_best_are_tab_separated_on_the_sentences_line(model_dir, loaded, tmp_path, capsys):
    model, tokenizer = loaded
    path = tmp_path / "input.txt.gz"
    path.write_bytes(gzip.compress(f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n".encode()))
    output = tmp_path / "output.txt"
    main([str(model_dir), "--input", str(path), "--output", str(output), "--num_return_sequences", "3"])
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    best = translate_texts(model, tokenizer, [SENTENCES[0], SENTENCES[1]])
    for line, expected in zip([lines[0], lines[2]], best, strict=True):
        candidates = line.split("\t")
        assert len(candidates) == 3 and candidates[0] == expected and len(set(candidates)) > 1
    assert capsys.readouterr().out == ""


def test_cli_rejects_a_layer_outside_the_decoder(model_dir, tmp_path):
    with pytest.raises(UsageError) as error:
        main([str(model_dir), SENTENCES[0], "--attention-plot", str(tmp_path / "a.png"), "--layer", "2"])
    assert "layer=2" in str(error.value) and "0..1" in str(error.value) and "-2..-1" in str(error.value)
    assert not (tmp_path / "a.png").exists()


# ---- attention weights and plots ------------------------------------------------------------------------------------


@torch.no_grad()
def test_cross_attention_equals_the_models_own_output(loaded):
    model, tokenizer = loaded
    assert model.config._attn_implementation == "sdpa"
    weights, source_tokens, target_tokens = cross_attention(model, tokenizer, SENTENCES[1])
    assert model.config._attn_implementation == "sdpa"  # switched back after the eager pass

    inputs = tokenizer(SENTENCES[1], return_tensors="pt")
    generated = model.generate(**inputs)[0]  # the paper's beam search, as cross_attention ran it
    assert source_tokens == tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
    assert target_tokens == tokenizer.convert_ids_to_tokens(generated[1:])  # random weights: no EOS, max length
    config = model.config
    assert weights.shape == (
        config.decoder_layers,
        config.decoder_attention_heads,
        len(target_tokens),
        len(source_tokens),
    )
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))

    eager = AutoModelForSeq2SeqLM.from_pretrained(model.name_or_path, attn_implementation="eager").eval()
    outputs = eager(**inputs, decoder_input_ids=generated[None, :-1], output_attentions=True)
    torch.testing.assert_close(weights, torch.stack(outputs.cross_attentions)[:, 0])


def test_cross_attention_of_a_given_target(loaded):
    model, tokenizer = loaded
    target = tokenizer(text_target="Oina Musa sittet .")["input_ids"]
    weights, _, target_tokens = cross_attention(model, tokenizer, SENTENCES[0], target_ids=target)
    assert target_tokens == tokenizer.convert_ids_to_tokens(target)
    assert weights.shape[2] == len(target)


def test_plots_are_nonblank_pngs_and_the_head_grid_is_bigger(loaded, tmp_path):
    import matplotlib.image

    weights, source_tokens, target_tokens = cross_attention(*loaded, SENTENCES[0])
    shapes = {}
    for name, head in (("mean", None), ("one", 3), ("all", "all")):
        path = plot_attention(weights, source_tokens, target_tokens, tmp_path / f"{name}.png", layer=-1, head=head)
        assert path.stat().st_size > 5000
        pixels = matplotlib.image.imread(path)
        assert pixels.ndim == 3 and pixels.var() > 0
        shapes[name] = pixels.shape
    assert shapes["all"][0] > shapes["one"][0] and shapes["all"][1] > shapes["one"][1]

    with pytest.raises(ValueError, match=r"layer=2 is out of range.*0\.\.1 \(or -2\.\.-1"):
        plot_attention(weights, source_tokens, target_tokens, tmp_path / "x.png", layer=2)
    with pytest.raises(ValueError, match=r"head=4 is out of range.*0\.\.3"):
        plot_attention(weights, source_tokens, target_tokens, tmp_path / "x.png", head=4)


def test_translate_groups_the_n_best_of_each_sentence(loaded):
    """Sentences of different lengths are reordered into batches; each must get its own n outputs back."""
    from hf_vaswani_training.serving.decoding import translate_texts

    model, tokenizer = loaded
    sentences = ["A mouse sits .", "The old dogs of the teacher do not sleep under the table .", "We read ."]
    n_best = translate_texts(model, tokenizer, sentences, max_tokens=40, num_beams=3, num_return_sequences=3)
    assert [len(group) for group in n_best] == [3, 3, 3]
    for sentence, group in zip(sentences, n_best, strict=True):
        alone = model.generate(**tokenizer([sentence], return_tensors="pt"), num_beams=3, num_return_sequences=3)
        assert group == tokenizer.batch_decode(alone, skip_special_tokens=True)
