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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)


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
        yield from self.all_batches()[self.rank :: self.num_replicas]

    def __len__(self) -> int:
        """This rank's number of batches in the current epoch (equal on every rank)."""
        return len(self.all_batches()) // self.num_replicas
