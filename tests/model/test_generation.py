import copy
import warnings

import pytest
import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_vaswani import PAPER_DECODING, gnmt_length_penalty, set_paper_decoding
from hf_vaswani.compat_vaswani import CACHE_NAME, output_cache
from tests.conftest import (
    BOS,
    EOS,
    PAD,
    copy_task_batch,
    decoder_rows_computed,
    source_batch,
    tiny_model,
    trained_copy_model,
)


@pytest.fixture(scope="module")
def trained():
    return trained_copy_model()


@torch.no_grad()
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_incremental_decoding_equals_full_forward(attn_implementation):
    model = tiny_model(attn_implementation=attn_implementation)
    input_ids, attention_mask = source_batch()
    decoder_input_ids = torch.randint(3, 64, (3, 7))
    decoder_input_ids[:, 0] = BOS
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits

    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    steps = []
    for t in range(decoder_input_ids.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids[:, t : t + 1],
            cache=cache,
            use_cache=True,
        )
        cache = output_cache(out)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.get_seq_length() == decoder_input_ids.shape[1]


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("drop_finished_rows", [True, False])
def test_generate_feeds_each_step_the_cache_of_the_steps_before(trained, num_beams, drop_finished_rows):
    # transformers 5.24 renamed the cache argument (past_key_values -> cache): a model taking only the old name got
    # no cache from generate(), built an empty one each step and decoded every token without its history.
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5), vocab=20)
    cache_lengths = []

    def record(module, args, kwargs):
        cache = kwargs.get("cache")
        cache_lengths.append(None if cache is None else cache.self_attention_cache.get_seq_length())

    hook = trained.model.decoder.register_forward_pre_hook(record, with_kwargs=True)
    try:
        trained.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_beams=num_beams,
            max_new_tokens=6,
            min_new_tokens=6,
            drop_finished_rows=drop_finished_rows,
        )
    finally:
        hook.remove()
    assert cache_lengths == list(range(6))


def test_the_cache_is_also_taken_under_its_name_before_transformers_5_24(trained):
    input_ids, attention_mask = source_batch(vocab=20)
    decoder_input_ids = torch.full((3, 1), BOS)
    with torch.no_grad():
        encoder_outputs = trained.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        old, new = (
            EncoderDecoderCache(DynamicCache(config=trained.config), DynamicCache(config=trained.config))
            for _ in range(2)
        )
        common = dict(encoder_outputs=encoder_outputs, attention_mask=attention_mask, use_cache=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            by_old_name = trained(decoder_input_ids=decoder_input_ids, past_key_values=old, **common)
        # Deprecated where the installed release renamed it (as its own models warn); its own name before that.
        renamed = CACHE_NAME == "cache"
        assert any("`past_key_values` is deprecated" in str(w.message) for w in caught) == renamed
        by_new_name = trained(decoder_input_ids=decoder_input_ids, cache=new, **common)
    assert output_cache(by_old_name) is old and output_cache(by_new_name) is new
    assert old.get_seq_length() == new.get_seq_length() == 1
    torch.testing.assert_close(by_old_name.logits, by_new_name.logits, atol=0, rtol=0)
    with pytest.raises(ValueError, match="give the KV cache once"):
        trained(decoder_input_ids=decoder_input_ids, past_key_values=old, cache=new, **common)


@torch.no_grad()
def test_cross_attention_keys_and_values_are_projected_once_per_source(trained):
    calls = {"k": 0, "v": 0}
    hooks = []
    for layer in trained.model.decoder.layers:
        hooks.append(layer.encoder_attn.k_proj.register_forward_hook(lambda *_: calls.__setitem__("k", calls["k"] + 1)))
        hooks.append(layer.encoder_attn.v_proj.register_forward_hook(lambda *_: calls.__setitem__("v", calls["v"] + 1)))
    input_ids, attention_mask = source_batch()
    output = trained.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=8)
    for hook in hooks:
        hook.remove()
    assert output.shape[1] > 2  # several decoding steps ran
    assert calls == {"k": trained.config.decoder_layers, "v": trained.config.decoder_layers}


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 4])
def test_cached_and_uncached_generation_agree(trained, num_beams):
    input_ids, attention_mask = source_batch()
    kwargs = dict(attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=10)
    cached = trained.generate(input_ids, use_cache=True, **kwargs)
    uncached = trained.generate(input_ids, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)


