"""Property-based fuzzing: random tiny configs, batches, padding and decoding settings.

Whatever hypothesis draws, forward and generate must not crash or produce NaN/inf logits, cached greedy decoding
must pick the tokens uncached decoding picks, incremental decoding must give the full forward's logits, and
decoding that drops finished rows must give the stock loop's tokens. FUZZ_EXAMPLES=500 runs a longer search.
"""

import functools
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, gnmt_length_penalty
from hf_vaswani.compat_vaswani import output_cache

BOS, PAD, EOS = 0, 1, 2  # VaswaniConfig's defaults (fairseq's layout)
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 25)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)


@st.composite
def models(draw) -> VaswaniForConditionalGeneration:
    encoder_heads = draw(st.sampled_from([1, 2, 4]))
    decoder_heads = draw(st.sampled_from([1, 2, 4]))
    config = VaswaniConfig(
        vocab_size=draw(st.integers(6, 40)),
        d_model=max(encoder_heads, decoder_heads) * draw(st.sampled_from([2, 4, 8])),  # heads are powers of 2
        encoder_layers=draw(st.integers(1, 2)),
        decoder_layers=draw(st.integers(1, 2)),
        encoder_attention_heads=encoder_heads,
        decoder_attention_heads=decoder_heads,
        encoder_ffn_dim=draw(st.sampled_from([4, 16, 48])),
        decoder_ffn_dim=draw(st.sampled_from([4, 16, 48])),
        normalize_before=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        scale_embedding=draw(st.booleans()),
        dropout=0.0,
        max_position_embeddings=64,
        attn_implementation=draw(st.sampled_from(["eager", "sdpa"])),
    )
    torch.manual_seed(draw(st.integers(0, 2**16)))
    return VaswaniForConditionalGeneration(config).eval()


