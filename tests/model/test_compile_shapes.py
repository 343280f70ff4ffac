"""torch.compile over bucketed batches compiles once per shape, then never again (issue 25, item 3).

Compiled with `dynamic=False` on purpose: one static graph per batch shape, the form CUDA graphs and the fastest
kernels want, which is affordable only because `TokenBatchSampler(shapes=BatchShapes())` bounds the shapes (at most
2 x buckets + 1; dynamo's `recompile_limit`, 8 by default, must be at least that). The default, `dynamic=None`,
turns a dimension dynamic after its second size (automatic dynamic shapes) and so also stays bounded, with
dynamic-shape kernels. The training forward with `loss_only=True` (what VaswaniTrainer runs) scores every position
under compile: selecting the labelled ones is a data-dependent shape, and it made a graph break and a recompile per
batch (measured before: 104 graphs for 6 shapes over 60 steps).
"""

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from hf_vaswani_training.data.batching import BatchShapes, TokenBatchSampler
from tests.conftest import tiny_model


def bucketed_batches(steps: int):
    """`steps` padded training batches, as TokenBatchSampler + BucketPadding make them (random ids)."""
    rng = np.random.default_rng(0)
    source = rng.integers(2, 24, 1500)
    target = np.clip(source + rng.integers(-3, 4, 1500), 2, 24)
    shapes = BatchShapes()
    sampler = TokenBatchSampler(source, target, max_tokens=256, shapes=shapes, num_replicas=1, rank=0)
    generator = torch.Generator().manual_seed(0)
    for batch in sampler.all_batches()[:steps]:
        length = shapes.bucket(max(source[batch].max(), target[batch].max()))
        input_ids = torch.randint(4, 64, (len(batch), length), generator=generator)
        labels = torch.randint(4, 64, (len(batch), length), generator=generator)
        attention_mask = torch.ones_like(input_ids)
        for row, index in enumerate(batch):
            input_ids[row, source[index] :], attention_mask[row, source[index] :] = 1, 0
            labels[row, target[index] :] = -100
        yield dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


@pytest.mark.slow
def test_one_compile_per_shape_then_none():
    batches = list(bucketed_batches(24))
    shapes = {tuple(batch["input_ids"].shape) for batch in batches}
    assert 1 < len(shapes) <= 8  # several shapes, within dynamo's default recompile_limit
    model = tiny_model().train()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", dynamic=False)
    for batch in batches:
        compiled(**batch, loss_only=True).loss.backward()
    assert counters["stats"]["unique_graphs"] == len(shapes)  # one graph per shape
    assert not counters["graph_break"]
    for batch in batches:  # a second epoch over the same shapes: nothing new to compile
        compiled(**batch, loss_only=True).loss.backward()
    assert counters["stats"]["unique_graphs"] == len(shapes)

    # The compiled loss (every position scored) equals the eager one (labelled positions only).
    batch = batches[0]
    with torch.no_grad():
        eager = model(**batch, loss_only=True).loss
        torch.testing.assert_close(compiled(**batch, loss_only=True).loss, eager, rtol=1e-5, atol=1e-6)
