"""ONNX export (`training.serving.export`): the three graphs against the PyTorch model, and ONNX Runtime greedy decoding
against `generate()`.

One model for the whole file: tiny, trained in-process for a few seconds on a copy task, so that greedy outputs are
varied and end with EOS at different lengths (an untrained model repeats one token, or stops at once), then
exported once through the command line with --check.
"""

import contextlib
import io
import json

import pytest
import torch

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # torch.onnx.export(dynamo=True) translates through it

from hf_vaswani.compat_vaswani import output_cache  # noqa: E402
from hf_vaswani_training.data.tokenizer import train_joint_bpe  # noqa: E402
from hf_vaswani_training.serving.export import (  # noqa: E402
    CONFIG_FILE,
    CROSS_ATTENTION_FILE,
    DECODER_STEP_FILE,
    DEFAULT_OPSET,
    ENCODER_FILE,
    main,
    onnx_greedy_decode,
    written_opsets,
)
from tests.conftest import tiny_model  # noqa: E402

PAD, EOS = 1, 2
MAX_NEW_TOKENS = 12
# Three sources of different lengths, right-padded, each ending with EOS as the tokenizer writes them.
SOURCES = [
    [5, 6, 7, 8, 9, 10, 11, EOS],
    [12, 13, 14, EOS, PAD, PAD, PAD, PAD],
    [20, 21, 22, 23, 24, EOS, PAD, PAD],
]


def copy_task_batch(generator: torch.Generator, batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(2, 12, (batch_size,), generator=generator)
    input_ids = torch.randint(4, 64, (batch_size, int(lengths.max()) + 1), generator=generator)
    input_ids[torch.arange(input_ids.shape[1]) > lengths[:, None]] = PAD
    input_ids[torch.arange(batch_size), lengths] = EOS
    return input_ids, (input_ids != PAD).long()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = tiny_model(seed=0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(120):
        input_ids, attention_mask = copy_task_batch(generator)
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model_dir = tmp_path_factory.mktemp("model")
    model.eval().save_pretrained(model_dir)
    tokenizer = train_joint_bpe(["A man sits on a bench .", "Two dogs run through the snow ."] * 4, vocab_size=64)
    tokenizer.save_pretrained(model_dir)

    out_dir = tmp_path_factory.mktemp("onnx")
    stdout = io.StringIO()
    real_session = onnxruntime.InferenceSession
    sessions_threads.clear()

    def session(path, options=None, *args, **kwargs):  # the real session; its thread counts noted
        sessions_threads.append((options.intra_op_num_threads, options.inter_op_num_threads) if options else None)
        return real_session(path, options, *args, **kwargs)

    argv = [str(model_dir), str(out_dir), "--check", "--max_new_tokens", str(MAX_NEW_TOKENS), "--threads", "1"]
    with contextlib.redirect_stdout(stdout), pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnxruntime, "InferenceSession", session)
        exit_code = main(argv)
    return model_dir, out_dir, exit_code, stdout.getvalue()


sessions_threads: list = []  # (intra, inter) op threads of each ONNX Runtime session --check opened


@pytest.fixture(scope="module")
def reference(exported):
    """The model as users load it (default attention implementation), independent of the exporter's copy."""
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(exported[0]).eval()


@pytest.fixture(scope="module")
def sessions(exported):
    out_dir = exported[1]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1

    def session(name):
        return onnxruntime.InferenceSession(str(out_dir / name), options, providers=["CPUExecutionProvider"])

    return {name: session(name) for name in (ENCODER_FILE, CROSS_ATTENTION_FILE, DECODER_STEP_FILE)}


def padded_sources() -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.tensor(SOURCES)
    return input_ids, (input_ids != PAD).long()


def test_cli_writes_the_graphs_tokenizer_and_config_and_check_agrees(exported, reference):
    model_dir, out_dir, exit_code, stdout = exported
    assert exit_code == 0, stdout
    assert "--check: tokens identical on 3 sentences" in stdout
    for name in (ENCODER_FILE, CROSS_ATTENTION_FILE, DECODER_STEP_FILE, CONFIG_FILE, "tokenizer.json"):
        assert (out_dir / name).is_file(), name
    assert (out_dir / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    config = json.loads((out_dir / CONFIG_FILE).read_text())
    model_config = reference.config
    assert (config["decoder_start_token_id"], config["pad_token_id"], config["eos_token_id"]) == (0, PAD, EOS)
    assert config["decoder_layers"] == model_config.decoder_layers == 2
    assert config["decoder_attention_heads"] == model_config.decoder_attention_heads == 4
    assert config["head_dim"] * config["decoder_attention_heads"] == config["d_model"] == model_config.d_model
    assert config["opset"] == DEFAULT_OPSET and written_opsets(out_dir) == {DEFAULT_OPSET}  # what the files hold


def test_check_runs_onnx_runtime_on_the_commands_threads(exported):
    """--check's sessions take the command's count (--threads 1 here), not ONNX Runtime's default of every core (0)."""
    assert exported[2] == 0, exported[3]
    assert sessions_threads == [(1, 1)] * 3  # encoder, cross-attention, decoder step


def test_verbose_is_an_option_and_brings_back_library_info(tmp_path, monkeypatch):
    import logging

    from hf_vaswani_training.serving import export as export_module

    assert "--verbose" in export_module.build_parser().format_help()

    class Stop(Exception):
        pass

    def stop(*args):
        raise Stop

    monkeypatch.setattr(export_module, "check_arguments", lambda args: None)
    monkeypatch.setattr(export_module, "use_threads", stop)  # the first thing after the logs are set up
    for flags, level in ((["--verbose"], logging.INFO), ([], logging.WARNING)):  # quiet again at the end
        with pytest.raises(Stop):
            main([str(tmp_path), str(tmp_path / "out"), *flags])
        assert logging.getLogger("transformers").level == level


def test_onnx_checker_passes_and_axes_are_dynamic(exported):
    out_dir = exported[1]
    for name in (ENCODER_FILE, CROSS_ATTENTION_FILE, DECODER_STEP_FILE):
        onnx.checker.check_model(str(out_dir / name), full_check=True)
    graph = onnx.load(str(out_dir / DECODER_STEP_FILE)).graph
    shapes = {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim] for value in graph.input
    }
    shapes.update(
        {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim] for value in graph.output}
    )
    assert shapes["decoder_input_ids"] == ["batch", 1]
    assert shapes["past_key_values.1.decoder.key"] == ["batch", 4, "past_len", 8]
    assert shapes["past_key_values.1.encoder.value"] == ["batch", 4, "src_len", 8]
    assert shapes["logits"] == ["batch", 1, 64]
    assert shapes["present.1.decoder.value"] == ["batch", 4, "past_len + 1", 8]


