"""Mixed precision (issue 22): a bf16 and an fp16 step against fp32 on the same batch, and fp16 with loss scaling
training a small model without NaN. CPU autocast runs the same casts a GPU's does (matmuls and attention in the low
precision, the loss in fp32), with other kernels, so these bounds are what the arithmetic allows on either.

Tolerance. Autocast rounds the inputs of every matrix product to the low precision, whose unit roundoff is
u = 2^-8 for bf16 (8 significant bits) and u = 2^-11 for fp16 (11), and accumulates in fp32. Each layer adds
relative errors of order u to its outputs; LayerNorm after every sub-layer (post-LN) keeps them from growing with
depth, and the loss is a mean over all labelled tokens of a cross-entropy computed in fp32 (the model casts the
logits up), so the independent per-token errors average out. A loss within 2u (relative) of fp32 is therefore a
loose bound: 0.78% for bf16, 0.098% for fp16. Measured here: 4e-4 relative for bf16 and 6e-6 for fp16, well inside it; a cast
in the wrong place (a softmax or the loss in fp16, a mask at -inf) gives errors of order 1 or NaN and fails it.
"""

import math

import pytest
import torch

import hf_vaswani

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def tiny_model(seed: int = 0):
    torch.manual_seed(seed)
    config = hf_vaswani.preset_config(
        "tiny", vocab_size=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0, dropout=0.0
    )
    return hf_vaswani.VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def copy_batch(generator: torch.Generator, rows: int = 8, length: int = 10) -> dict:
    """Padded sources of random lengths; the target is the source (a task a tiny model learns in a few dozen steps)."""
    tokens = torch.randint(4, 64, (rows, length), generator=generator)
    lengths = torch.randint(3, length + 1, (rows,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return {
        "input_ids": torch.where(mask, tokens, 1),
        "attention_mask": mask.long(),
        "labels": torch.where(mask, tokens, -100),
    }


def loss_of(model, batch, dtype) -> torch.Tensor:
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        return model(**batch, label_smoothing=0.1, loss_only=True).loss


def one_step(model, batch, dtype) -> float:
    """One AdamW step (the paper's betas and epsilon) on `batch` in `dtype`; the step's loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    loss = loss_of(model, batch, dtype)
    loss.backward()
    optimizer.step()
    return loss.item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_low_precision_step_matches_fp32_within_the_roundoff_bound(dtype):
    batch = copy_batch(torch.Generator().manual_seed(0))
    reference, low = tiny_model(), tiny_model()
    tolerance = 2 * UNIT_ROUNDOFF[dtype]

    # The autocast really ran in the low precision: the logits come out in it.
    with torch.autocast("cpu", dtype=dtype):
        assert low(**{k: batch[k] for k in ("input_ids", "attention_mask", "labels")}).logits.dtype == dtype

    loss_fp32, loss_low = one_step(reference, batch, None), one_step(low, batch, dtype)
    assert math.isfinite(loss_low)
    assert abs(loss_low - loss_fp32) <= tolerance * loss_fp32, (loss_low, loss_fp32)
    assert loss_low != loss_fp32  # else the step did not run in the low precision and the test proved nothing

    # The update went the same way: the fp32 loss after each model's step agrees within the same bound.
    with torch.no_grad():
        after_fp32, after_low = loss_of(reference, batch, None).item(), loss_of(low, batch, None).item()
    assert after_fp32 < loss_fp32
    assert abs(after_low - after_fp32) <= tolerance * after_fp32, (after_low, after_fp32)


@pytest.mark.slow
def test_fp16_with_loss_scaling_trains_without_nan():
    """fp16 autocast with a dynamic loss scale (torch.amp.GradScaler, the T4/V100 path) for 30 steps: every loss
    finite, every parameter finite, and the loss falls."""
    generator = torch.Generator().manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    losses = []
    for _ in range(30):
        loss = loss_of(model, copy_batch(generator), torch.float16)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert all(math.isfinite(value) for value in losses), losses
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert math.isfinite(scaler.get_scale()) and scaler.get_scale() > 0
    assert sum(losses[-5:]) / 5 < 0.95 * sum(losses[:5]) / 5, losses
