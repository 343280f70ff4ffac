"""Corpus sacreBLEU and chrF as an offline `evaluate` metric module.

`evaluate.load("sacrebleu")` needs the Hub, so this file is a local metric module instead: evaluate copies
it into its dynamic-modules cache and imports it from there, which is why it is one self-contained file that
imports only third-party packages (a `from hf_vaswani_training...` import would fail in that copy wherever the
package is not installed). `hf_vaswani_training.recipe.metrics.load_translation_metric()` loads it;
`compute_translation_scores()` is the same computation without evaluate's bookkeeping.

Scores are computed the way the paper's numbers are usually reproduced: on detokenized, cased text with
sacreBLEU's own tokenizer, and reported with sacreBLEU's signature so that a score is never separated from
how it was computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import evaluate
from sacrebleu.metrics import BLEU, CHRF

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    url = "https://aclanthology.org/W15-3049",
    pages = "392--395",
}
"""

_DESCRIPTION = """\
Corpus-level sacreBLEU and chrF on detokenized text, computed with the `sacrebleu` package, together with
sacreBLEU's signature strings. Works offline.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): detokenized system outputs, one string per segment.
    references (`list[str]` or `list[list[str]]`): one reference per prediction, or a list of references per
        prediction (the number may vary between predictions).
    tokenize (`str`, defaults to `"13a"`): sacreBLEU tokenizer for BLEU ("13a", "intl", "none", "zh", ...).
    lowercase (`bool`, defaults to `False`): lowercase predictions and references before scoring.
Returns:
    bleu (`float`): corpus BLEU, 0-100.
    bleu_signature (`str`): e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
    bleu_precisions (`list[float]`): the 1- to 4-gram precisions, 0-100.
    bleu_bp (`float`): the brevity penalty.
    sys_len (`int`): number of hypothesis tokens.
    ref_len (`int`): effective reference length in tokens.
    chrf (`float`): corpus chrF (character 6-grams, beta 2), 0-100.
    chrf_signature (`str`): e.g. `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0`.
Examples:
    >>> metric = evaluate.load("training/recipe/metrics/translation_metrics.py")
    >>> sentences = ["The cat sat on the mat."]
    >>> metric.compute(predictions=sentences, references=sentences)["bleu"]
    100.0
"""


def _reference_streams(references: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Turn per-prediction references into sacreBLEU's per-stream layout (stream k = k-th reference of all).

    Predictions with fewer references than the most are padded with None, which sacreBLEU documents as
    "no reference here" for a variable number of references.
    """
    per_prediction = [[reference] if isinstance(reference, str) else list(reference) for reference in references]
    for index, refs in enumerate(per_prediction):
        if not refs:
            raise ValueError(f"prediction {index} has no reference")
        if not all(isinstance(reference, str) for reference in refs):
            raise TypeError(f"references of prediction {index} must be strings, got {refs!r}")
    num_streams = max(len(refs) for refs in per_prediction)
    return [[refs[stream] if stream < len(refs) else None for refs in per_prediction] for stream in range(num_streams)]


def compute_translation_scores(
    predictions: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    tokenize: str = "13a",
    lowercase: bool = False,
) -> dict[str, float | int | str | list[float]]:
    """Corpus BLEU and chrF of `predictions` against `references` with sacreBLEU, plus their signatures.

    `references` holds one string per prediction, or one list of strings per prediction for multiple
    references. Both sides must be detokenized: sacreBLEU tokenizes them itself (`tokenize`), which is what
    makes the score comparable across papers.
    """
    # A lone string would be scored character by character without complaint.
    if isinstance(predictions, str) or isinstance(references, str):
        raise TypeError("predictions and references must be lists of strings, not a single string")
    if len(predictions) != len(references):
        raise ValueError(
            f"got {len(predictions)} predictions but {len(references)} references; "
            "there must be one reference (or one list of references) per prediction"
        )
    if not predictions:
        raise ValueError("predictions and references are empty; corpus scores need at least one segment")
    if not all(isinstance(prediction, str) for prediction in predictions):
        raise TypeError("every prediction must be a string (decode token ids before scoring)")
    reference_streams = _reference_streams(references)

    # The metric objects, not sacrebleu.corpus_bleu, because only they give the signature.
    bleu = BLEU(tokenize=tokenize, lowercase=lowercase)
    bleu_score = bleu.corpus_score(list(predictions), reference_streams)
    chrf = CHRF(lowercase=lowercase)
    chrf_score = chrf.corpus_score(list(predictions), reference_streams)
    return {
        "bleu": float(bleu_score.score),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_precisions": [float(precision) for precision in bleu_score.precisions],
        "bleu_bp": float(bleu_score.bp),
        "sys_len": int(bleu_score.sys_len),
        "ref_len": int(bleu_score.ref_len),
        "chrf": float(chrf_score.score),
        "chrf_signature": str(chrf.get_signature()),
    }


# Referred to as `evaluate.Metric`, never imported by name: evaluate takes the first EvaluationModule subclass
# it finds in this module's namespace as the metric, and a bare `Metric` would be found before this class.
@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TranslationMetrics(evaluate.Metric):
    """sacreBLEU and chrF for `evaluate`; all the work is done by `compute_translation_scores`."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # evaluate tries these in order; the single-reference form first, so that a list of strings is
            # never read as a list of references per prediction.
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Value("string"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
            reference_urls=["https://aclanthology.org/W18-6319", "https://aclanthology.org/W15-3049"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[str] | list[list[str]],
        tokenize: str = "13a",
        lowercase: bool = False,
    ) -> dict[str, float | int | str | list[float]]:
        return compute_translation_scores(predictions, references, tokenize=tokenize, lowercase=lowercase)
