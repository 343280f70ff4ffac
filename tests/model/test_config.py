import json

import pytest
import torch

from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, load_preset, preset_config, preset_names
from hf_vaswani.presets import PRESETS_DIR


def test_defaults_are_the_papers_base_model():
    config = VaswaniConfig()
    assert (config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads) == (512, 2048, 8)
    assert (config.encoder_layers, config.decoder_layers, config.dropout) == (6, 6, 0.1)
    assert config.scale_embedding and config.tie_word_embeddings and not config.normalize_before
    assert config.activation_function == "relu"
    assert (config.attention_dropout, config.activation_dropout) == (0.0, 0.0)


def test_attribute_map():
    config = VaswaniConfig(d_model=64, encoder_attention_heads=4, encoder_layers=3)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 4, 3)
    # The decoder view used by generate()'s cache counts decoder layers.
    decoder_view = VaswaniConfig(encoder_layers=2, decoder_layers=5).get_text_config(decoder=True)
    assert decoder_view.num_hidden_layers == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=500), "d_model=500 is not divisible by encoder_attention_heads=8"),
        (dict(d_model=64, decoder_attention_heads=6), "decoder_attention_heads=6"),
        (dict(dropout=1.5), "dropout=1.5 must be in [0, 1)"),
        (dict(attention_dropout=-0.1), "attention_dropout=-0.1"),
        (dict(encoder_layers=0), "encoder_layers=0 must be a positive integer"),
        (dict(activation_function="swishy"), "activation_function='swishy'"),
        (dict(vocab_size=10, pad_token_id=10), "pad_token_id=10 must be in [0, vocab_size=10)"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps=0.0 must be positive"),
        (dict(d_model=9, encoder_attention_heads=3, decoder_attention_heads=3), "d_model=9 must be even"),
    ],
)
def test_invalid_values_name_the_field_and_the_rule(overrides, message):
    with pytest.raises(ValueError) as error:
        VaswaniConfig(**overrides)
    assert message in str(error.value)


def test_int_zero_is_accepted_for_float_fields():
    assert VaswaniConfig(dropout=0).dropout == 0


@pytest.mark.parametrize("name", ["tiny", "small", "base", "big"])
def test_presets_load(name):
    values = json.loads((PRESETS_DIR / f"{name}.json").read_text())
    config = preset_config(name)
    assert config.model_type == "vaswani" and config.d_model == values["d_model"]
    assert config.to_dict() == VaswaniConfig.from_dict(values).to_dict()


def test_preset_config_takes_the_tokenizers_ids_then_the_overrides(tmp_path):
    tokenizer = type(
        "Tokenizer", (), {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "__len__": lambda _: 321}
    )()
    config = preset_config("tiny", tokenizer, dropout=0.3)
    assert (config.vocab_size, config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (
        321,
        1,
        2,
        0,
    )
    assert config.dropout == 0.3 and config.d_model == load_preset("tiny")["d_model"]
    # A path to a config JSON is a preset too.
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**load_preset("tiny"), "d_model": 32}))
    assert preset_config(str(path)).d_model == 32


def test_an_unknown_preset_lists_the_shipped_ones():
    assert preset_names() == ["base", "big", "small", "tiny", "toy"]
    with pytest.raises(ValueError, match="preset huge: .*presets are base, big, small, tiny, toy"):
        load_preset("huge")


def _count_parameters(preset: str) -> int:
    values = load_preset(preset)
    values["vocab_size"] = 37000  # the paper's shared BPE vocabulary for WMT 2014 English-German
    with torch.device("meta"):
        model = VaswaniForConditionalGeneration(VaswaniConfig.from_dict(values))
    return sum(p.numel() for p in model.parameters())  # tied parameters are counted once


@pytest.mark.parametrize(("preset", "paper_millions"), [("base", 65e6), ("big", 213e6)])
def test_parameter_counts_match_table_3(preset, paper_millions):
    count = _count_parameters(preset)
    assert abs(count - paper_millions) / paper_millions < 0.03, count
