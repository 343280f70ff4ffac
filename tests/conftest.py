"""What the test modules share: the suite's configuration (threads, datasets cache, the `numeric` marker) and the
helpers more than one module uses, grouped by the wing that uses them. Test modules import these from here
(`from tests.conftest import ...`), never from each other; training code is imported inside the helpers, so a module
that does not use them does not load it.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast, Seq2SeqTrainingArguments

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
MULTI30K_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k"))


# Intra-op threads for torch and CTranslate2 in tests: 1 unless HF_VASWANI_TEST_THREADS says otherwise
# (.ci/other_cpus.sh reruns the numeric tests with 3, where reductions split differently).
TEST_THREADS = int(os.environ.get("HF_VASWANI_TEST_THREADS", "1"))
# Whole modules whose tests compare numbers between kernels, engines or code paths (eager/sdpa, cached/full,
# padded/alone, ours/torch.nn.Transformer): marked `numeric` here rather than test by test.
NUMERIC_MODULES = ("model/test_modeling.py", "model/test_generation.py")  # relative to tests/


def pytest_configure(config):
    # Tiny models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP spinning makes them
    # tens of times slower; subprocesses that tests start inherit OMP_NUM_THREADS.
    torch.set_num_threads(TEST_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(TEST_THREADS))
    # The data path caches Arrow files under HF_DATASETS_CACHE; tests (and the subprocesses they start) write theirs
    # into a folder of their own, removed at the end, not into the user's cache.
    config._hf_vaswani_datasets_cache = tempfile.mkdtemp(prefix="hf_vaswani_tests_datasets_")
    os.environ["HF_DATASETS_CACHE"] = config._hf_vaswani_datasets_cache
    # torch's Inductor caches the C++ kernels it compiles (in /tmp/torchinductor_$USER) without the ATen CPU capability
    # in the key, so kernels built under one ATEN_CPU_CAPABILITY are reused under another: measured on this AVX-512
    # machine, test_forward_under_torch_compile under ATEN_CPU_CAPABILITY=avx2 after a default run gave logits off by
    # 1e12, and the default run after an avx2 one crashed. A cache per capability keeps .ci/other_cpus.sh's runs apart.
    capability = torch.backends.cpu.get_cpu_capability().lower()
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_tests_{capability}")
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(item.path).resolve()
        if path.is_relative_to(TESTS_DIR) and path.relative_to(TESTS_DIR).as_posix() in NUMERIC_MODULES:
            item.add_marker(pytest.mark.numeric)


def pytest_unconfigure(config):
    cache = getattr(config, "_hf_vaswani_datasets_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


# ---- the model (tests/model/, and every wing that needs a tiny model) ------------------------------------------------

# The tiny model's special ids and vocabulary size (tiny_config).
BOS, PAD, EOS, UNK = 0, 1, 2, 3
VOCAB = 64


def tiny_config(**overrides):
    from hf_vaswani import VaswaniConfig

    values = dict(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=128,
    )
    values.update(overrides)
    return VaswaniConfig(**values)


def tiny_model(seed: int = 0, **overrides):
    from hf_vaswani import VaswaniForConditionalGeneration

    torch.manual_seed(seed)
    return VaswaniForConditionalGeneration(tiny_config(**overrides)).eval()


@pytest.fixture
def model():
    return tiny_model()


def source_batch(seed=0, lengths=(6, 3, 5), vocab=64):
    """A right-padded batch of sources, each ending in EOS."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), PAD)
    for row, length in enumerate(lengths):
        input_ids[row, : length - 1] = torch.randint(3, vocab, (length - 1,), generator=generator)
        input_ids[row, length - 1] = EOS
    return input_ids, (input_ids != PAD).long()


def copy_task_batch(size: int, generator: torch.Generator | None = None):
    """Sources of 2-6 random tokens plus EOS; the labels are the same tokens (a copy task)."""
    lengths = torch.randint(2, 7, (size,), generator=generator)
    tokens = torch.randint(3, 20, (size, 6), generator=generator)
    input_ids = torch.full((size, 7), PAD)
    labels = torch.full((size, 7), -100)
    for row, length in enumerate(lengths.tolist()):
        input_ids[row, :length] = labels[row, :length] = tokens[row, :length]
        input_ids[row, length] = labels[row, length] = EOS
    return input_ids, (input_ids != PAD).long(), labels