@torch.no_grad()
def test_greedy_matches_a_hand_written_argmax_loop(trained):
    input_ids, attention_mask = source_batch(lengths=(6,))
    generated = trained.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=8)
    decoder_input_ids = torch.tensor([[BOS]])
    for _ in range(8):
        logits = trained(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        decoder_input_ids = torch.cat([decoder_input_ids, next_token], 1)
        if next_token.item() == EOS:
            break
    assert generated[0, : decoder_input_ids.shape[1]].tolist() == decoder_input_ids[0].tolist()


@torch.no_grad()
def test_fixture_model_is_not_degenerate(trained):
    """Otherwise the generation tests below would compare trivial outputs."""
    input_ids, attention_mask, labels = copy_task_batch(40, torch.Generator().manual_seed(1))
    output = trained.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=9)
    lengths = ((output != PAD) & (output != EOS)).sum(-1) - 1
    assert len(set(lengths.tolist())) >= 3
    assert (output[:, 1] == input_ids[:, 0]).float().mean() > 0.5  # it has started to copy


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padded_batch_equals_each_sentence_alone(trained, num_beams, attn_implementation):
    trained.set_attn_implementation(attn_implementation)
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5))
    batch = trained.generate(input_ids, attention_mask=attention_mask, num_beams=num_beams, max_new_tokens=10)
    for row in range(input_ids.shape[0]):
        length = int(attention_mask[row].sum())
        alone = trained.generate(input_ids[row : row + 1, :length], num_beams=num_beams, max_new_tokens=10)
        width = alone.shape[1]
        assert batch[row, :width].tolist() == alone[0].tolist()
        assert (batch[row, width:] == PAD).all()
    trained.set_attn_implementation("sdpa")


@torch.no_grad()
def test_sampling_is_seeded_and_varies(trained):
    input_ids, attention_mask = source_batch()
    kwargs = dict(attention_mask=attention_mask, do_sample=True, num_beams=1, max_new_tokens=10, temperature=2.0)
    torch.manual_seed(0)
    a = trained.generate(input_ids, **kwargs)
    torch.manual_seed(0)
    b = trained.generate(input_ids, **kwargs)
    torch.manual_seed(1)
    c = trained.generate(input_ids, **kwargs)
    assert torch.equal(a, b) and not torch.equal(a, c)


@torch.no_grad()
def test_beam_search_with_one_beam_is_greedy(trained):
    input_ids, attention_mask = source_batch()
    greedy = trained.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=10)
    beam = trained.generate(
        input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=10, length_penalty_type=None
    )
    assert torch.equal(greedy, beam)


# ---- §6.1: the paper's decoding defaults ----------------------------------------------------------------------------


def test_default_generation_config_is_the_papers(model):
    config = model.generation_config
    assert config.num_beams == 4 and config.length_penalty == 0.6
    assert config.length_penalty_type == "gnmt" and config.max_length_offset == 50
    assert config.drop_finished_rows is True


@torch.no_grad()
def test_max_length_is_source_length_plus_offset():
    model = tiny_model()
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5))
    # EOS suppressed, so the length limit alone ends each row
    output = model.generate(
        input_ids, attention_mask=attention_mask, num_beams=1, max_length_offset=4, suppress_tokens=[EOS]
    )
    generated = (output[:, 1:] != PAD).sum(-1)
    assert generated.tolist() == [6 + 4, 3 + 4, 5 + 4]


def test_a_length_limit_in_the_generation_config_is_kept():
    """max_new_tokens set in the model's generation config, or in a config passed to generate(), bounds the output as
    the same keyword does; the per-source limit (source + offset) still applies under it."""
    model = tiny_model()
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5))
    common = dict(attention_mask=attention_mask, num_beams=1, max_length_offset=4, suppress_tokens=[EOS])
    by_keyword = model.generate(input_ids, max_new_tokens=5, **common)
    assert ((by_keyword[:, 1:] != PAD).sum(-1)).tolist() == [5, 5, 5]

    passed = copy.deepcopy(model.generation_config)
    passed.max_new_tokens = 5
    assert torch.equal(model.generate(input_ids, generation_config=passed, **common), by_keyword)
    assert passed.max_new_tokens == 5 and model.generation_config.max_new_tokens is None  # neither config changed

    model.generation_config.max_new_tokens = 5
    assert torch.equal(model.generate(input_ids, **common), by_keyword)


@torch.no_grad()
def test_gnmt_scores_are_sum_logprob_over_gnmt_penalty(trained):
    input_ids, attention_mask = source_batch(lengths=(6,))
    out = trained.generate(
        input_ids,
        attention_mask=attention_mask,
        num_beams=4,
        length_penalty=0.6,
        length_penalty_type="gnmt",
        max_new_tokens=10,
        return_dict_in_generate=True,
        output_scores=True,
    )
    sequence = out.sequences[0]
    length = int((sequence[1:] != PAD).sum())  # generated tokens, EOS included
    logits = trained(input_ids=input_ids, decoder_input_ids=sequence[None, :length]).logits
    log_probs = logits.log_softmax(-1)[0, torch.arange(length), sequence[1 : length + 1]]
    expected = log_probs.sum() / ((5 + length) / 6) ** 0.6
    assert out.sequences_scores[0].item() == pytest.approx(expected.item(), abs=1e-4)


