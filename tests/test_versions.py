"""The supported transformers range: fallbacks where transformers' private generation members differ, and the
import guard outside the range. (scripts/check_transformers_versions.py runs the same remote-code check on every
release; .ci/transformers_oldest.sh runs it on the oldest.)"""

import logging
import subprocess
import sys
import textwrap

import pytest
import torch

from hf_vaswani import generation_vaswani, row_dropping_vaswani
from hf_vaswani.configuration_vaswani import SUPPORTED_TRANSFORMERS
from tests.conftest import decoder_rows_computed, source_batch, trained_copy_model


@pytest.fixture(scope="module")
def trained():
    return trained_copy_model()


def _generate_both_ways(model, monkeypatch, **kwargs):
    """generate() as on this release, then as on a release whose private members differ (forced fallback)."""
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5, 2), seed=4)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    with torch.no_grad():
        ours, our_rows = decoder_rows_computed(model, **kwargs)
        for name in ("GREEDY_MISMATCH", "BEAM_SEARCH_MISMATCH"):
            monkeypatch.setattr(row_dropping_vaswani, name, "GenerationMixin._prefill differs (test)")
        fallback, fallback_rows = decoder_rows_computed(model, **kwargs)
    return ours, our_rows, fallback, fallback_rows


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # the folder's defaults: beam 4, GNMT alpha 0.6, source + 50
        {"num_return_sequences": 2},
        {"length_penalty_type": None, "length_penalty": 1.0},
        {"num_beams": 1},  # greedy
    ],
)
def test_fallback_to_the_stock_loop_gives_the_same_tokens(trained, monkeypatch, kwargs):
    ours, our_rows, fallback, fallback_rows = _generate_both_ways(trained, monkeypatch, **kwargs)
    assert torch.equal(ours, fallback)
    # It really was the other loop: the stock loop runs finished rows through the decoder too.
    assert fallback_rows > our_rows


def test_fallback_keeps_gnmt_and_the_source_length_limit(trained, monkeypatch):
    """In the stock loop the two scoring hooks still apply GNMT: the ranking differs from Hugging Face's penalty."""
    monkeypatch.setattr(row_dropping_vaswani, "BEAM_SEARCH_MISMATCH", "forced (test)")
    input_ids, attention_mask = source_batch(lengths=(6, 3, 5, 2), seed=4)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, num_return_sequences=4)
    kwargs.update(output_scores=True, return_dict_in_generate=True, length_penalty=0.6)
    with torch.no_grad():
        gnmt = trained.generate(length_penalty_type="gnmt", **kwargs)
        hf = trained.generate(length_penalty_type=None, **kwargs)
        limited = trained.generate(input_ids=input_ids, attention_mask=attention_mask, max_length_offset=1)
    lengths = torch.tensor([6, 3, 5, 2])
    # Each beam's score is its log-probability over the penalty of its own length: recover log P both ways.
    generated = (gnmt.sequences[:, 1:] != trained.config.pad_token_id).sum(-1)
    log_p = gnmt.sequences_scores * generation_vaswani.gnmt_length_penalty(generated, 0.6)
    assert not torch.allclose(log_p, gnmt.sequences_scores)
    assert not torch.equal(gnmt.sequences_scores, hf.sequences_scores)
    # max_length_offset=1: at most one token past each source's length (plus the start token).
    produced = (limited[:, 1:] != trained.config.pad_token_id).sum(-1)
    assert bool((produced <= lengths + 1).all())


def test_gnmt_is_refused_where_its_hooks_differ(trained, monkeypatch):
    monkeypatch.setattr(generation_vaswani, "_GNMT_HOOK_MISMATCH", "GenerationMixin._update_finished_beams differs")
    input_ids, attention_mask = source_batch(lengths=(4, 3))
    with pytest.raises(NotImplementedError, match="length_penalty_type='gnmt' needs") as error:
        trained.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3)
    assert "_update_finished_beams differs" in str(error.value)
    # Hugging Face's own penalty does not need the hooks.
    trained.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3, length_penalty_type=None)


def test_signature_check_finds_a_changed_private_member(monkeypatch):
    from transformers.generation import GenerationMixin

    assert row_dropping_vaswani.signature_mismatch(row_dropping_vaswani.BEAM_SEARCH_CALLS) is None
    assert row_dropping_vaswani.signature_mismatch(generation_vaswani._GNMT_HOOK_CALLS, complete=False) is None

    def old_top_k(self, accumulated_log_probs, running_sequences, running_beam_indices, cur_len, decoder_prompt_len,
                  do_sample, beams_to_keep, num_beams, vocab_size, batch_size):  # fmt: skip
        """The form of transformers 5.2-5.17."""

    monkeypatch.setattr(GenerationMixin, "_get_top_k_continuations", old_top_k)
    mismatch = row_dropping_vaswani.signature_mismatch(row_dropping_vaswani.BEAM_SEARCH_CALLS)
    assert mismatch == "GenerationMixin._get_top_k_continuations takes other parameters (also vocab_size)"
    monkeypatch.delattr(GenerationMixin, "_get_running_beams_for_next_iteration")
    assert "does not exist" in row_dropping_vaswani.signature_mismatch(
        {"_get_running_beams_for_next_iteration": ("num_beams",)}
    )


def test_the_loop_used_is_logged_once_at_debug_level(trained, caplog):
    generation_vaswani._log_loop.cache_clear()
    input_ids, attention_mask = source_batch(lengths=(4, 3))
    with caplog.at_level(logging.DEBUG, logger=generation_vaswani.logger.name), torch.no_grad():
        for _ in range(2):
            trained.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=3)
    messages = [record.getMessage() for record in caplog.records if record.getMessage().startswith("hf-vaswani")]
    assert len(messages) == 1 and messages[0].startswith("hf-vaswani generation: greedy: row-dropping loop")
    assert caplog.records[0].levelno == logging.DEBUG


# The folder's code as a user with another transformers would import it: the installed transformers reports
# another version before the configuration module is imported.
_GUARD = textwrap.dedent(
    """
    import sys
    import transformers
    import transformers.pipelines  # importing it sets transformers.__version__ again
    transformers.__version__ = sys.argv[1]
    try:
        import hf_vaswani.configuration_vaswani
    except ImportError as error:
        print(str(error))
    else:
        print("imported")
    """
)


@pytest.mark.parametrize("version", ["4.57.6", "6.0.0"])
def test_import_guard_refuses_a_release_outside_the_range_in_one_line(version):
    completed = subprocess.run([sys.executable, "-c", _GUARD, version], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    message = completed.stdout.strip()
    assert message == (
        f"hf-vaswani needs transformers{SUPPORTED_TRANSFORMERS}; this is {version}: "
        f'pip install "transformers{SUPPORTED_TRANSFORMERS}"'
    )


def test_import_guard_accepts_the_oldest_supported_release():
    oldest = SUPPORTED_TRANSFORMERS.split(">=")[1].split(",")[0]
    completed = subprocess.run([sys.executable, "-c", _GUARD, oldest], capture_output=True, text=True, timeout=120)
    assert completed.stdout.strip() == "imported", completed.stderr[-2000:]
