"""An empty source line translates to an empty line in every path, in its place: the decoding helpers
(training/serving/decoding.py), the pipeline that travels with the model (hf_vaswani/pipeline_vaswani.py), the
command line, and CTranslate2. generate() itself, given the EOS that an empty line encodes to, invents a sentence."""

import pytest

from hf_vaswani.pipeline_vaswani import VaswaniTranslationPipeline
from hf_vaswani_training.data.tokenizer import train_joint_bpe
from hf_vaswani_training.serving.decoding import translate_texts
from tests.conftest import run_cli, tiny_model

SENTENCES = ["A mouse sits .", "The old dog does not sleep .", "Twenty four birds stand .", "We read the letter ."]
LINES = ["", SENTENCES[0], "   ", SENTENCES[1], "\t", SENTENCES[3]]
GREEDY = dict(num_beams=1, max_new_tokens=6)


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe(SENTENCES * 3, vocab_size=64, min_frequency=1, model_max_length=24)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(seed=4, vocab_size=len(tokenizer))  # a seed whose outputs are never empty


@pytest.fixture(scope="module")
def model_dir(model, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_generate_alone_invents_a_sentence_for_an_empty_line(model, tokenizer):
    """The reason for the rule, and what makes the tests below able to fail: random weights, an EOS-only source."""
    generated = model.generate(**tokenizer([""], return_tensors="pt"), **GREEDY)
    assert tokenizer.decode(generated[0], skip_special_tokens=True).strip() != ""


def test_decoding_translate_keeps_empty_lines_empty_and_in_place(model, tokenizer):
    outputs = translate_texts(model, tokenizer, LINES, **GREEDY)
    expected = translate_texts(model, tokenizer, [line for line in LINES if line.strip()], **GREEDY)
    assert [outputs[i] for i in (0, 2, 4)] == ["", "", ""]
    assert [outputs[i] for i in (1, 3, 5)] == expected
    assert all(text for text in expected)
    assert translate_texts(model, tokenizer, ["", " "], **GREEDY) == ["", ""]  # nothing to decode at all


def test_decoding_n_best_of_an_empty_line(model, tokenizer):
    outputs = translate_texts(
        model, tokenizer, ["", SENTENCES[0]], num_beams=2, num_return_sequences=2, max_new_tokens=6
    )
    assert outputs[0] == ["", ""]
    assert len(outputs[1]) == 2 and all(outputs[1])


@pytest.mark.parametrize("batch_size", [1, 4])
def test_pipeline_keeps_empty_lines_empty_and_in_place(model, tokenizer, batch_size):
    translator = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    results = translator(LINES, batch_size=batch_size, **GREEDY)
    texts = [result["translation_text"] for result in results]
    alone = [translator(line, **GREEDY)[0]["translation_text"] for line in LINES if line.strip()]
    assert [texts[i] for i in (0, 2, 4)] == ["", "", ""]
    assert [texts[i] for i in (1, 3, 5)] == alone and all(alone)


def test_pipeline_empty_string_alone_and_its_token_ids(model, tokenizer):
    translator = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    assert translator("", **GREEDY) == [{"translation_text": ""}]
    result = translator("", return_tensors=True, **GREEDY)[0]
    config = model.config
    assert result["translation_token_ids"].tolist() == [config.decoder_start_token_id, config.eos_token_id]
    two = translator([" "], num_beams=2, num_return_sequences=2, max_new_tokens=6)
    assert two == [[{"translation_text": ""}, {"translation_text": ""}]]


def test_cli_empty_argument_and_blank_input_lines(model_dir, tmp_path, capsys):
    arguments_output = tmp_path / "arguments.txt"
    argv = [model_dir, SENTENCES[0], "", SENTENCES[3], "--greedy", "--output", arguments_output]
    assert run_cli("translate", *argv, capsys=capsys)[0] == 0
    lines = arguments_output.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2] and lines[3] == ""
    source = tmp_path / "input.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    assert run_cli("translate", model_dir, "--input", source, "--output", output, "--greedy", capsys=capsys)[0] == 0
    written = output.read_text(encoding="utf-8").split("\n")
    assert len(written) == len(LINES) + 1 and [written[i] for i in (0, 2, 4)] == ["", "", ""]
    assert lines[0] == written[1] and lines[2] == written[5]


def test_ctranslate2_keeps_empty_lines_empty_and_in_place(model_dir):
    pytest.importorskip("ctranslate2")
    from hf_vaswani_training.serving.ctranslate2_export import CTranslate2Translator

    translator = CTranslate2Translator(model_dir, intra_threads=1)
    outputs = translator.translate(LINES, num_beams=1, max_new_tokens=6)
    expected = translator.translate([line for line in LINES if line.strip()], num_beams=1, max_new_tokens=6)
    assert [outputs[i] for i in (0, 2, 4)] == ["", "", ""]
    assert [outputs[i] for i in (1, 3, 5)] == expected and all(expected)
    nbest = translator.translate(["", SENTENCES[0]], num_beams=2, num_return_sequences=2, max_new_tokens=6)
    assert nbest[0] == ["", ""] and all(nbest[1])
    # CTranslate2 alone, given the whitespace pieces a blank line encodes to, invents a sentence
    tokenizer = translator.tokenizer
    blank = tokenizer.convert_ids_to_tokens(tokenizer("   ")["input_ids"])
    assert translator.translator.translate_batch([blank], beam_size=1, max_decoding_length=6)[0].hypotheses[0]
