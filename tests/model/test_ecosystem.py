"""Entry points of the ecosystem that a user meets first: AutoTokenizer on a saved folder, the stock Seq2SeqTrainer.

(The translation pipeline has its own module, test_pipeline.py.)
"""

import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from transformers import DataCollatorForSeq2Seq, GenerationConfig, Seq2SeqTrainer

from hf_vaswani_training.data.tokenizer import train_joint_bpe
from tests.conftest import (
    PAD,
    copy_examples,
    examples_dataset,
    seq2seq_training_args,
    tiny_model,
    word_level_tokenizer,
)

PROMPT = "Do you wish to run the custom code"
TYPE_WARNING = "to instantiate a model of type"
SENTENCES = ["Ein Hund läuft .", "A dog runs .", "Zwei Katzen schlafen .", "Two cats sleep ."]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _generation_file(folder) -> dict:
    content = json.loads((folder / "generation_config.json").read_text())
    content.pop("transformers_version")
    return content


# ---- 1. AutoTokenizer on a folder written by this project -----------------------------------------------------------


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    from hf_vaswani import VaswaniTranslationPipeline

    tokenizer = train_joint_bpe(SENTENCES * 10, vocab_size=60, min_frequency=1)
    model = tiny_model(vocab_size=len(tokenizer))
    folder = tmp_path_factory.mktemp("ecosystem") / "model"
    # As training/train.py writes its output folder.
    VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu").save_pretrained(folder)
    return folder, [tokenizer(sentence).input_ids for sentence in SENTENCES]


_TOKENIZER_SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    import warnings

    folder, mode = sys.argv[1], sys.argv[2]
    if mode == "no-package":
        sys.modules["hf_vaswani"] = None  # as on a machine where the package was never installed
    elif mode == "package":
        import hf_vaswani  # noqa: F401
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        from transformers import AutoTokenizer

        kwargs = {"trust_remote_code": True} if mode == "no-package" else {}
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    sentences = json.loads(sys.argv[3])
    print(json.dumps({"ids": [tokenizer(s).input_ids for s in sentences], "warnings": [str(w.message) for w in caught]}))
    """
)


def _load_tokenizer_in_a_fresh_process(folder, mode: str, tmp_path) -> tuple[dict, str]:
    home = tmp_path / f"hf_home_{mode}"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TRANSFORMERS_CACHE")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home), HF_MODULES_CACHE=str(home / "modules"))
    completed = subprocess.run(
        [sys.executable, "-c", _TOKENIZER_SCRIPT, str(folder), mode, json.dumps(SENTENCES)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,  # a prompt reads EOF instead of waiting
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stdout + completed.stderr


@pytest.mark.parametrize("mode", ["package", "no-package"])
def test_autotokenizer_loads_a_saved_folder_silently(saved_folder, mode, tmp_path):
    """With the package imported (no trust_remote_code needed), or with trust_remote_code where it is absent."""
    folder, expected_ids = saved_folder
    result, output = _load_tokenizer_in_a_fresh_process(folder, mode, tmp_path)
    assert result["ids"] == expected_ids
    assert result["warnings"] == []
    assert PROMPT not in output and TYPE_WARNING not in output


@pytest.mark.xfail(
    strict=True,
    reason=(
        "transformers 5.23 AutoTokenizer.from_pretrained loads the folder's config through AutoConfig with "
        "trust_remote_code=None before it reads tokenizer_config.json (models/auto/tokenization_auto.py), and "
        "AutoConfig asks before running the config's remote code whatever tokenizer_config.json says; declining, it "
        "falls back to PreTrainedConfig, which warns about the model type. Nothing in the folder avoids it short of "
        "dropping AutoConfig from auto_map, which trust_remote_code loading of the model needs."
    ),
)
def test_autotokenizer_without_package_or_trust_remote_code_is_silent(saved_folder, tmp_path):
    folder, expected_ids = saved_folder
    result, output = _load_tokenizer_in_a_fresh_process(folder, "plain", tmp_path)
    assert result["ids"] == expected_ids
    assert PROMPT not in output and TYPE_WARNING not in output


# ---- 2. the stock Seq2SeqTrainer with predict_with_generate ---------------------------------------------------------


def test_stock_seq2seq_trainer_keeps_the_generation_config_clean(tmp_path):
    model = tiny_model(seed=0)
    tokenizer = word_level_tokenizer()
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    model.save_pretrained(tmp_path / "before")
    before = _generation_file(tmp_path / "before")
    examples = copy_examples(6, seed=7)
    # and no generation_max_length: the model's own decoding
    args = seq2seq_training_args(tmp_path, per_device_eval_batch_size=2, predict_with_generate=True)
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        eval_dataset=examples_dataset(examples),
        data_collator=collator,
        processing_class=tokenizer,
    )

    records = _Records()
    transformers_logger = logging.getLogger("transformers")
    transformers_logger.addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.evaluate()
            output = trainer.predict(examples_dataset(examples))
            batch = collator(examples[:2])
            after_training = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        transformers_logger.removeHandler(records)
    assert not [message for message in records.messages if "seem to have been set" in message]
    assert [str(w.message) for w in caught] == []

    # The model decodes as before: the paper's beam search with source + 50 (not max_length 20).
    fresh = tiny_model(seed=0)
    expected = fresh.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert torch.equal(after_training, expected)
    predictions = torch.as_tensor(output.predictions)
    predictions = predictions.masked_fill(predictions == -100, PAD)
    assert torch.equal(predictions[:2, : expected.shape[1]], expected)
    assert (predictions[:2, expected.shape[1] :] == PAD).all()

    model.save_pretrained(tmp_path / "after")
    assert _generation_file(tmp_path / "after") == before

    # A value set explicitly after the Trainer filled the defaults in is the user's, and is saved.
    trainer.evaluate()
    model.generation_config.max_length = 30
    model.save_pretrained(tmp_path / "explicit")
    assert _generation_file(tmp_path / "explicit") == {**before, "max_length": 30}


def test_generation_config_assigned_by_the_user_is_tracked_in_place():
    model = tiny_model(seed=0)
    config = GenerationConfig(num_beams=2, max_new_tokens=4, decoder_start_token_id=0, eos_token_id=2, pad_token_id=1)
    model.generation_config = config
    model.generate(input_ids=torch.tensor([[5, 6, 2]]))
    # Still the object the user holds: a change through it reaches the model.
    assert model.generation_config is config
    config.num_beams = 1
    assert model.generation_config.num_beams == 1