def _finish_two_hypotheses(model, length_penalty, gnmt: bool):
    """Drive the beam bookkeeping: hypothesis A (log P = -2.0) ends after 3 tokens, B (log P = -3.3) after 9.

    GNMT(0.6):  A = -2.0 / (8/6)^0.6 = -1.683,  B = -3.3 / (14/6)^0.6 = -1.985  -> keeps A
    HF   (0.6): A = -2.0 / 3^0.6     = -1.035,  B = -3.3 / 9^0.6      = -0.883  -> keeps B
    """
    num_beams, width = 1, 12
    model._gnmt_length_penalty = gnmt  # as _beam_search sets it for length_penalty_type="gnmt"
    sequences = torch.zeros(1, num_beams, width, dtype=torch.long)
    beam_scores = torch.full((1, num_beams), -1.0e9)
    beam_indices = torch.zeros(1, num_beams, width, dtype=torch.long)
    is_sent_finished = torch.zeros(1, num_beams, dtype=torch.bool)
    for tag, log_prob, cur_len in ((11, -2.0, 3), (22, -3.3, 9)):
        running = torch.full((1, 2 * num_beams, width), tag)
        sequences, beam_scores, beam_indices, is_sent_finished = model._update_finished_beams(
            sequences=sequences,
            topk_running_sequences=running,
            beam_scores=beam_scores,
            topk_log_probs=torch.tensor([[log_prob, -50.0]]),
            beam_indices=beam_indices,
            topk_running_beam_indices=torch.zeros(1, 2 * num_beams, width, dtype=torch.long),
            is_early_stop_heuristic_unsatisfied=torch.ones(1, 1, dtype=torch.bool),
            is_sent_finished=is_sent_finished,
            next_token_hits_stopping_criteria=torch.tensor([[True, False]]),
            top_num_beam_mask=torch.tensor([True, False]),
            num_beams=num_beams,
            cur_len=cur_len,
            decoder_prompt_len=1,
            length_penalty=length_penalty,
            early_stopping="never",
        )
    del model._gnmt_length_penalty
    return int(sequences[0, 0, 0]), beam_scores[0, 0].item()


def test_gnmt_length_penalty_ranks_hypotheses_as_the_formula_says(model):
    kept, score = _finish_two_hypotheses(model, 0.6, gnmt=True)
    assert kept == 11 and score == pytest.approx(-2.0 / (8 / 6) ** 0.6, abs=1e-5)
    kept, score = _finish_two_hypotheses(model, 0.6, gnmt=False)  # Hugging Face's formula ranks them the other way
    assert kept == 22 and score == pytest.approx(-3.3 / 9**0.6, abs=1e-5)


def test_gnmt_penalty_values():
    assert gnmt_length_penalty(1, 0.6) == pytest.approx(1.0)
    assert gnmt_length_penalty(25, 0.6) == pytest.approx(5**0.6)
    assert gnmt_length_penalty(40, 0.0) == 1.0


def test_default_decoding_is_the_papers(model):
    config = model.generation_config
    assert {name: getattr(config, name) for name in PAPER_DECODING} == dict(PAPER_DECODING)
    assert (PAPER_DECODING["num_beams"], PAPER_DECODING["length_penalty"]) == (4, 0.6)
    assert (PAPER_DECODING["length_penalty_type"], PAPER_DECODING["max_length_offset"]) == ("gnmt", 50)


def test_greedy_paper_decoding_saves_and_loads(model, tmp_path):
    """--generation_num_beams 1 once ended training with a traceback: transformers refuses to save a greedy config
    holding length_penalty or early_stopping."""
    config = set_paper_decoding(copy.deepcopy(model.generation_config), num_beams=1)
    config.save_pretrained(tmp_path)
    loaded = GenerationConfig.from_pretrained(tmp_path)
    assert (loaded.num_beams, loaded.length_penalty, loaded.early_stopping) == (1, None, None)
    assert loaded.max_length_offset == PAPER_DECODING["max_length_offset"]


@torch.no_grad()
def test_unknown_length_penalty_type_is_refused_with_the_field_name(model):
    input_ids, attention_mask = source_batch(lengths=(4, 3))
    with pytest.raises(ValueError, match="length_penalty_type='wu'"):
        model.generate(input_ids, attention_mask=attention_mask, length_penalty_type="wu", max_new_tokens=3)


@torch.no_grad()
def test_gnmt_and_hf_penalties_both_run_end_to_end():
    model = trained_copy_model()
    input_ids, attention_mask = source_batch(lengths=(6, 4))
    for kind in ("gnmt", None):
        out = model.generate(
            input_ids,
            attention_mask=attention_mask,
            num_beams=4,
            length_penalty=1.0,
            length_penalty_type=kind,
            max_new_tokens=10,
            return_dict_in_generate=True,
            output_scores=True,
        )
        assert torch.isfinite(out.sequences_scores).all()


