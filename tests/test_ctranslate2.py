"""CTranslate2 conversion (`training.serving.ctranslate2_export`): the spec the loader builds, the converted model's greedy and
beam tokens against `generate()`, quantized conversion, and the command-line paths (export --format ctranslate2,
translate --engine ctranslate2).

One tiny model for the file, trained in-process for a few seconds on a copy task so that outputs are varied and end
with EOS at different lengths (an untrained model repeats one token, and beam search would have nothing to choose).
"""

import contextlib
import io
import math
import sys

import numpy as np
import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from hf_vaswani_training import cli, usage  # noqa: E402
from hf_vaswani_training.data.tokenizer import train_joint_bpe  # noqa: E402
from hf_vaswani_training.serving.ctranslate2_export import (  # noqa: E402
    CTranslate2NotInstalled,
    CTranslate2Translator,
    convert_to_ctranslate2,
    register_vaswani_loader,
    strip_special,
)
from tests.conftest import tiny_model  # noqa: E402

BOS, PAD, EOS = 0, 1, 2
MAX_NEW_TOKENS = 16
INSTALL_HINT = 'pip install "hf-vaswani[ctranslate2]"'


def copy_task_batch(generator: torch.Generator, vocab_size: int, batch_size: int = 32):
    lengths = torch.randint(2, 12, (batch_size,), generator=generator)
    input_ids = torch.randint(4, vocab_size, (batch_size, int(lengths.max()) + 1), generator=generator)
    input_ids[torch.arange(input_ids.shape[1]) > lengths[:, None]] = PAD
    input_ids[torch.arange(batch_size), lengths] = EOS
    return input_ids, (input_ids != PAD).long()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model folder, model, tokenizer, sentences): a copy-task model saved with a tokenizer of its vocabulary."""
    tokenizer = train_joint_bpe(["A man sits on a bench .", "Two dogs run through the snow ."] * 4, vocab_size=64)
    torch.manual_seed(0)
    model = tiny_model(seed=0, vocab_size=64).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(120):
        input_ids, attention_mask = copy_task_batch(generator, len(tokenizer))
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model_dir = tmp_path_factory.mktemp("model")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    # Sentences of random pieces of the vocabulary, 2-11 pieces long, as the model was trained on.
    pieces = tokenizer.convert_ids_to_tokens(list(range(4, len(tokenizer))))
    generator = torch.Generator().manual_seed(1)
    sentences = []
    for _ in range(24):
        length = int(torch.randint(2, 12, (1,), generator=generator))
        indices = torch.randint(0, len(pieces), (length,), generator=generator).tolist()
        sentences.append(tokenizer.convert_tokens_to_string([pieces[i] for i in indices]).strip())
    return model_dir, model, tokenizer, sentences


@pytest.fixture(scope="module")
def converted(trained, tmp_path_factory):
    model_dir = trained[0]
    return convert_to_ctranslate2(model_dir, tmp_path_factory.mktemp("ct2") / "float32")


@pytest.fixture(scope="module")
def translator(converted):
    return CTranslate2Translator(converted, intra_threads=1)


def generate_tokens(model, tokenizer, sentences, **kwargs) -> list[list[list[int]]]:
    """generate() one sentence at a time (no padding anywhere), as CTranslate2 returns outputs: n-best id lists."""
    outputs = []
    for sentence in sentences:
        batch = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            rows = model.generate(**batch, max_length_offset=None, **kwargs).tolist()
        outputs.append([strip_special(row, BOS, EOS, PAD) for row in rows])
    return outputs


# ---- the spec -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec(trained):
    _, model, tokenizer, _ = trained
    return register_vaswani_loader()(model, tokenizer)


def test_position_table_is_interleaved_sinusoids(spec, trained):
    config = trained[1].config
    positions = np.arange(config.max_position_embeddings, dtype=np.float64)[:, None]
    frequencies = 10000.0 ** (-np.arange(0, config.d_model, 2, dtype=np.float64) / config.d_model)
    expected = np.empty((config.max_position_embeddings, config.d_model))
    expected[:, 0::2] = np.sin(positions * frequencies)  # PE(pos, 2i), §3.5
    expected[:, 1::2] = np.cos(positions * frequencies)  # PE(pos, 2i+1)
    for stack in (spec.encoder, spec.decoder):
        table = np.asarray(stack.position_encodings.encodings)  # the loader gives the spec a numpy array
        assert table.shape == expected.shape
        # float32 sines of angles up to 127 rad: about 1e-5 of rounding
        np.testing.assert_allclose(table, expected, atol=1e-4)


def test_spec_is_post_ln_relu_scaled_with_one_shared_matrix(spec, trained):
    model = trained[1]
    config = model.config
    assert not spec.encoder.pre_norm and not spec.decoder.pre_norm
    assert not hasattr(spec.encoder, "layer_norm") and not hasattr(spec.decoder, "layer_norm")  # no final LayerNorm
    assert int(spec.encoder.activation) == int(ctranslate2.specs.Activation.RELU)
    assert spec.encoder.scale_embeddings == pytest.approx(math.sqrt(config.d_model))
    assert spec.decoder.scale_embeddings == pytest.approx(math.sqrt(config.d_model))
    assert not spec.decoder.projection.has_bias()
    assert spec.config.layer_norm_epsilon == config.layer_norm_eps
    shared = model.get_input_embeddings().weight.detach()
    for weight in (spec.encoder.embeddings[0].weight, spec.decoder.embeddings.weight, spec.decoder.projection.weight):
        assert torch.equal(weight.detach() if torch.is_tensor(weight) else torch.as_tensor(weight), shared)
    # CTranslate2 stores equal variables once: two of the three become aliases of the first.
    spec.validate()
    spec.optimize()
    names = [spec.encoder.embeddings[0].weight, spec.decoder.embeddings.weight, spec.decoder.projection.weight]
    aliases = [name for name in names if isinstance(name, str)]
    assert len(aliases) == 2 and len(set(aliases)) == 1


def assert_same_outputs(actual: list, expected: list) -> None:
    """CTranslate2 and PyTorch run different float32 kernels (chosen per CPU), so a near-tie between two tokens may
    resolve differently on another machine; one sentence in the 24 may differ for that reason. A wrong conversion
    (e.g. concatenated instead of interleaved positions) changes nearly all of them."""
    differing = [index for index, (a, e) in enumerate(zip(actual, expected, strict=True)) if a != e]
    assert len(differing) <= 1, (differing, [actual[i] for i in differing], [expected[i] for i in differing])


# ---- decoding -------------------------------------------------------------------------------------------------------


def test_greedy_tokens_equal_generate(trained, translator):
    _, model, tokenizer, sentences = trained
    expected = generate_tokens(model, tokenizer, sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    actual = translator.translate_tokens(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert_same_outputs(actual, expected)
    lengths = {len(nbest[0]) for nbest in actual}
    assert len(lengths) > 3, "the copy model should give outputs of different lengths"


@pytest.mark.parametrize("length_penalty", [1.0, 0.6])
def test_beam_tokens_equal_generate_with_what_ctranslate2_expresses(trained, translator, length_penalty):
    """Beam 4, 2-best: generate() with the Hugging Face length penalty and early_stopping=True (the rules
    CTranslate2 implements) gives the same hypotheses in the same order."""
    _, model, tokenizer, sentences = trained
    options = dict(num_beams=4, num_return_sequences=2, length_penalty=length_penalty)
    expected = generate_tokens(
        model,
        tokenizer,
        sentences,
        max_new_tokens=MAX_NEW_TOKENS,
        early_stopping=True,
        length_penalty_type=None,
        **options,
    )
    actual = translator.translate_tokens(sentences, max_new_tokens=MAX_NEW_TOKENS, **options)
    assert_same_outputs(actual, expected)


def test_texts_and_defaults(trained, translator):
    _, model, tokenizer, sentences = trained
    # The paper's decoding from the saved generation_config.json (beam 4, alpha 0.6, source + 50).
    assert translator.generation_defaults["num_beams"] == model.generation_config.num_beams == 4
    assert translator.generation_defaults["length_penalty"] == pytest.approx(0.6)
    assert translator.generation_defaults["max_length_offset"] == 50
    texts = translator.translate(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    ids = translator.translate_tokens(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert texts == [tokenizer.decode(nbest[0], skip_special_tokens=True) for nbest in ids]
    nbest = translator.translate(sentences[:3], num_beams=4, num_return_sequences=3)
    assert all(isinstance(outputs, list) and len(outputs) == 3 for outputs in nbest)
    assert translator.translate([]) == []
    with pytest.raises(ValueError, match="num_return_sequences=5"):
        translator.translate(sentences[:1], num_beams=4, num_return_sequences=5)


def test_max_length_offset_limits_each_batch(trained, translator):
    sentences = trained[3]
    lengths = [len(ids) for ids in translator.tokenizer(sentences)["input_ids"]]
    outputs = translator.translate_tokens(sentences, num_beams=1, max_length_offset=0, max_sentences=1)
    # One sentence per batch: the batch limit is that sentence's length + 0.
    assert all(len(nbest[0]) <= length for nbest, length in zip(outputs, lengths))
    assert any(len(nbest[0]) == length for nbest, length in zip(outputs, lengths))


def test_int8_conversion_loads_and_scores_close_to_float32(trained, converted, translator, tmp_path):
    sentences = trained[3]
    int8_dir = convert_to_ctranslate2(trained[0], tmp_path / "int8", quantization="int8")
    # int8 matrices: the file holds a quarter of the bytes for every weight matrix (norms and biases stay float).
    assert (int8_dir / "model.bin").stat().st_size < 0.6 * (converted / "model.bin").stat().st_size
    int8 = CTranslate2Translator(int8_dir, intra_threads=1)
    outputs = int8.translate_tokens(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert len(outputs) == len(sentences) and all(len(nbest) == 1 for nbest in outputs)
    # The same (source, target) pairs scored by both: int8 weights move each token's log-probability by a little
    # (observed here: mean 0.02 nats, at most 0.15); the bound leaves room for other CPUs' int8 kernels.
    tokenizer = translator.tokenizer
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sentences)["input_ids"]]
    targets = [
        tokenizer.convert_ids_to_tokens(nbest[0]) for nbest in translator.translate_tokens(sentences, num_beams=1)
    ]
    float32_scores = translator.translator.score_batch(sources, targets)
    int8_scores = int8.translator.score_batch(sources, targets)
    differences = [
        abs(a - b) for x, y in zip(float32_scores, int8_scores) for a, b in zip(x.log_probs, y.log_probs, strict=True)
    ]
    assert float(np.mean(differences)) < 0.25


def test_refuses_to_replace_other_files(trained, tmp_path):
    out_dir = tmp_path / "precious"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("keep me")
    with pytest.raises(usage.UsageError, match="choose a new OUT_DIR"):
        convert_to_ctranslate2(trained[0], out_dir)
    assert (out_dir / "notes.txt").read_text() == "keep me"
    with pytest.raises(usage.UsageError, match="quantization='int3'"):
        convert_to_ctranslate2(trained[0], tmp_path / "new", quantization="int3")


# ---- command line ---------------------------------------------------------------------------------------------------


def run(command, argv: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = command(argv)
    return code, stdout.getvalue(), stderr.getvalue()


def test_export_command_converts_and_checks(trained, tmp_path):
    out_dir = tmp_path / "exported"
    code, stdout, stderr = run(
        cli.export, [str(trained[0]), str(out_dir), "--format", "ctranslate2", "--check", "--max_new_tokens", "12"]
    )
    assert code == 0, stderr
    assert "--check: tokens identical on 3 sentences" in stdout
    assert (out_dir / "model.bin").is_file() and (out_dir / "tokenizer.json").is_file()
    code, _, stderr = run(cli.export, [str(trained[0]), str(tmp_path / "x"), "--quantization", "int8"])
    assert code == 2 and "--quantization applies to --format ctranslate2 only" in stderr


def test_translate_command_same_conventions(trained, converted, translator, tmp_path):
    sentences = trained[3][:6]
    source = tmp_path / "input.txt"
    source.write_text("\n".join([sentences[0], "", *sentences[1:]]) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    options = ["--num_beams", "4", "--num_return_sequences", "2", "--max_length_offset", "5"]
    argv = [str(converted), "--engine", "ctranslate2", "--input", str(source), "--output", str(output), *options]
    code, _, stderr = run(cli.translate, argv)
    assert code == 0, stderr
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    expected = translator.translate(sentences, num_beams=4, num_return_sequences=2, max_length_offset=5)
    assert lines[1] == ""  # an empty input line gives an empty output line
    assert [line.split("\t") for line in lines[:1] + lines[2:]] == expected

    # A training folder is converted on the fly; --greedy, the model's other defaults.
    code, stdout, stderr = run(cli.translate, [str(trained[0]), "--engine", "ctranslate2", "--greedy", *sentences])
    assert code == 0, stderr
    assert stdout.splitlines() == translator.translate(sentences, num_beams=1)

    code, _, stderr = run(cli.translate, [str(converted), "--engine", "ctranslate2", "a", "--attention-plot", "a.png"])
    assert code == 2 and "--attention-plot needs the PyTorch model" in stderr


def test_missing_ctranslate2_is_one_line(trained, tmp_path, monkeypatch):
    from hf_vaswani_training.serving import ctranslate2_export

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    monkeypatch.setattr(ctranslate2_export, "_LOADER", None)
    with pytest.raises(CTranslate2NotInstalled, match="hf-vaswani\\[ctranslate2\\]"):
        convert_to_ctranslate2(trained[0], tmp_path / "out")
    code, _, stderr = run(cli.export, [str(trained[0]), str(tmp_path / "out"), "--format", "ctranslate2"])
    assert code == 2 and INSTALL_HINT in stderr and len(stderr.strip().splitlines()) == 1
    code, _, stderr = run(cli.translate, [str(trained[0]), "--engine", "ctranslate2", "a"])
    assert code == 2 and INSTALL_HINT in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
