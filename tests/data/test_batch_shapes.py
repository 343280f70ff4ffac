"""Bounded batch shapes (TokenBatchSampler(shapes=BatchShapes()) + BucketPadding, vaswani-train --batch_shapes).

The bound: every batch is (max_tokens // L, L, L) for a bucket length L, or (max_tokens // L, L', L') when it holds only
examples carried from the bucket L' below, plus the one batch left after the last bucket (and, with several ranks, the
splits that even out the count): at most 2 x buckets + 1 shapes, the same set every epoch. Checked on random
lengths and on Multi30K's real ones, with each batch within max_tokens and each example exactly once per epoch.
"""

import gzip

import numpy as np
import pytest
import torch

from hf_vaswani_training.data.batching import (
    BatchShapes,
    BucketPadding,
    TokenBatchSampler,
    batch_shapes_for,
    sampler_statistics,
    shape_statistics,
)
from tests.conftest import MULTI30K_DIR, tiny_model


def wmt_like_lengths(n: int = 50_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal source lengths (about 30 tokens on average, a tail to 256), target about 1.1 x source."""
    rng = np.random.default_rng(seed)
    source = np.clip(rng.lognormal(3.2, 0.6, n).astype(int) + 1, 2, 256)
    target = np.clip((source * rng.normal(1.1, 0.15, n)).astype(int), 2, 256)
    return source, target


def check_bounded_epoch(sampler: TokenBatchSampler, batches, source, target, max_tokens: int) -> None:
    shapes = sampler.shapes
    assert sorted(i for batch in batches for i in batch) == list(range(len(source)))  # each example exactly once
    for batch in batches:
        bucket = shapes.bucket(max(source[batch].max(), target[batch].max()))
        assert len(batch) * bucket <= max_tokens  # the padded batch fits, both sides


def test_buckets():
    shapes = BatchShapes()
    buckets = sorted({shapes.bucket(length) for length in range(1, 257)})
    assert buckets[:8] == [8, 16, 24, 32, 40, 48, 56, 64]
    assert len(buckets) == 18 and buckets[-1] == 272
    for length in range(1, 600):
        bucket = shapes.bucket(length)
        assert bucket >= length and bucket % 8 == 0
        assert bucket - length < 8 or bucket <= 1.125 * length + 8  # the padding one sentence can get
    np.testing.assert_array_equal(shapes.buckets(np.array([1, 9, 65, 300])), [8, 16, 72, 312])


@pytest.mark.parametrize("max_tokens", [3200, 12288, 25000])
def test_random_lengths_bounded(max_tokens):
    source, target = wmt_like_lengths()
    shapes = BatchShapes()
    sampler = TokenBatchSampler(source, target, max_tokens=max_tokens, shapes=shapes, num_replicas=1, rank=0)
    buckets_used = len(np.unique(shapes.buckets(np.maximum(source, target))))
    statistics = sampler_statistics(sampler, 1000)
    exact = sampler_statistics(TokenBatchSampler(source, target, max_tokens=max_tokens, num_replicas=1, rank=0), 1000)
    assert statistics["batches"] == 1000
    # The bound: two shapes per bucket plus the last batch; measured 15-19, against 72-158 exact.
    assert statistics["distinct_shapes"] <= min(2 * buckets_used + 1, 20)
    assert exact["distinct_shapes"] > 3 * statistics["distinct_shapes"]
    # Padding (both sides) of the bucketed batches: measured 16%, exact 6-7% (exact with pad to 8: 15%).
    assert statistics["padding"] <= 0.20
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        check_bounded_epoch(sampler, list(sampler), source, target, max_tokens)
    shapes_of = [
        {(len(b), shapes.bucket(max(source[b].max(), target[b].max()))) for b in sampler.all_batches(e)} for e in (0, 1)
    ]
    assert shapes_of[0] == shapes_of[1]  # the same shapes every epoch, other batches


def test_several_ranks_bounded():
    source, target = wmt_like_lengths(20_000, seed=1)
    samplers = [
        TokenBatchSampler(source, target, max_tokens=4096, shapes=BatchShapes(), num_replicas=3, rank=r)
        for r in range(3)
    ]
    per_rank = [list(sampler) for sampler in samplers]
    assert len({len(batches) for batches in per_rank}) == 1  # every rank the same number of batches
    everything = [batch for batches in per_rank for batch in batches]
    check_bounded_epoch(samplers[0], everything, source, target, 4096)
    buckets_used = len(np.unique(BatchShapes().buckets(np.maximum(source, target))))
    statistics = shape_statistics(everything, source, target, BatchShapes())
    assert statistics["distinct_shapes"] <= 2 * buckets_used + 1 + 2  # + at most num_replicas - 1 split halves


@pytest.mark.skipif(not (MULTI30K_DIR / "train.de.gz").is_file(), reason="needs ../shared/data/multi30k")
def test_multi30k_lengths_bounded():
    """Multi30K's training pairs, lengths in words + EOS (the BPE lengths are about 1.2 times that)."""
    with gzip.open(MULTI30K_DIR / "train.de.gz", "rt") as de, gzip.open(MULTI30K_DIR / "train.en.gz", "rt") as en:
        source = np.array([len(line.split()) + 1 for line in de])
        target = np.array([len(line.split()) + 1 for line in en])
    sampler = TokenBatchSampler(source, target, max_tokens=1280, shapes=BatchShapes(), num_replicas=1, rank=0)
    statistics = sampler_statistics(sampler, 1000)
    buckets_used = len(np.unique(BatchShapes().buckets(np.maximum(source, target))))
    assert statistics["distinct_shapes"] <= 2 * buckets_used + 1 <= 11  # measured: 7 (exact: about 40)
    assert statistics["padding"] <= 0.35  # short sentences: most of it is the rounding to 8 a GPU does anyway
    check_bounded_epoch(sampler, list(sampler), source, target, 1280)


def test_statistics_in_the_log(caplog):
    source, target = wmt_like_lengths(5000)
    sampler = TokenBatchSampler(source, target, max_tokens=2048, shapes=BatchShapes(), num_replicas=1, rank=0)
    with caplog.at_level("INFO", logger="hf_vaswani_training.data.batching"):
        next(iter(sampler))
        next(iter(sampler))
    lines = [record.getMessage() for record in caplog.records if "Batch shapes" in record.getMessage()]
    statistics = sampler_statistics(sampler, 1000)
    assert lines == [
        f"Batch shapes bucketed: {statistics['distinct_shapes']} distinct (rows, source, target) in the first 1,000 "
        f"batches, {100 * statistics['padding']:.1f}% of their tokens padding"
    ]


def test_option():
    assert batch_shapes_for("auto", "cpu") is None  # the CPU keeps exact shapes (and its toy run's weights)
    assert batch_shapes_for("auto", "cuda") == BatchShapes()
    assert batch_shapes_for("bucketed", "cpu") == BatchShapes()
    assert batch_shapes_for("exact", "cuda") is None
    with pytest.raises(ValueError, match="--batch_shapes"):
        batch_shapes_for("round", "cpu")


class _Tokenizer:
    pad_token_id = 1
    padding_side = "right"


class _Collator:
    """What DataCollatorForSeq2Seq returns for right-padded rows (pad 1, labels -100, decoder inputs shifted)."""

    tokenizer = _Tokenizer()

    def __call__(self, features):
        longest_source = max(len(f["input_ids"]) for f in features)
        longest_target = max(len(f["labels"]) for f in features)
        input_ids = torch.tensor([f["input_ids"] + [1] * (longest_source - len(f["input_ids"])) for f in features])
        labels = torch.tensor([f["labels"] + [-100] * (longest_target - len(f["labels"])) for f in features])
        decoder_input_ids = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], 1).masked_fill(
            torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], 1) == -100, 1
        )
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != 1).long(),
            "labels": labels,
            "decoder_input_ids": decoder_input_ids,
        }


def test_bucket_padding_is_inert():
    """Padded to the bucket (both sides 16 here), the model's loss equals the unpadded batch's."""
    torch.manual_seed(0)
    features = [
        {"input_ids": torch.randint(4, 64, (n,)).tolist() + [2], "labels": torch.randint(4, 64, (m,)).tolist() + [2]}
        for n, m in ((9, 11), (5, 3), (12, 6))
    ]
    plain = _Collator()(features)
    padded = BucketPadding(_Collator(), BatchShapes())(features)
    assert {key: tuple(value.shape) for key, value in padded.items()} == {
        "input_ids": (3, 16),
        "attention_mask": (3, 16),
        "labels": (3, 16),
        "decoder_input_ids": (3, 16),
    }
    assert (padded["input_ids"][:, 13:] == 1).all() and (padded["attention_mask"][:, 13:] == 0).all()
    assert (padded["labels"][:, 12:] == -100).all() and (padded["decoder_input_ids"][:, 12:] == 1).all()
    model = tiny_model()
    with torch.no_grad():
        loss = model(**plain, loss_only=True).loss
        padded_loss = model(**padded, loss_only=True).loss
    torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=1e-6)