def test_encoder_matches_the_model_on_a_right_padded_batch(reference, sessions):
    input_ids, attention_mask = padded_sources()
    (actual,) = sessions[ENCODER_FILE].run(
        None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()}
    )
    with torch.no_grad():
        expected = reference.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    assert actual.shape == (3, 8, 32)
    torch.testing.assert_close(torch.from_numpy(actual), expected, atol=1e-4, rtol=0)


def test_decoder_steps_match_a_full_forward_with_an_empty_and_a_growing_past(reference, sessions):
    input_ids, attention_mask = padded_sources()
    prefix = torch.tensor([[0, 5, 6, 7], [0, 12, 13, 14], [0, 20, 2, 1]])  # start token, then any tokens
    with torch.no_grad():
        forward = reference(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=prefix, use_cache=True
        )
    cache = output_cache(forward).self_attention_cache

    (encoder_hidden_states,) = sessions[ENCODER_FILE].run(
        None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()}
    )
    cross = sessions[CROSS_ATTENTION_FILE].run(None, {"encoder_hidden_states": encoder_hidden_states})
    feeds = {"encoder_attention_mask": attention_mask.numpy()}
    for i in range(2):
        feeds[f"past_key_values.{i}.decoder.key"] = feeds[f"past_key_values.{i}.decoder.value"] = torch.zeros(
            3, 4, 0, 8
        ).numpy()
        feeds[f"past_key_values.{i}.encoder.key"], feeds[f"past_key_values.{i}.encoder.value"] = cross[
            2 * i : 2 * i + 2
        ]
    output_names = [output.name for output in sessions[DECODER_STEP_FILE].get_outputs()]
    for step in range(prefix.shape[1]):
        feeds["decoder_input_ids"] = prefix[:, step : step + 1].numpy()
        outputs = dict(zip(output_names, sessions[DECODER_STEP_FILE].run(None, feeds)))
        assert outputs["logits"].shape == (3, 1, 64)
        torch.testing.assert_close(
            torch.from_numpy(outputs["logits"][:, 0]), forward.logits[:, step], atol=1e-4, rtol=0, msg=f"step {step}"
        )
        for i in range(2):
            for kind, expected in (("key", cache.layers[i].keys), ("value", cache.layers[i].values)):
                present = torch.from_numpy(outputs[f"present.{i}.decoder.{kind}"])
                assert present.shape == (3, 4, step + 1, 8)
                torch.testing.assert_close(present, expected[:, :, : step + 1], atol=1e-4, rtol=0)
                feeds[f"past_key_values.{i}.decoder.{kind}"] = outputs[f"present.{i}.decoder.{kind}"]


def test_greedy_decoding_gives_the_tokens_of_generate(exported, reference):
    input_ids, attention_mask = padded_sources()
    with torch.no_grad():
        expected = reference.generate(
            input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=MAX_NEW_TOKENS
        ).tolist()
    actual = onnx_greedy_decode(exported[1], input_ids, attention_mask, MAX_NEW_TOKENS, num_threads=1)
    assert actual == expected
    # The comparison means something only if the outputs do: long, varied, and ending at different lengths.
    lengths = [row.index(EOS) if EOS in row else len(row) for row in actual]
    assert len(set(lengths)) >= 2 and min(lengths) >= 2 and EOS in actual[1], actual
    assert len({token for row in actual for token in row} - {0, PAD, EOS}) >= 6, actual


def test_greedy_decoding_stops_at_max_new_tokens_and_takes_lists(exported, reference):
    input_ids, attention_mask = padded_sources()
    actual = onnx_greedy_decode(exported[1], input_ids.tolist(), None, 2, num_threads=1)
    with torch.no_grad():
        expected = reference.generate(
            input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=2
        ).tolist()
    assert actual == expected and all(len(row) == 3 for row in actual)


def test_greedy_decoding_of_one_unpadded_sentence(exported, reference):
    input_ids = torch.tensor([SOURCES[2][:6]])
    actual = onnx_greedy_decode(exported[1], input_ids, torch.ones_like(input_ids), MAX_NEW_TOKENS, num_threads=1)
    with torch.no_grad():
        expected = reference.generate(input_ids=input_ids, num_beams=1, max_new_tokens=MAX_NEW_TOKENS).tolist()
    assert actual == expected and actual[0][-1] == EOS
