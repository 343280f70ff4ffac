"""CTranslate2 conversion (`training.serving.ctranslate2_export`): the spec the loader builds, the converted model's greedy and
beam tokens against `generate()`, quantized conversion, and the command-line paths (export --format ctranslate2,
translate --engine ctranslate2).

One tiny model for the file, trained in-process for a few seconds on a copy task so that outputs are varied and end
with EOS at different lengths (an untrained model repeats one token, and beam search would have nothing to choose).
"""

import contextlib
import copy
import errno
import io
import math
import os
import shutil
import sys
from pathlib import Path

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
from tests.conftest import TEST_THREADS, tiny_model  # noqa: E402

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
    return CTranslate2Translator(converted, intra_threads=TEST_THREADS)


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


@pytest.mark.numeric
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


@pytest.mark.numeric
def test_greedy_tokens_equal_generate(trained, translator):
    _, model, tokenizer, sentences = trained
    expected = generate_tokens(model, tokenizer, sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    actual = translator.translate_tokens(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert_same_outputs(actual, expected)
    lengths = {len(nbest[0]) for nbest in actual}
    assert len(lengths) > 3, "the copy model should give outputs of different lengths"


@pytest.mark.numeric
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


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """CTranslate2's int8 weights (Wu et al. 2016, its docs/quantization.md): scale = 127 / max|row|, q = rint(w * scale)."""
    scale = 127.0 / weight.abs().amax(dim=1).clamp_min(1e-30)
    return torch.round(weight * scale[:, None]), scale


@pytest.mark.numeric
def test_int8_weights_are_within_half_a_step_of_the_float_weights(trained):
    """Exact arithmetic, the same on every CPU: q = rint(w * s) is within 0.5 of w * s, so |w - q / s| <= 0.5 / s
    (plus the float32 rounding of w * s, at most half an ulp of 127: 4e-6 / s), and each row's largest weight maps
    to +-127."""
    _, model, tokenizer, _ = trained
    loader = register_vaswani_loader()
    # The spec holds the model's own tensors and quantization scales them in place: give it a copy.
    float_spec, int8_spec = loader(model, tokenizer), loader(copy.deepcopy(model), tokenizer)
    float_spec.validate()
    int8_spec.validate()
    int8_spec.optimize(quantization="int8")
    float_variables, int8_variables = float_spec.variables(), int8_spec.variables()
    checked = 0
    for name, value in int8_variables.items():
        if not name.endswith("weight") or name + "_scale" not in int8_variables:
            continue
        weight = torch.as_tensor(float_variables[name].numpy()).float()
        q = torch.as_tensor(value.numpy()).float()
        scale = torch.as_tensor(int8_variables[name + "_scale"].numpy()).float()
        assert q.abs().max() <= 127 and torch.equal(q.abs().amax(dim=1), torch.full_like(scale, 127.0)), name
        error = (weight - q / scale[:, None]).abs()
        assert torch.all(error <= (0.5 + 4e-6) / scale[:, None]), (name, float((error * scale[:, None]).max()))
        checked += 1
    assert checked >= 20  # every projection, the fused Q/K/V, both feed-forward layers, the shared embedding


@pytest.mark.numeric
def test_int8_file_computed_in_float32_scores_as_the_dequantized_model(trained, converted, tmp_path):
    """The int8 file loaded with compute_type="float32" (what `vaswani-translate --dtype float32` does) runs the
    weights q / s through float32 kernels: it must score (source, target) pairs as the PyTorch model whose weights
    are q / s does. Only float32 rounding separates them: each dot product of K <= 64 terms is off by at most
    K * 2**-24 (6e-8) of the sum of its terms' magnitudes (Higham's gamma_K bound), about 4e-6; through the ~20
    matrix products of this 2+2-layer model (LayerNorm rescales, it does not compound them) to logits of magnitude
    <= 30, that is below 30 * 20 * 4e-6 = 2.4e-3 nats. The bound holds for any kernel, so on every CPU and thread
    count. (A weight off by one step, a conversion bug, moves log-probs by ~1e-2.)"""
    _, model, tokenizer, sentences = trained
    int8_dir = convert_to_ctranslate2(trained[0], tmp_path / "int8", quantization="int8")
    # int8 matrices: the file holds a quarter of the bytes for every weight matrix (norms and biases stay float).
    assert (int8_dir / "model.bin").stat().st_size < 0.6 * (converted / "model.bin").stat().st_size
    dequantized = type(model)(model.config).eval()
    dequantized.load_state_dict(model.state_dict())
    with torch.no_grad():
        for module in dequantized.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and module.weight.dim() == 2:
                q, scale = quantize_rows(module.weight)
                module.weight.copy_(q / scale[:, None])
    translator = CTranslate2Translator(int8_dir, intra_threads=TEST_THREADS, compute_type="float32")
    targets = [nbest[0] for nbest in translator.translate_tokens(sentences, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)]
    differences = []
    for sentence, target in zip(sentences, targets, strict=True):
        source_ids = tokenizer(sentence)["input_ids"]
        scored = translator.translator.score_batch(
            [tokenizer.convert_ids_to_tokens(source_ids)], [tokenizer.convert_ids_to_tokens(target)]
        )[0]
        with torch.no_grad():
            logits = dequantized(
                input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([[BOS, *target]])
            ).logits[0]
        reference = torch.log_softmax(logits, dim=-1)[torch.arange(len(target) + 1), [*target, EOS]]
        differences += [abs(a - b) for a, b in zip(scored.log_probs, reference.tolist(), strict=True)]
    assert max(differences) < 2.4e-3


@pytest.mark.numeric
def test_int8_export_reports_its_distance_from_generate(trained, tmp_path):
    """The export of a quantized model measures it on the sample sentences (one line); the numbers are not asserted
    here beyond their form, because int8 kernels differ by CPU (the subprocess test below forces the worst)."""
    code, stdout, stderr = run(
        cli.export, [str(trained[0]), str(tmp_path / "int8"), "--format", "ctranslate2", "--quantization", "int8"]
    )
    assert code == 0, stderr
    line = [line for line in stdout.splitlines() if line.startswith("int8 on this CPU: ")]
    assert len(line) == 1 and "tokens identical to generate() on " in line[0] and "/3 sentences" in line[0]
    assert " nats per token" in line[0]


@pytest.mark.numeric
def test_int8_on_kernels_without_vnni_is_reported_in_one_line(trained, tmp_path):
    """oneDNN's int8 GEMM without VNNI (ONEDNN_MAX_CPU_ISA=AVX2 forces it on any x86-64 CPU, with CT2_USE_MKL=0 on an
    Intel CPU, where CTranslate2 takes MKL's int8 GEMM instead of oneDNN's: an AVX2-only AMD EPYC runs it by default) adds pairs of int8 products in saturating 16-bit lanes; the copy-task model then moves
    0.35 nats per token from generate() instead of 0.02. The export must say so, in one warning line naming the
    kernels and what keeps quality. A subprocess, because oneDNN reads the variable once per process."""
    import os
    import subprocess

    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_USE_MKL": "0", "OMP_NUM_THREADS": "1"}
    out_dir = tmp_path / "int8"
    argv = [str(trained[0]), str(out_dir), "--format", "ctranslate2", "--quantization", "int8", "--check"]
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from hf_vaswani_training import cli; sys.exit(cli.export(sys.argv[1:]))"]
        + argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--check: tokens identical to generate() on " in result.stdout and " nats per token" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "is far from generate()" in line]
    assert len(warnings) == 1, result.stderr[-2000:] + result.stdout[-2000:]
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in warnings[0] and "--dtype float32" in warnings[0]


def test_refuses_to_replace_other_files(trained, tmp_path):
    out_dir = tmp_path / "precious"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("keep me")
    with pytest.raises(usage.UsageError, match="choose a new OUT_DIR"):
        convert_to_ctranslate2(trained[0], out_dir)
    assert (out_dir / "notes.txt").read_text() == "keep me"
    with pytest.raises(usage.UsageError, match="quantization='int3'"):
        convert_to_ctranslate2(trained[0], tmp_path / "new", quantization="int3")


@pytest.mark.parametrize("failure", ["conversion", "full disk"])
def test_a_failed_conversion_leaves_nothing_half_written(trained, converted, tmp_path, monkeypatch, failure):
    """Written staged: a failure mid-way (after part of model.bin is written) leaves no OUT_DIR where there was none,
    an earlier conversion as it was, and no staging folder beside them."""
    from ctranslate2.specs import model_spec

    def save(self, output_dir):
        (Path(output_dir) / "model.bin").write_bytes(b"\0" * 1000)  # half a model
        if failure == "full disk":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(output_dir) / "model.bin"))
        raise RuntimeError("conversion failed half-way")

    earlier = tmp_path / "earlier"
    shutil.copytree(converted, earlier)
    before = {path.name: path.read_bytes() for path in earlier.iterdir()}
    monkeypatch.setattr(model_spec.ModelSpec, "save", save)
    expected = (usage.UsageError, "No space left on device") if failure == "full disk" else (RuntimeError, "half-way")
    for out_dir in (tmp_path / "new", earlier):
        with pytest.raises(expected[0], match=expected[1]) as caught:
            convert_to_ctranslate2(trained[0], out_dir)
        if failure == "full disk":
            assert str(caught.value).startswith(f"cannot write {out_dir}: ") and "\n" not in str(caught.value)
    assert not (tmp_path / "new").exists()
    assert {path.name: path.read_bytes() for path in earlier.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["earlier"]  # no .tmp-* folder beside them


def test_a_conversion_replaces_an_earlier_one_whole(trained, converted, tmp_path):
    out_dir = tmp_path / "ct2"
    shutil.copytree(converted, out_dir)
    (out_dir / "model.bin").write_bytes(b"stale")
    convert_to_ctranslate2(trained[0], out_dir)
    assert (out_dir / "model.bin").read_bytes() == (converted / "model.bin").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]


