"""The learning-rate schedule of §5.3, "Noam" in tensor2tensor and OpenNMT, `inverse_sqrt` in fairseq:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear warm-up for `warmup_steps` (the paper: 4000), then decay with the inverse square root of the step.

The recipe runs it on the stock tools: transformers' `inverse_sqrt` scheduler (the default `--lr_scheduler_type`)
multiplies the peak rate by step/warmup during the warm-up and by sqrt(warmup/step) after it, which is the formula
above once the peak is `peak_learning_rate(d_model, warmup_steps)`. `--learning_rate 0` (the default) asks for that
peak; any other value scales the same shape. `test_learning_rate_follows_the_papers_schedule` in
tests/recipe/test_train.py holds the Trainer's logged rates against the formula above, written out in the test.
"""

from __future__ import annotations


def peak_learning_rate(d_model: int, warmup_steps: float) -> float:
    """The schedule's peak, d_model^-0.5 * warmup_steps^-0.5, reached at step = warmup_steps: the --learning_rate
    that makes transformers' `inverse_sqrt` scheduler the paper's."""
    if warmup_steps < 1:
        raise ValueError(
            f"--warmup_steps={warmup_steps} is a ratio; the paper's learning rate needs a number of steps "
            "(or give --learning_rate explicitly)"
        )
    return d_model**-0.5 * warmup_steps**-0.5