@functools.cache
def trained_copy_model():
    """A tiny model fitted for a few steps to a copy task, so generation has non-degenerate preferences
    (outputs of several lengths, EOS neither immediate nor never)."""
    torch.manual_seed(0)
    model = tiny_model(dropout=0.0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(100):
        input_ids, attention_mask, labels = copy_task_batch(32)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def decoder_rows_computed(model, **generate_kwargs):
    """generate()'s output and how many decoder rows (batch size summed over decoder calls) it computed."""
    rows = []
    handle = model.model.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        output = model.generate(**generate_kwargs)
    finally:
        handle.remove()
    return output, sum(rows)


def copy_examples(count: int, seed: int = 0, min_length: int = 2, max_length: int = 6) -> list[dict]:
    """Copy-task examples of varying length: the labels are the source tokens, both ending in EOS."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(count):
        length = int(torch.randint(min_length, max_length + 1, (1,), generator=generator))
        tokens = torch.randint(4, 20, (length,), generator=generator).tolist() + [EOS]
        examples.append({"input_ids": tokens, "labels": list(tokens)})
    return examples


def examples_dataset(examples: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(examples)


def word_level_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose vocabulary is the tiny model's: <s>=0, <pad>=1, </s>=2, <unk>=3, t4..t63."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": BOS, "<pad>": PAD, "</s>": EOS, "<unk>": UNK} | {f"t{i}": i for i in range(4, VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def seq2seq_training_args(tmp_path, **overrides) -> Seq2SeqTrainingArguments:
    from transformers import Seq2SeqTrainingArguments

    values = dict(
        output_dir=str(tmp_path / "trainer"),
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    values.update(overrides)
    return Seq2SeqTrainingArguments(**values)


# ---- data (tests/data/) -------------------------------------------------------------------------------------------


def make_hub_folder(root: Path, rows_by_split: dict[str, dict[str, list]], config: str = "de-en") -> Path:
    """A dataset folder as the Hub stores one: `CONFIG/SPLIT-00000-of-00001.parquet`, README with configs."""
    from datasets import Dataset

    data_files = []
    for split, columns in rows_by_split.items():
        (root / config).mkdir(parents=True, exist_ok=True)
        Dataset.from_dict(columns).to_parquet(str(root / config / f"{split}-00000-of-00001.parquet"))
        data_files.append(f"  - split: {split}\n    path: {config}/{split}-*")
    readme = f"---\nconfigs:\n- config_name: {config}\n  data_files:\n" + "\n".join(data_files) + "\n---\n"
    (root / "README.md").write_text(readme, encoding="utf-8")
    return root


# ---- the recipe and the command line (tests/recipe/, tests/test_cli_errors.py) -------------------------------------

# A few steps of the tiny preset on the embedded corpus: the training run the end-to-end tests share.
TINY = [
    "--preset", "tiny",
    "--vocab_size", "300",
    "--toy_num_train", "400",
    "--toy_num_validation", "20",
    "--toy_num_test", "20",
    "--max_tokens", "512",
    "--warmup_steps", "20",
    "--logging_steps", "2",
    "--save_steps", "3",
    "--max_length_offset", "5",
    "--report_to", "none",
    "--dataloader_num_workers", "0",
    "--seed", "7",
]  # fmt: skip

# A tiny run of the embedded corpus, for the command-line error tests: each fails before it would train.
TINY_RUN = ["--preset", "tiny", "--vocab_size", "300", "--toy_num_train", "50", "--max_steps", "1"]
TINY_RUN += ["--report_to", "none", "--save_strategy", "no", "--toy_num_validation", "5", "--toy_num_test", "5"]


def run_cli(command: str, *argv, capsys) -> tuple[int, str]:
    from hf_vaswani_training import cli

    status = getattr(cli, command)([str(a) for a in argv])
    return status, capsys.readouterr().err


def assert_one_line_error(status: int, stderr: str, command: str, *fragments: str) -> str:
    """Exit status 2, stderr ends with exactly one `vaswani-COMMAND: error: ...` line holding every fragment."""
    from hf_vaswani_training import usage

    assert status == usage.EXIT_USAGE, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith(f"vaswani-{command}: error: ")]
    assert len(errors) == 1 and stderr.rstrip("\n").endswith(errors[0]), stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


@pytest.fixture
def logging_put_back(monkeypatch):
    """What setup_logging changes (the root's handlers and level, the quiet libraries' levels, the progress bars'
    variable) put back after the test. A library left at INFO logs at interpreter exit (torch: its cache statistics)
    to the stream pytest has closed: "--- Logging error --- ... I/O operation on closed file"."""
    import logging

    from hf_vaswani_training.console import PROGRESS_ENV, QUIET_LIBRARIES

    monkeypatch.setenv(PROGRESS_ENV, "1")  # recorded, so that the value from before (or its absence) is put back
    root = logging.getLogger()
    handlers, root_level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    yield
    root.handlers[:] = handlers
    root.setLevel(root_level)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


# ---- serving (tests/serving/): the attention explorer, with and without a browser ---------------------------------

SENTENCE = "The old dog does not sleep in the green garden ."
MAX_SOURCE_TOKENS = 40  # the tokenizer's model_max_length: long sentences are cut to this


def make_model_folder(folder: Path, max_length_offset: int = 8) -> Path:
    """A complete model folder in seconds: a BPE tokenizer trained on toy-corpus sentences and a tiny model with
    random weights. Random weights give outputs that differ by head, layer and decoding (a model trained for a few
    steps ends every sentence at once); the generation config is the paper's (beam 4, GNMT 0.6) with a short
    length limit so beam search stays fast."""
    from hf_vaswani_training.data.tokenizer import train_joint_bpe
    from hf_vaswani_training.data.toy_corpus import generate_corpus

    corpus = generate_corpus(num_train=300, num_validation=0, num_test=0)["train"]
    texts = [text for pair in corpus for text in (pair["en"], pair["tt"])]
    tokenizer = train_joint_bpe(texts, vocab_size=300, model_max_length=MAX_SOURCE_TOKENS)
    model = tiny_model(
        seed=0,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model.generation_config.max_length_offset = max_length_offset
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Root in a container needs --no-sandbox; the rest keep an offline machine from waiting on Google's services.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
