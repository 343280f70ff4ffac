"""Token-count batching: batches of sentences of similar length, capped by tokens, not by sentences.

The paper: "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens"
(§5.1). This is fairseq's `--max-tokens`; Hugging Face's Trainer has no equivalent, so the training script
hands `TokenBatchSampler` to its DataLoader as `batch_sampler`.

The limit is on the *padded* size, fairseq's rule (`fairseq.data.data_utils.batch_by_size`): a batch of
`n` pairs costs `n * max(longest source, longest target)` tokens, and that must be <= `max_tokens`. It bounds
the memory of the largest padded tensor on either side, which is what runs out.

Per epoch:

1. Sort the examples by `max(source_length, target_length)`, ties broken at random from `seed + epoch`
   (so equal-length examples meet different partners each epoch).
2. Walk the sorted list, closing a batch when one more example would break `max_tokens` (or
   `max_sentences`). Neighbours in the sort have similar lengths, so little of a batch is padding.
3. With several processes, split the batch with the most sentences in two until the number of batches is
   a multiple of `num_replicas`. Splitting never raises a batch's cost and keeps every example exactly once,
   so all ranks get the same number of batches (collective ops stay in step) and no example is dropped or
   repeated, unlike cycling the list or truncating it.
4. Shuffle the order of the batches with `seed + epoch` (the `shuffle=False` order is short to long);
   rank `r` takes batches `r, r + num_replicas, ...`.

Everything depends only on `seed`, `epoch` and the lengths, so every rank computes the same list without
communicating. Call `set_epoch(epoch)` before each epoch, as with `DistributedSampler`.

Bounded shapes (`shapes=BatchShapes()`, vaswani-train's `--batch_shapes`, on by default on a GPU). Above, nearly
every batch has a shape of its own, and on a GPU each new shape costs: cuDNN attention plans, cuBLAS heuristics,
torch.compile recompiles, CUDA graphs (../shared/gpu/h200-2026-11-27: 54 shapes in 58 steps). With `shapes`:

1. Each example's bucket is `max(source, target)` rounded up to a bucket length (`BatchShapes.bucket`: multiples
   of 8 up to 64, then steps of about 12.5%). Examples are grouped by bucket, in random order within it.
2. A bucket of length L is cut into batches of exactly `max_tokens // L` examples (capped by `max_sentences`; at
   least 1, so a sentence near max_tokens may be padded past it, by less than one bucket step); the
   examples left over join the next bucket's first batch (padded to that bucket), and what is left after the last
   bucket is one batch of its own.
3. `BucketPadding` pads both sides of a batch to its bucket (source with the pad id, attention mask 0, labels
   -100), so a batch is (max_tokens // L, L, L), or (max_tokens // L, L', L') for a batch of examples carried
   whole from the bucket L' below L: at most two shapes per bucket, plus the last batch and the splits of step 3
   above; the same shapes every epoch, as the number of examples per bucket does not change.

Padding costs work: `sampler_statistics` counts shapes and padding over the first 1,000 batches, and the sampler
says them once in the training log (bounds checked in tests/data/test_batch_shapes.py). The CPU keeps exact shapes: there a new shape costs
nothing, the padding costs time, and other matrix shapes round differently (the toy recipe's weights would change).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)

# vaswani-train's --batch_shapes: "auto" is bucketed on an accelerator, exact on the CPU.
BATCH_SHAPE_CHOICES = ("auto", "bucketed", "exact")


@dataclass(frozen=True)
class BatchShapes:
    """The bucket lengths of bounded batch shapes: multiples of `multiple` up to `linear_up_to`, then each bucket
    `growth` times the one before, rounded up to a multiple. Default: 8, 16, ..., 64, 72, 88, 104, 120, 136, 160,
    184, 208, 240, 272, ...: 18 buckets up to 256 tokens; a sentence gets at most 7 tokens of padding up to 64, at
    most 12.5% + 8 tokens above."""

    multiple: int = 8
    linear_up_to: int = 64
    growth: float = 1.125

    def __post_init__(self) -> None:
        if self.multiple < 1 or self.linear_up_to < self.multiple or self.growth <= 1.0:
            raise ValueError(f"{self}: needs multiple >= 1, linear_up_to >= multiple and growth > 1")

    def bucket(self, length: int) -> int:
        """The smallest bucket length >= `length`."""
        rounded = -(-int(length) // self.multiple) * self.multiple
        if rounded <= self.linear_up_to:
            return max(rounded, self.multiple)
        bucket = self.linear_up_to
        while bucket < length:
            bucket = -(-int(np.ceil(bucket * self.growth)) // self.multiple) * self.multiple
        return bucket

    def buckets(self, lengths: np.ndarray) -> np.ndarray:
        """`bucket` of every entry of `lengths`."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return lengths.copy()
        table = np.array([self.bucket(length) for length in range(int(lengths.max()) + 1)], dtype=np.int64)
        return table[lengths]