@st.composite
def sources(draw, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of 1-3 sources padded on the left, on the right, or not at all; a row may be all padding."""
    batch_size = draw(st.integers(1, 3))
    width = draw(st.integers(1, 7))
    side = draw(st.sampled_from(["left", "right", "none"]))
    if side == "none":
        lengths = [width] * batch_size
    else:
        lengths = draw(st.lists(st.integers(0, width), min_size=batch_size, max_size=batch_size))
        if draw(st.booleans()):
            lengths[draw(st.integers(0, batch_size - 1))] = 0
    attention_mask = torch.zeros(batch_size, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        if side == "left":
            attention_mask[row, width - length :] = 1
        else:
            attention_mask[row, :length] = 1
    tokens = draw(st.lists(st.integers(0, vocab_size - 1), min_size=batch_size * width, max_size=batch_size * width))
    input_ids = torch.tensor(tokens).view(batch_size, width).masked_fill(attention_mask == 0, PAD)
    return input_ids, attention_mask


@st.composite
def cases(draw):
    model = draw(models())
    input_ids, attention_mask = draw(sources(model.config.vocab_size))
    return model, input_ids, attention_mask


def _decoder_inputs(draw, batch_size: int, vocab_size: int) -> torch.Tensor:
    length = draw(st.integers(1, 6))
    tokens = draw(st.lists(st.integers(0, vocab_size - 1), min_size=batch_size * length, max_size=batch_size * length))
    decoder_input_ids = torch.tensor(tokens).view(batch_size, length)
    decoder_input_ids[:, 0] = BOS
    return decoder_input_ids


def _first_divergence(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int] | None:
    """(row, position) of the first token where two generated batches differ, or None."""
    width = min(a.shape[1], b.shape[1])
    differs = (a[:, :width] != b[:, :width]).nonzero()
    if len(differs) == 0:
        assert a.shape == b.shape, "same tokens, different lengths"
        return None
    position = int(differs[:, 1].min())
    return int(differs[differs[:, 1] == position][0, 0]), position


@FUZZ
@given(case=cases(), data=st.data())
@torch.no_grad()
def test_forward_logits_and_loss_are_finite(case, data):
    model, input_ids, attention_mask = case
    vocab_size = model.config.vocab_size
    decoder_input_ids = _decoder_inputs(data.draw, input_ids.shape[0], vocab_size)
    labels = torch.roll(decoder_input_ids, -1, dims=1)
    labels[:, -1] = EOS
    # Some rows end early (-100 after them), at least one label stays so the mean is defined.
    for row, keep in enumerate(
        data.draw(st.lists(st.integers(1, labels.shape[1]), min_size=len(labels), max_size=len(labels)))
    ):
        labels[row, keep:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, labels=labels)
    assert out.logits.shape == (*decoder_input_ids.shape, vocab_size)
    assert torch.isfinite(out.logits).all()
    assert torch.isfinite(out.encoder_last_hidden_state).all()
    assert torch.isfinite(out.loss) and out.loss > 0


@FUZZ
@given(case=cases(), data=st.data())
@torch.no_grad()
def test_incremental_decoding_equals_the_full_forward(case, data):
    """Feeding the decoder in random chunks through the cache gives the logits of one full forward."""
    model, input_ids, attention_mask = case
    decoder_input_ids = _decoder_inputs(data.draw, input_ids.shape[0], model.config.vocab_size)
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits

    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    steps, start = [], 0
    while start < decoder_input_ids.shape[1]:
        end = start + data.draw(st.integers(1, decoder_input_ids.shape[1] - start), label="chunk")
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids[:, start:end],
            cache=cache,
            use_cache=True,
        )
        cache, start = output_cache(out), end
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)
    assert cache.get_seq_length() == decoder_input_ids.shape[1]


@st.composite
def generation_settings(draw) -> dict:
    mode = draw(st.sampled_from(["greedy", "beam", "sample"]))
    settings_ = dict(max_new_tokens=draw(st.integers(1, 6)), num_beams=1, do_sample=False, num_return_sequences=1)
    if mode == "beam":
        settings_["num_beams"] = draw(st.integers(1, 3))
        settings_["num_return_sequences"] = draw(st.integers(1, settings_["num_beams"]))
        settings_["length_penalty_type"] = draw(st.sampled_from(["gnmt", None]))  # None: Hugging Face's
        settings_["length_penalty"] = draw(st.sampled_from([0.0, 0.6, 2.0]))
    elif mode == "sample":
        settings_.update(do_sample=True, num_return_sequences=draw(st.integers(1, 3)))
        settings_["top_k"] = draw(st.sampled_from([0, 1, 5]))
        settings_["temperature"] = draw(st.sampled_from([0.5, 1.0, 2.0]))
    return settings_


@FUZZ
@given(case=cases(), generation=generation_settings(), seed=st.integers(0, 2**16))
@torch.no_grad()
def test_generate_never_crashes_and_its_logits_are_finite(case, generation, seed):
    model, input_ids, attention_mask = case
    torch.manual_seed(seed)
    out = model.generate(
        input_ids, attention_mask=attention_mask, return_dict_in_generate=True, output_logits=True, **generation
    )
    rows = input_ids.shape[0] * generation["num_return_sequences"]
    assert out.sequences.shape[0] == rows
    assert 2 <= out.sequences.shape[1] <= 1 + generation["max_new_tokens"]
    assert (out.sequences[:, 0] == model.config.decoder_start_token_id).all()
    assert ((out.sequences >= 0) & (out.sequences < model.config.vocab_size)).all()
    assert out.logits and all(torch.isfinite(step).all() for step in out.logits)
    if getattr(out, "sequences_scores", None) is not None:
        assert torch.isfinite(out.sequences_scores).all()


@FUZZ
@given(case=cases(), max_new_tokens=st.integers(1, 6))
@torch.no_grad()
def test_cached_and_uncached_greedy_decoding_pick_the_same_tokens(case, max_new_tokens):
    model, input_ids, attention_mask = case
    kwargs = dict(
        attention_mask=attention_mask,
        num_beams=1,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        return_dict_in_generate=True,
        output_logits=True,
    )
    cached = model.generate(input_ids, use_cache=True, **kwargs)
    uncached = model.generate(input_ids, use_cache=False, **kwargs)
    divergence = _first_divergence(cached.sequences, uncached.sequences)
    agreed_steps = len(cached.logits) if divergence is None else divergence[1]  # logits[t] chose token t + 1
    for step in range(min(agreed_steps, len(uncached.logits))):
        torch.testing.assert_close(cached.logits[step], uncached.logits[step], atol=1e-4, rtol=1e-4)
    if divergence is not None:
        # Only a tie between the two best tokens, within float rounding, may be broken differently.
        row, position = divergence
        top2 = cached.logits[position - 1][row].topk(2).values
        assert top2[0] - top2[1] < 1e-4, f"row {row} differs at token {position} without a tie: {top2.tolist()}"


@FUZZ
@given(case=cases(), generation=generation_settings(), eos_bias=st.floats(0.0, 3.0))
@torch.no_grad()
def test_dropping_finished_rows_gives_the_stock_loops_tokens(case, generation, eos_bias):
    """Greedy and beam search compute only rows still running (finished ones leave the batch); the tokens must be
    those of Hugging Face's loop, which runs every row to the end. A bias on EOS makes rows end at different steps."""
    model, input_ids, attention_mask = case
    if generation["do_sample"]:
        generation.update(do_sample=False, num_return_sequences=1)
    kwargs = dict(attention_mask=attention_mask, sequence_bias={(EOS,): eos_bias}, **generation)
    dropped = model.generate(input_ids, **kwargs)
    stock = model.generate(input_ids, drop_finished_rows=False, **kwargs)
    if torch.equal(dropped, stock):
        return
    # The loops compute the same rows in batches of other sizes, so the last bits of a matmul may differ (another
    # kernel for another batch size, another CPU). Only a choice between candidates tied within float rounding may
    # then go the other way: greedy, the two best next tokens where they part; beam search, the scores of the
    # hypotheses returned at each rank.
    if generation["num_beams"] == 1:
        divergence = _first_divergence(dropped, stock)
        assert divergence is not None
        row, position = divergence
        logits = _logits_along(model, input_ids, attention_mask, stock)[row, position - 1]
        logits[EOS] += eos_bias  # greedy: the sequence-bias processor runs on the logits, before the argmax
        ours, theirs = float(logits[dropped[row, position]]), float(logits[stock[row, position]])
        assert abs(ours - theirs) < 1e-4, f"row {row} differs at token {position} without a tie: {ours} {theirs}"
    else:
        rows_per_source = generation["num_return_sequences"]
        score = functools.partial(_search_scores, model, input_ids, attention_mask, generation, eos_bias=eos_bias)
        dropped_scores = score(dropped).view(-1, rows_per_source)
        stock_scores = score(stock).view(-1, rows_per_source)
        torch.testing.assert_close(dropped_scores, stock_scores, atol=1e-4, rtol=0)


def _logits_along(model, input_ids, attention_mask, sequences):
    """The model's next-token logits at each position of `sequences` (several rows per source allowed)."""
    rows_per_source = sequences.shape[0] // input_ids.shape[0]
    return model(
        input_ids=input_ids.repeat_interleave(rows_per_source, 0),
        attention_mask=attention_mask.repeat_interleave(rows_per_source, 0),
        decoder_input_ids=sequences[:, :-1],
    ).logits.float()


def _search_scores(model, input_ids, attention_mask, generation, sequences, *, eos_bias):
    """What beam search ranks each returned sequence by: its log-probability under the model (the EOS bias added by
    the sequence-bias processor included) over the tokens it generated, up to and including EOS, divided by the
    length penalty of `generation`."""
    logits = _logits_along(model, input_ids, attention_mask, sequences)
    log_probs = torch.log_softmax(logits, dim=-1)
    log_probs[..., EOS] += eos_bias  # the processor runs on the log-probabilities in beam search
    targets = sequences[:, 1:]
    is_eos = (targets == EOS).long()
    generated = (is_eos.cumsum(1) - is_eos) == 0  # up to and including the first EOS
    total = (log_probs.gather(-1, targets[..., None]).squeeze(-1) * generated).sum(1)
    length = generated.sum(1).float()
    alpha = generation["length_penalty"]
    if generation.get("length_penalty_type") == "gnmt":
        return total / gnmt_length_penalty(length, alpha)
    return total / length**alpha