@torch.no_grad()
def test_beam_search_with_self_attention_only_reordering_equals_the_stock_reordering(trained, monkeypatch):
    """The model reorders only the self-attention cache (cross-attention rows are identical within a source)."""
    from hf_vaswani import VaswaniGenerationMixin

    input_ids, attention_mask = source_batch(lengths=(6, 3, 5))
    kwargs = dict(attention_mask=attention_mask, num_beams=4, num_return_sequences=4, max_new_tokens=10)
    ours = trained.generate(input_ids, output_scores=True, return_dict_in_generate=True, **kwargs)
    monkeypatch.delattr(VaswaniGenerationMixin, "_reorder_cache")
    stock = trained.generate(input_ids, output_scores=True, return_dict_in_generate=True, **kwargs)
    assert torch.equal(ours.sequences, stock.sequences)
    torch.testing.assert_close(ours.sequences_scores, stock.sequences_scores)


# ---- greedy and beam search drop finished rows ---------------------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"max_length_offset": 1, "suppress_tokens": [EOS]},  # only the per-row length limit ends rows
        {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_new_tokens": 2},
        {"max_new_tokens": 4},
    ],
)
def test_greedy_dropping_finished_rows_equals_the_stock_loop(trained, attn_implementation, settings):
    trained.set_attn_implementation(attn_implementation)
    input_ids, attention_mask, _ = copy_task_batch(24, torch.Generator().manual_seed(2))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, **settings)
    kwargs.setdefault("max_new_tokens", 12)
    dropped, dropped_rows = decoder_rows_computed(trained, **kwargs)
    stock, stock_rows = decoder_rows_computed(trained, drop_finished_rows=False, **kwargs)
    trained.set_attn_implementation("sdpa")
    assert torch.equal(dropped, stock)
    # The stock loop computes every row at every step; rows end at different steps here, so dropping computes fewer.
    assert stock_rows == input_ids.shape[0] * (stock.shape[1] - 1)
    assert (stock[:, -1] == PAD).any() and dropped_rows < stock_rows


@torch.no_grad()
def test_greedy_output_of_each_row_is_its_own_when_rows_are_dropped(trained):
    """A batch whose rows finish at different steps equals each row decoded alone (left padding too)."""
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5, 2, 7), seed=3)
    batch = trained.generate(input_ids, attention_mask=attention_mask, num_beams=1, max_length_offset=3)
    for row in range(input_ids.shape[0]):
        length = int(attention_mask[row].sum())
        alone = trained.generate(input_ids[row : row + 1, :length], num_beams=1, max_length_offset=3)
        assert batch[row, : alone.shape[1]].tolist() == alone[0].tolist()
        assert (batch[row, alone.shape[1] :] == PAD).all()


@torch.no_grad()
def test_stock_loop_runs_where_rows_cannot_be_dropped(trained):
    """Per-step outputs (scores here) need every row at every step: the stock loop runs, with the same tokens."""
    input_ids, attention_mask, _ = copy_task_batch(16, torch.Generator().manual_seed(4))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=12)
    plain, plain_rows = decoder_rows_computed(trained, **kwargs)
    with_scores, scored_rows = decoder_rows_computed(
        trained, output_scores=True, return_dict_in_generate=True, **kwargs
    )
    assert torch.equal(plain, with_scores.sequences)
    assert len(with_scores.scores) == with_scores.sequences.shape[1] - 1
    assert scored_rows == input_ids.shape[0] * len(with_scores.scores) > plain_rows


@torch.no_grad()
@pytest.mark.parametrize(
    "settings",
    [
        {},  # the paper's: GNMT penalty, early_stopping="never", source length + 50
        {"num_return_sequences": 2},  # "never" ends a source once its 2 returned hypotheses cannot change
        {"length_penalty_type": None, "length_penalty": 1.0},  # "never" with Hugging Face's penalty
        {"early_stopping": True, "num_return_sequences": 3},
        {"early_stopping": False, "length_penalty_type": None, "length_penalty": -0.5, "repetition_penalty": 1.5},
        {"max_length_offset": 1, "suppress_tokens": [EOS]},  # only the per-row length limit ends sources
    ],
)
def test_beam_search_dropping_finished_sources_equals_the_stock_loop(trained, settings):
    input_ids, attention_mask, _ = copy_task_batch(24, torch.Generator().manual_seed(2))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=12, **settings)
    dropped, dropped_rows = decoder_rows_computed(trained, **kwargs)
    stock, stock_rows = decoder_rows_computed(trained, drop_finished_rows=False, **kwargs)
    assert torch.equal(dropped, stock)
    assert stock_rows % (input_ids.shape[0] * 4) == 0  # the stock loop runs every beam of every source each step
    assert dropped_rows < stock_rows
