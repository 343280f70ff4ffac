"""transformers' own common model tests, run against VaswaniModel and VaswaniForConditionalGeneration.

Every model added to transformers passes `ModelTesterMixin` (tests/test_modeling_common.py) with a small tester.
That file is not in the transformers wheel and is not copied into this repository: `.ci/fetch_transformers_tests.sh`
downloads the source distribution of the *installed* transformers version from PyPI and extracts it into
`.transformers_tests/<version>/` (git-ignored). Without it these tests skip, naming the command; with CI=true they
fail instead, so that CI cannot pass without having run them.

What the sdist does not ship, and so is not run here (checked for 5.23.0; the fetch script records it per version in
`.transformers_tests/<version>/MISSING`):
- tests/generation/test_utils.py (`GenerationTesterMixin`, the common generate() tests). The generation behaviour is
  covered by tests/model/test_generation.py instead; the fetch script writes an empty stand-in class only so that
  test_modeling_common.py imports, and this tester does not inherit it (that would make the mixin-inheritance check
  pass for nothing). When a version ships the real file, it is inherited and run.
- tests/exporters/test_export.py (`ExportTesterMixin`, the torch.export tests ModelTesterMixin inherits); the export
  path of this project is tested by tests/serving/test_export.py.

The tester below is shaped like transformers' Marian tester (the closest model) with sizes and special ids of this
model: fairseq ids (bos 0, pad 1, eos 2, decoder start 0), sinusoidal positions, one tied embedding matrix.
Tests of the mixin that do not apply to this model are overridden with a skip that says why.
"""

import os
import sys
import unittest
import warnings
from unittest import mock

import pytest
import transformers

from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniModel
from tests.conftest import REPO_ROOT

FETCH_COMMAND = "bash .ci/fetch_transformers_tests.sh"
FETCHED = REPO_ROOT / ".transformers_tests" / transformers.__version__


def _import_common_tests():
    """test_modeling_common.py of the installed transformers, or a skip (a failure under CI=true) saying why."""
    problem = None
    if not (FETCHED / "COMPLETE").is_file():
        problem = f"transformers {transformers.__version__}'s common tests are not in {FETCHED}"
    else:
        try:
            import parameterized  # noqa: F401  (test_modeling_common.py needs it; not a dependency of this package)
        except ImportError:
            problem = "the package `parameterized`, which transformers' test_modeling_common.py imports, is missing"
    if problem is not None:
        message = f"{problem}: run `{FETCH_COMMAND}`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI=true: the common tests must run, not skip)", pytrace=False)
        pytest.skip(message, allow_module_level=True)
    sys.path.insert(0, str(FETCHED))
    with warnings.catch_warnings():
        # Marks of transformers' own pytest configuration (flash_attn_test, ...), which this repository does not have.
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        from transformers_tests import test_modeling_common
        from transformers_tests.generation import test_utils as generation_test_utils

    missing = (FETCHED / "MISSING").read_text().split()
    return test_modeling_common, generation_test_utils, missing


test_modeling_common, generation_test_utils, MISSING = _import_common_tests()
ModelTesterMixin = test_modeling_common.ModelTesterMixin
ids_tensor = test_modeling_common.ids_tensor
GENERATION_TESTS_SHIPPED = "tests/generation/test_utils.py" not in MISSING
NO_GENERATION_TESTS = (
    f"transformers {transformers.__version__}'s sdist does not ship tests/generation/test_utils.py "
    "(GenerationTesterMixin); generate() is covered by tests/model/test_generation.py"
)


class VaswaniModelTester:
    """Builds a tiny config and a batch for the common tests (the role of transformers' MarianModelTester)."""

    def __init__(
        self,
        parent: unittest.TestCase,
        batch_size: int = 13,
        seq_length: int = 7,
        is_training: bool = True,
        vocab_size: int = 99,
        hidden_size: int = 16,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        intermediate_size: int = 4,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        max_position_embeddings: int = 20,
        bos_token_id: int = 0,
        pad_token_id: int = 1,
        eos_token_id: int = 2,
        decoder_start_token_id: int = 0,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.encoder_seq_length = seq_length
        self.decoder_seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_position_embeddings = max_position_embeddings
        self.bos_token_id = bos_token_id
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def get_config(self) -> VaswaniConfig:
        return VaswaniConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            max_position_embeddings=self.max_position_embeddings,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs(self) -> tuple[VaswaniConfig, dict]:
        # Ids 0-2 are the special tokens: ordinary tokens from 3 up, each source ending in EOS as a tokenizer makes it.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(min=3)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(min=3)
        decoder_input_ids[:, 0] = self.decoder_start_token_id
        inputs_dict = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": input_ids.ne(self.pad_token_id),
            "decoder_attention_mask": decoder_input_ids.ne(self.pad_token_id),
        }
        return self.get_config(), inputs_dict

    def prepare_config_and_inputs_for_common(self) -> tuple[VaswaniConfig, dict]:
        return self.prepare_config_and_inputs()


_bases = [ModelTesterMixin]
if GENERATION_TESTS_SHIPPED:
    _bases.append(generation_test_utils.GenerationTesterMixin)


class VaswaniCommonModelTest(*_bases, unittest.TestCase):
    all_model_classes = (VaswaniModel, VaswaniForConditionalGeneration)
    is_encoder_decoder = True
    # No torch.export tests come with the sdist (see the module docstring), and none are claimed.
    test_torch_exportable = False
    # The mixin runs this only for models it dates to 2023 or later (it cannot date a model outside transformers).
    # Run it: weights left uninitialised by _init_weights are what makes remote-code models load garbage.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = VaswaniModelTester(self)
        # The mixin tells a base model from a head by class name, in transformers' static tables of its own models
        # (a base model skips the training tests; a seq2seq LM head gets `labels`). hf_vaswani registers the same
        # mapping with AutoModel / AutoModelForSeq2SeqLM, which those tables do not see: add it for each test.
        for table, name in (
            (test_modeling_common.MODEL_MAPPING_NAMES, VaswaniModel.__name__),
            (
                test_modeling_common.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
                VaswaniForConditionalGeneration.__name__,
            ),
        ):
            patcher = mock.patch.dict(table, {VaswaniConfig.model_type: name})
            patcher.start()
            self.addCleanup(patcher.stop)

    if not GENERATION_TESTS_SHIPPED:

        def test_generation_tester_mixin_inheritance(self):
            pytest.skip(NO_GENERATION_TESTS)

    # ---- tests of the mixin that do not apply to this model (the mixin's own skip reasons would mislead) ----------

    def test_resize_position_vector_embeddings(self):
        pytest.skip("positions are the fixed sinusoids of §3.5, computed for any length: no table to resize")

    def test_sdpa_can_dispatch_composite_models(self):
        # (The mixin's reason would be "does not support SDPA"; it does: test_eager_matches_sdpa_inference runs.)
        pytest.skip("not a composite (multi-modal) model: no sub-models whose attention implementations could differ")

    def test_can_capture_specific_layers_hidden_states(self):
        # (The mixin's reason would be "does not propagate hidden states"; it skips Marian the same way.)
        pytest.skip(
            "reads `outputs.hidden_states`, which seq2seq outputs split into encoder_hidden_states and "
            "decoder_hidden_states (both checked by test_hidden_states_output)"
        )