# ---- command line ---------------------------------------------------------------------------------------------------


def run(command, argv: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = command(argv)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.numeric
def test_export_command_converts_and_checks(trained, tmp_path, monkeypatch):
    out_dir = tmp_path / "exported"
    real_translator, threads = ctranslate2.Translator, []

    def translator(*args, **kwargs):  # the real translator; its thread count noted
        threads.append(kwargs.get("intra_threads", 0))
        return real_translator(*args, **kwargs)

    monkeypatch.setattr(ctranslate2, "Translator", translator)
    argv = [str(trained[0]), str(out_dir), "--format", "ctranslate2", "--check", "--max_new_tokens", "12"]
    code, stdout, stderr = run(cli.export, [*argv, "--threads", "1"])
    assert code == 0, stderr
    assert threads == [1]  # the command's count, not CTranslate2's default of every core (0)
    report = [line for line in stdout.splitlines() if line.startswith("--check: ")]
    assert len(report) == 1 and "tokens identical to generate() on 3/3 sentences (100%)" in report[0], stdout
    # float32 against float32: rounding only, below 2.4e-3 nats (the bound derived for the dequantized model above).
    assert float(report[0].split("mean log-prob difference ")[1].split()[0]) < 2.4e-3
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


def test_the_default_position_table_is_the_configs():
    """A config.json or export info without the field means VaswaniConfig's default, which the module spells out."""
    from hf_vaswani import VaswaniConfig
    from hf_vaswani_training.serving.ctranslate2_export import DEFAULT_MAX_POSITIONS

    assert VaswaniConfig().max_position_embeddings == DEFAULT_MAX_POSITIONS