def batch_shapes_for(option: str, device_type: str) -> BatchShapes | None:
    """--batch_shapes: `BatchShapes()` where batches are bucketed, None where their shapes are exact."""
    if option not in BATCH_SHAPE_CHOICES:
        raise ValueError(f"--batch_shapes {option}: must be one of {', '.join(BATCH_SHAPE_CHOICES)}")
    if option == "exact" or (option == "auto" and device_type == "cpu"):
        return None
    return BatchShapes()


class TokenBatchSampler(Sampler[list[int]]):
    """Yield lists of dataset indices whose padded size `len(batch) * max length` is at most `max_tokens`.

    Args:
        source_lengths: tokens per source sentence, EOS included (what the model sees after truncation).
        target_lengths: tokens per target sentence, EOS included; `None` batches on the source alone.
        max_tokens: the limit on `len(batch) * max(max(source lengths), max(target lengths))`.
        max_sentences: an optional limit on `len(batch)`.
        shuffle: shuffle the batch order (training); `False` gives short-to-long order (evaluation).
        seed: base of the per-epoch random state, `seed + epoch`.
        num_replicas, rank: the data-parallel world; by default taken from `torch.distributed` when it is
            initialised, else a single process.
        shapes: bucket lengths for bounded batch shapes (see the module docstring), with `BucketPadding` around
            the collator; None: batches as long as their longest example (the paper's, fairseq's).

    Raises:
        ValueError: an example alone exceeds `max_tokens`. Truncate before batching (the tokenizer's
            `truncation=True, max_length=...` with a `max_length` <= `max_tokens`) or raise `max_tokens`.
    """

    def __init__(
        self,
        source_lengths: Sequence[int] | np.ndarray,
        target_lengths: Sequence[int] | np.ndarray | None,
        max_tokens: int,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        shapes: BatchShapes | None = None,
    ) -> None:
        source = np.asarray(source_lengths, dtype=np.int64)
        target = source if target_lengths is None else np.asarray(target_lengths, dtype=np.int64)
        if source.ndim != 1 or target.shape != source.shape:
            raise ValueError(
                f"source_lengths (shape {source.shape}) and target_lengths (shape {target.shape}) must be "
                "1-D and of equal length, one entry per example"
            )
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be positive")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences={max_sentences} must be positive or None")
        negative = np.flatnonzero((source < 0) | (target < 0))
        if negative.size:
            index = int(negative[0])
            raise ValueError(f"example {index} has a negative length (source {source[index]}, target {target[index]})")
        # Cost of a batch is len * max over its examples of this key (fairseq's padded rule).
        self.lengths = np.maximum(source, target)
        self.source_lengths, self.target_lengths = source, target
        self.shapes = shapes
        self.buckets = None if shapes is None else shapes.buckets(self.lengths)
        too_long = np.flatnonzero(self.lengths > max_tokens)
        if too_long.size:
            index = int(too_long[0])
            raise ValueError(
                f"example {index} has {self.lengths[index]} tokens (source {source[index]}, target "
                f"{target[index]}), more than max_tokens={max_tokens} on its own ({too_long.size} such "
                "examples); truncate sequences before batching (truncation=True, max_length <= max_tokens) "
                "or raise max_tokens"
            )

        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} is not in [0, num_replicas={num_replicas})")
        if len(self.lengths) < num_replicas:
            raise ValueError(
                f"{len(self.lengths)} examples cannot give each of num_replicas={num_replicas} ranks a batch"
            )

        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None
        self._described = False

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches `__iter__` yields (a new sort tie-break and batch order)."""
        self.epoch = epoch

    def all_batches(self, epoch: int | None = None) -> list[list[int]]:
        """All ranks' batches of `epoch` (default: the current one); rank r gets [r::num_replicas]."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._build_batches(epoch))
        return self._cache[1]

    def _build_batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng(self.seed + epoch)
        if self.buckets is not None:
            batches = self._split_to_multiple(self._bucketed_batches(rng))
            if self.shuffle:
                batches = [batches[i] for i in rng.permutation(len(batches)).tolist()]
            return batches
        if self.shuffle:
            # lexsort sorts by the last key first: length, then a random tie-break.
            order = np.lexsort((rng.permutation(len(self.lengths)), self.lengths))
        else:
            order = np.argsort(self.lengths, kind="stable")

        batches: list[list[int]] = []
        batch: list[int] = []
        batch_max = 0
        for index, length in zip(order.tolist(), self.lengths[order].tolist(), strict=True):
            new_max = max(batch_max, length)
            full = (len(batch) + 1) * new_max > self.max_tokens or (
                self.max_sentences is not None and len(batch) + 1 > self.max_sentences
            )
            if batch and full:
                batches.append(batch)
                batch, new_max = [], length
            batch.append(index)
            batch_max = new_max
        if batch:
            batches.append(batch)

        batches = self._split_to_multiple(batches)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches)).tolist()]
        return batches

    def _bucketed_batches(self, rng: np.random.Generator) -> list[list[int]]:
        """Batches of exactly `max_tokens // L` examples per bucket length L; the rest joins the next bucket."""
        if self.shuffle:
            order = np.lexsort((rng.permutation(len(self.lengths)), self.buckets))  # random within a bucket
        else:
            order = np.argsort(self.lengths, kind="stable")  # short to long, so buckets ascend too
        sorted_buckets = self.buckets[order]
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
        ends = np.r_[starts[1:], len(order)]
        batches: list[list[int]] = []
        carried: list[int] = []
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            length = int(sorted_buckets[start])
            rows = max(1, self.max_tokens // length)  # 1: a sentence alone whose bucket is over max_tokens
            if self.max_sentences is not None:
                rows = min(rows, self.max_sentences)
            members = carried + order[start:end].tolist()
            full = len(members) // rows * rows
            batches.extend(members[i : i + rows] for i in range(0, full, rows))
            carried = members[full:]
        if carried:
            batches.append(carried)
        return batches

    def _split_to_multiple(self, batches: list[list[int]]) -> list[list[int]]:
        """Split the largest batches in two until every rank can have the same number of batches."""
        wanted = -(-len(batches) // self.num_replicas) * self.num_replicas
        if wanted > len(self.lengths):
            # Only reachable with fewer examples than a few batches per rank, e.g. 5 examples on 4 ranks.
            raise ValueError(
                f"{len(self.lengths)} examples cannot make {wanted} non-empty batches, the smallest multiple "
                f"of num_replicas={self.num_replicas} not below {len(batches)} batches"
            )
        added = 0
        while len(batches) % self.num_replicas:
            # The first of the largest, so the result is deterministic.
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            batch = batches[largest]
            half = len(batch) // 2
            batches[largest : largest + 1] = [batch[:half], batch[half:]]
            added += 1
        if added:
            logger.debug("split %d batches so that %d ranks get equal counts", added, self.num_replicas)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle and self.rank == 0 and not self._described:  # training batches: said once, in the log
            self._described = True
            logger.info(self.describe_shapes())
        yield from self.all_batches()[self.rank :: self.num_replicas]

    def describe_shapes(self, steps: int = 1000) -> str:
        """One line: the distinct shapes of the first `steps` batches and the padding they cost."""
        statistics = sampler_statistics(self, steps)
        kind = "bucketed" if self.shapes is not None else "exact (each side as long as its longest sentence)"
        return (
            f"Batch shapes {kind}: {statistics['distinct_shapes']} distinct (rows, source, target) in the first "
            f"{statistics['batches']:,} batches, {100 * statistics['padding']:.1f}% of their tokens padding"
        )

    def __len__(self) -> int:
        """This rank's number of batches in the current epoch (equal on every rank)."""
        return len(self.all_batches()) // self.num_replicas


class BucketPadding:
    """A collator around `collator` that pads each batch, both sides, to the bucket of its longest side.

    The source (`input_ids`, `decoder_input_ids`) with the pad id, `attention_mask` with 0, `labels` with -100: the
    masks make the padding inert (keys masked, no loss), so a step's loss and gradients equal the unpadded batch's
    to float rounding. With `TokenBatchSampler(shapes=...)` every batch is then one of a few shapes.
    """

    def __init__(self, collator: Callable, shapes: BatchShapes, pad_token_id: int | None = None) -> None:
        self.collator = collator
        self.shapes = shapes
        tokenizer = getattr(collator, "tokenizer", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else tokenizer.pad_token_id
        self.left = getattr(tokenizer, "padding_side", "right") == "left"

    def __call__(self, features):
        batch = self.collator(features)
        longest = max(batch["input_ids"].shape[1], batch["labels"].shape[1] if "labels" in batch else 0)
        length = self.shapes.bucket(longest)
        fills = {"input_ids": self.pad_token_id, "attention_mask": 0, "labels": -100}
        fills["decoder_input_ids"] = self.pad_token_id
        for key, fill in fills.items():
            if key in batch and batch[key].shape[1] < length:
                width = length - batch[key].shape[1]
                batch[key] = torch.nn.functional.pad(batch[key], (width, 0) if self.left else (0, width), value=fill)
        return batch


def shape_statistics(
    batches: Sequence[Sequence[int]],
    source_lengths: np.ndarray,
    target_lengths: np.ndarray,
    shapes: BatchShapes | None = None,
    pad_to_multiple_of: int | None = None,
) -> dict:
    """Distinct (rows, source length, target length) shapes of `batches` as padded, and the padding they cost.

    Padded as the recipe pads them: both sides to the bucket of the longer side with `shapes`, else each side to its
    longest (rounded up to `pad_to_multiple_of`). `padding`: the fraction of the padded tokens (both sides) that
    are padding.
    """
    source_lengths, target_lengths = np.asarray(source_lengths), np.asarray(target_lengths)
    seen: set[tuple[int, int, int]] = set()
    real = padded = 0
    for batch in batches:
        source = source_lengths[np.asarray(batch)]
        target = target_lengths[np.asarray(batch)]
        longest_source, longest_target = int(source.max()), int(target.max())
        if shapes is not None:
            longest_source = longest_target = shapes.bucket(max(longest_source, longest_target))
        elif pad_to_multiple_of:
            longest_source = -(-longest_source // pad_to_multiple_of) * pad_to_multiple_of
            longest_target = -(-longest_target // pad_to_multiple_of) * pad_to_multiple_of
        seen.add((len(batch), longest_source, longest_target))
        real += int(source.sum() + target.sum())
        padded += len(batch) * (longest_source + longest_target)
    return {
        "batches": len(batches),
        "distinct_shapes": len(seen),
        "padding": 1.0 - real / padded if padded else 0.0,
        "tokens_per_batch": real / len(batches) if batches else 0.0,
    }


def sampler_statistics(sampler: TokenBatchSampler, steps: int = 1000, pad_to_multiple_of: int | None = None) -> dict:
    """`shape_statistics` of the first `steps` batches `sampler` gives (all ranks, epochs 0, 1, ... as needed)."""
    batches: list[list[int]] = []
    epoch = 0
    while len(batches) < steps:
        epoch_batches = sampler._build_batches(epoch)
        if not epoch_batches:
            break
        batches.extend(epoch_batches)
        epoch += 1
    statistics = shape_statistics(
        batches[:steps], sampler.source_lengths, sampler.target_lengths, sampler.shapes, pad_to_multiple_of
    )
    return {**statistics, "epochs": epoch}
