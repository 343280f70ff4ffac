"""Translation metrics: corpus sacreBLEU and chrF, usable offline.

`load_translation_metric()` gives the `evaluate` module shipped as `translation_metrics.py`;
`compute_translation_scores()` is the plain function behind it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import evaluate

    from .translation_metrics import compute_translation_scores

__all__ = ["TRANSLATION_METRIC_PATH", "compute_translation_scores", "load_translation_metric"]

# The metric is loaded by path, never by Hub name, so it works without a network.
TRANSLATION_METRIC_PATH = Path(__file__).resolve().with_name("translation_metrics.py")


def load_translation_metric(**load_kwargs: Any) -> evaluate.EvaluationModule:
    """Load the shipped sacreBLEU + chrF metric with `evaluate.load`; keyword arguments go to `evaluate.load`.

    Results are kept in memory unless told otherwise: with evaluate's default on-disk cache, every rank of a
    multi-process evaluation would write the same `default_experiment` cache file and collide.
    """
    import evaluate

    load_kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(str(TRANSLATION_METRIC_PATH), **load_kwargs)


def __getattr__(name: str) -> Any:
    # Importing evaluate takes seconds (it pulls in transformers' pipelines), so `import hf_vaswani_training.recipe.metrics`
    # defers it until a score is actually asked for.
    if name == "compute_translation_scores":
        from .translation_metrics import compute_translation_scores

        return compute_translation_scores
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
