"""Row buckets in generate() (generation config `row_buckets`): the batch shrinks only to powers of two.

On a GPU each new batch size is a new shape (kernel choice, cuDNN plans); dropping finished rows one by one makes
nearly every decoder step one. With row buckets finished rows stay in the batch as filler until the running ones fit
the next smaller power of two. Forced on here (on CUDA tensors it is the default): the tokens must equal the stock
loop's and the exact row dropping's, and one generate() call may see at most 1 + log2(batch) batch sizes.
"""

import math

import pytest
import torch

from hf_vaswani.row_dropping_vaswani import row_bucket, uses_row_buckets
from tests.conftest import EOS, copy_task_batch, trained_copy_model


@pytest.fixture(scope="module")
def trained():
    return trained_copy_model()


def decoder_batch_sizes(model, **generate_kwargs):
    """generate()'s output and the batch size of each decoder call."""
    sizes = []
    handle = model.model.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        output = model.generate(**generate_kwargs)
    finally:
        handle.remove()
    return output, sizes


def test_row_bucket():
    assert [row_bucket(n, 24) for n in (24, 23, 17, 16, 9, 5, 1)] == [24, 24, 24, 16, 16, 8, 1]
    assert row_bucket(3, 2) == 2


def test_setting():
    from transformers import GenerationConfig

    config = GenerationConfig()
    assert uses_row_buckets(config, torch.device("cuda")) and not uses_row_buckets(config, torch.device("cpu"))
    config.row_buckets = "auto"
    assert uses_row_buckets(config, torch.device("cuda")) and not uses_row_buckets(config, torch.device("cpu"))
    config.row_buckets = True
    assert uses_row_buckets(config, torch.device("cpu"))
    config.row_buckets = False
    assert not uses_row_buckets(config, torch.device("cuda"))
    config.row_buckets = "yes"
    with pytest.raises(ValueError, match="row_buckets"):
        uses_row_buckets(config, torch.device("cpu"))


def test_model_default_is_auto(trained):
    assert trained.generation_config.row_buckets == "auto"


@torch.no_grad()
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1},
        {"num_beams": 1, "max_length_offset": 1, "suppress_tokens": [EOS]},  # only the per-row limits end rows
        {"num_beams": 1, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_new_tokens": 2},
        {"num_beams": 4},  # the paper's: GNMT penalty, early_stopping "never" with the stop rule
        {"num_beams": 4, "early_stopping": True, "num_return_sequences": 3},
        {"num_beams": 3, "max_length_offset": 1, "suppress_tokens": [EOS]},
    ],
)
def test_bucketed_rows_give_the_stock_loops_tokens(trained, attn_implementation, settings):
    trained.set_attn_implementation(attn_implementation)
    try:
        input_ids, attention_mask, _ = copy_task_batch(24, torch.Generator().manual_seed(2))
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=12, **settings)
        bucketed, bucketed_sizes = decoder_batch_sizes(trained, row_buckets=True, **kwargs)
        exact, exact_sizes = decoder_batch_sizes(trained, row_buckets=False, **kwargs)
        stock = trained.generate(drop_finished_rows=False, **kwargs)
    finally:
        trained.set_attn_implementation("sdpa")
    assert torch.equal(bucketed, stock)
    assert torch.equal(exact, stock)
    beams = settings["num_beams"]
    sources = input_ids.shape[0]
    # Batch sizes: the first step's (one beam per source), then the full batch and its powers-of-two shrinks.
    steps_sizes = set(bucketed_sizes[1:])
    assert all(size % beams == 0 for size in steps_sizes)
    allowed = {sources * beams} | {2**k * beams for k in range(math.ceil(math.log2(sources)))}
    assert steps_sizes <= allowed, sorted(steps_sizes)
    assert len(steps_sizes) <= 1 + math.ceil(math.log2(sources))
    # More rows computed than dropping each one, fewer than the stock loop (which computes every row each step).
    assert sum(exact_sizes) <= sum(bucketed_sizes)


@torch.no_grad()
def test_exact_dropping_makes_more_sizes(trained):
    """The reason for buckets, on this batch: exact dropping sees more batch sizes than the bound allows."""
    input_ids, attention_mask, _ = copy_task_batch(24, torch.Generator().manual_seed(2))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=12)
    _, exact_sizes = decoder_batch_sizes(trained, row_buckets=False, **kwargs)
    _, bucketed_sizes = decoder_batch_sizes(trained, row_buckets=True, **kwargs)
    assert len(set(bucketed_sizes)) < len(set(exact_sizes))
    assert not set(bucketed_sizes) - {24, 16, 8, 4, 2, 1}
