import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
MULTI30K_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k"))


# Intra-op threads for torch and CTranslate2 in tests: 1 unless HF_VASWANI_TEST_THREADS says otherwise
# (.ci/other_cpus.sh reruns the numeric tests with 3, where reductions split differently).
TEST_THREADS = int(os.environ.get("HF_VASWANI_TEST_THREADS", "1"))
# Whole modules whose tests compare numbers between kernels, engines or code paths (eager/sdpa, cached/full,
# padded/alone, ours/torch.nn.Transformer): marked `numeric` here rather than test by test.
NUMERIC_MODULES = ("test_modeling.py", "test_generation.py")


def pytest_configure(config):
    # Tiny models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP spinning makes them
    # tens of times slower; subprocesses that tests start inherit OMP_NUM_THREADS.
    torch.set_num_threads(TEST_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(TEST_THREADS))
    # The data path caches Arrow files under HF_DATASETS_CACHE; tests (and the subprocesses they start) write theirs
    # into a folder of their own, removed at the end, not into the user's cache.
    config._hf_vaswani_datasets_cache = tempfile.mkdtemp(prefix="hf_vaswani_tests_datasets_")
    os.environ["HF_DATASETS_CACHE"] = config._hf_vaswani_datasets_cache


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in NUMERIC_MODULES:
            item.add_marker(pytest.mark.numeric)


def pytest_unconfigure(config):
    cache = getattr(config, "_hf_vaswani_datasets_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


def tiny_config(**overrides):
    from hf_vaswani import VaswaniConfig

    values = dict(
        vocab_size=64,
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
