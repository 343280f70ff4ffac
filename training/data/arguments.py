"""`DataArguments`: what vaswani-train reads (§5.1), beside the loader that reads it (corpora.py).

A plain dataclass (no torch, no transformers), one of the three that `HfArgumentParser` turns into vaswani-train's
options (the other two, the model's and the Trainer's, are in recipe/arguments.py).
"""

from dataclasses import dataclass, field

from .toy_corpus import NUM_TEST, NUM_TRAIN, NUM_VALIDATION


@dataclass
class DataArguments:
    source_lang: str | None = field(default=None, metadata={"help": "Source language code, e.g. de."})
    target_lang: str | None = field(default=None, metadata={"help": "Target language code, e.g. en."})
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A Hub dataset (or a local folder like one). On the command line it replaces a recipe's local "
            "files (data_dir, *_file)."
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. de-en."})
    source_column: str | None = field(default=None, metadata={"help": "Source text column of a two-column set."})
    target_column: str | None = field(default=None, metadata={"help": "Target text column of a two-column set."})
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "A folder with train/valid/test files (e.g. ../shared/data/multi30k). On the command line it "
            "(or a --*_file) replaces a recipe's dataset_name, with its config and columns: `vaswani-train multi30k "
            "--data_dir DIR` reads DIR, not the Hub."
        },
    )
    train_file: str | None = field(default=None, metadata={"help": ".jsonl, .tsv or a text-pair prefix."})
    validation_file: str | None = field(default=None, metadata={"help": ".jsonl, .tsv or a text-pair prefix."})
    test_file: str | None = field(default=None, metadata={"help": ".jsonl, .tsv or a text-pair prefix."})
    toy_num_train: int = field(default=NUM_TRAIN, metadata={"help": "Embedded corpus: training pairs."})
    toy_num_validation: int = field(default=NUM_VALIDATION, metadata={"help": "Embedded corpus: validation pairs."})
    toy_num_test: int = field(default=NUM_TEST, metadata={"help": "Embedded corpus: test pairs."})
    max_source_length: int = field(default=256, metadata={"help": "Longest source in tokens (EOS included)."})
    max_target_length: int = field(default=256, metadata={"help": "Longest target in tokens (EOS included)."})
    long_sentences: str = field(
        default="truncate",
        metadata={
            "help": "What to do with a training pair longer than the limits: truncate (default, with a warning "
            "that counts them), skip (drop them, counted) or error (stop before training).",
            "choices": ["truncate", "skip", "error"],
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only this many training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only this many validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only this many test pairs."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    batch_shapes: str = field(
        default="auto",
        metadata={
            "help": "Shapes of the --max_tokens training batches: bucketed (lengths rounded up to a few buckets, "
            "both sides padded to the bucket, a fixed number of rows per bucket: a few shapes in all, so GPU "
            "kernels, plans and compiled code are reused), exact (each batch as long as its longest sentence: a "
            "new shape nearly every step) or auto (default: bucketed on a GPU, exact on the CPU, where padding "
            "only costs time). See training/data/batching.py.",
            "choices": ["auto", "bucketed", "exact"],
        },
    )
