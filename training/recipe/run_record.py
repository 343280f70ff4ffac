"""What a training run records: `RunRecord`, written as the output folder's `results.json` and read by the model
card (training/recipe/model_card.py).

The JSON layout is the one `results.json` always had (`to_dict` / `from_dict` convert): the argument dataclasses
as dicts, the data read per split, the hyperparameters the card reports, the model config's non-default values,
the results (training figures, then one entry of scores per evaluated split) and sample translations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..data.arguments import DataArguments
from ..data.corpora import SplitStats
from .arguments import ModelArguments, VaswaniTrainingArguments


def _known_fields(cls, values: dict[str, Any]) -> dict[str, Any]:
    """`values` limited to the fields of dataclass `cls`: a results.json written by another version may have more."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in values.items() if key in names}


@dataclass
class Hyperparameters:
    """The training and decoding settings a run reports (a subset of `VaswaniTrainingArguments`, same names)."""

    learning_rate: float
    lr_scheduler_type: str
    warmup_steps: float
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    label_smoothing_factor: float
    max_tokens: int | None
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    num_train_epochs: float
    max_steps: int
    seed: int
    average_last_n: int
    length_penalty: float
    max_length_offset: int
    generation_num_beams: int | None
    world_size: int

    @classmethod
    def from_training_args(cls, training_args: VaswaniTrainingArguments) -> Hyperparameters:
        return cls(**{f.name: getattr(training_args, f.name) for f in dataclasses.fields(cls)})


@dataclass
class SplitScores:
    """sacreBLEU and chrF of one split translated with the paper's decoding (training/recipe/metrics/), and its size."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int
    decode_seconds: float
    bleu_precisions: list[float] = field(default_factory=list)
    bleu_bp: float | None = None
    sys_len: int | None = None
    ref_len: int | None = None


@dataclass
class RunResults:
    """Training figures and the scores of each evaluated split (`scores["test"]`, `scores["validation"]`)."""

    train_loss: float
    train_steps: int
    train_epochs: float
    train_minutes: float
    parameters: int
    averaged_checkpoints: list[str] = field(default_factory=list)
    scores: dict[str, SplitScores] = field(default_factory=dict)
    total_minutes: float | None = None
    # Why training ended before its planned steps, in one line (None when it ran them all): a budget, a stop.
    stopped_early: str | None = None
    # The step a resumed run continued from (None when it started fresh); train_steps and train_minutes are then
    # the whole run's, every segment together.
    resumed_from_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `results` of results.json: the figures, then each split's scores under the split's name."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "scores"}
        total_minutes = values.pop("total_minutes")
        values.update({split: dataclasses.asdict(scores) for split, scores in self.scores.items()})
        if total_minutes is not None:
            values["total_minutes"] = total_minutes
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunResults:
        names = {f.name for f in dataclasses.fields(cls)}
        scores = {
            split: SplitScores(**_known_fields(SplitScores, entry))
            for split, entry in values.items()
            if split not in names and isinstance(entry, dict)
        }
        return cls(**_known_fields(cls, values), scores=scores)


@dataclass
class Sample:
    """One test sentence, its translation by the final model and the reference."""

    source: str
    hypothesis: str
    reference: str


@dataclass
class RunRecord:
    """Everything the model card and results.json say about a run."""

    model_args: ModelArguments
    data_args: DataArguments
    data_stats: dict[str, SplitStats]
    source_lang: str
    target_lang: str
    training_args: Hyperparameters
    model_config: dict[str, Any]  # the config's non-default values (`to_diff_dict`), as config.json holds them
    results: RunResults
    samples: list[Sample] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def is_toy_corpus(self) -> bool:
        """Whether the run trained on the embedded toy corpus (no data was named)."""
        data = self.data_args
        return not (data.dataset_name or data.data_dir or data.train_file)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_args": dataclasses.asdict(self.model_args),
            "data_args": dataclasses.asdict(self.data_args),
            "data_stats": {split: dataclasses.asdict(stats) for split, stats in self.data_stats.items()},
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "training_args": dataclasses.asdict(self.training_args),
            "model_config": self.model_config,
            "results": self.results.to_dict(),
            "samples": [dataclasses.asdict(sample) for sample in self.samples],
            "versions": self.versions,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunRecord:
        """A record from the dict of a results.json."""
        return cls(
            model_args=ModelArguments(**_known_fields(ModelArguments, values["model_args"])),
            data_args=DataArguments(**_known_fields(DataArguments, values["data_args"])),
            data_stats={
                split: SplitStats(**{**_known_fields(SplitStats, stats), "sources": tuple(stats["sources"])})
                for split, stats in values["data_stats"].items()
            },
            source_lang=values["source_lang"],
            target_lang=values["target_lang"],
            training_args=Hyperparameters(**_known_fields(Hyperparameters, values["training_args"])),
            model_config=values["model_config"],
            results=RunResults.from_dict(values["results"]),
            samples=[Sample(**sample) for sample in values.get("samples", [])],
            versions=values.get("versions", {}),
            device=values.get("device", "cpu"),
        )
