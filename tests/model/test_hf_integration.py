"""The model inside the Hugging Face machinery: Auto classes, save/load, remote code, dtypes, Seq2SeqTrainer.

Architecture, cache and decoding are covered by test_modeling.py and test_generation.py; this file checks what
happens to the model when transformers' own tools handle it.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
)

from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniModel
from tests.conftest import (
    BOS,
    EOS,
    PAD,
    UNK,
    VOCAB,
    copy_examples,
    examples_dataset,
    seq2seq_training_args,
    tiny_config,
    tiny_model,
    word_level_tokenizer,
)

# Outputs of two model objects holding the same weights (the original and its reloaded copy) run the same arithmetic,
# but not bit for bit: CPU BLAS/oneDNN kernels choose their blocking (and so their summation order) by memory
# alignment and CPU features, so the last bits differ between machines (61 of 576 float64 logits differed by ~1e-15
# on another machine of this kind). A reordered sum of n terms of size |x| is off by at most ~n * eps * |x|; with
# n <= 64 and |x| <= 10 through a few layers that is < 1e-12 in float64 and < 1e-5 in float32. A real fault (an untied
# or missing matrix, wrong positions, a lost weight) changes logits by orders of magnitude more. The weights
# themselves are compared exactly: save/load copies bytes.
SAME_WEIGHTS_TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-12, "atol": 1e-12}}

TIED = ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def _sources(lengths=(7, 4, 6), seed=0):
    """A right-padded batch of sources (random tokens then EOS) and its attention mask."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.full((len(lengths), max(lengths)), PAD)
    for row, length in enumerate(lengths):
        input_ids[row, : length - 1] = torch.randint(4, 20, (length - 1,), generator=generator)
        input_ids[row, length - 1] = EOS
    return input_ids, (input_ids != PAD).long()


def _train_copy_task(steps: int = 120) -> VaswaniForConditionalGeneration:
    """A tiny model fitted for a few steps to the copy task, so that greedy and beam outputs are not trivial."""
    torch.manual_seed(0)
    model = tiny_model(seed=0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98), eps=1e-9)
    collator = DataCollatorForSeq2Seq(word_level_tokenizer(), model=model)
    for step in range(steps):
        batch = collator(copy_examples(32, seed=1000 + step))
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    """Models this small gain nothing from intra-op threads, and on a busy machine OpenMP's waiting for a descheduled
    thread makes each training step tens of times slower. Restored when the module is done."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained():
    return _train_copy_task()


def _record_forward_kwargs(model) -> list[dict]:
    """Keeps the keyword arguments of every call of `model` (Trainer calls it as `model(**inputs)`)."""
    calls = []

    def hook(module, args, kwargs):
        calls.append(dict(kwargs))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return calls


# ---- 1. Auto classes ------------------------------------------------------------------------------------------------


def test_auto_classes_are_registered(tmp_path):
    config = AutoConfig.for_model("vaswani")
    assert type(config) is VaswaniConfig
    assert (config.d_model, config.encoder_layers, config.vocab_size) == (512, 6, 37000)  # the paper's base

    assert type(AutoModel.from_config(tiny_config())) is VaswaniModel
    original = AutoModelForSeq2SeqLM.from_config(tiny_config())
    assert type(original) is VaswaniForConditionalGeneration

    original.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is VaswaniConfig
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert type(loaded) is VaswaniForConditionalGeneration

    # The base model out of a ...ForConditionalGeneration checkpoint: the "model." prefix is stripped.
    base, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert type(base) is VaswaniModel
    assert info["missing_keys"] == info["unexpected_keys"] == info["mismatched_keys"] == set()
    assert base.encoder.embed_tokens.weight is base.shared.weight
    assert base.decoder.embed_tokens.weight is base.shared.weight
    for name, tensor in original.model.state_dict().items():
        assert torch.equal(base.state_dict()[name], tensor), name
    input_ids, attention_mask = _sources()
    decoder_input_ids = torch.tensor([[BOS, 5, 6, 7]] * 3)
    with torch.no_grad():
        expected = original.model.eval()(input_ids, attention_mask, decoder_input_ids).last_hidden_state
        actual = base.eval()(input_ids, attention_mask, decoder_input_ids).last_hidden_state
    torch.testing.assert_close(actual, expected, **SAME_WEIGHTS_TOLERANCE[torch.float32])


# ---- 2. save_pretrained / from_pretrained ---------------------------------------------------------------------------


def test_saved_folder_has_code_auto_map_and_generation_config(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    files = set(os.listdir(tmp_path))
    assert {
        "config.json",
        "configuration_vaswani.py",
        "modeling_vaswani.py",
        # the relative imports below the modeling file, which transformers copies with it
        "generation_vaswani.py",
        "row_dropping_vaswani.py",
        "compat_vaswani.py",
        "model.safetensors",
        "generation_config.json",
    } <= files

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "vaswani"
    assert config["auto_map"]["AutoConfig"] == "configuration_vaswani.VaswaniConfig"
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"
    assert config["auto_map"]["AutoModel"] == "modeling_vaswani.VaswaniModel"
    # Generation settings live in generation_config.json only.
    assert "num_beams" not in config and "length_penalty" not in config

    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.6
    assert generation["length_penalty_type"] == "gnmt"
    assert generation["max_length_offset"] == 50

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert loaded.generation_config.length_penalty_type == "gnmt"
    assert loaded.generation_config.max_length_offset == 50
    assert loaded.generation_config.num_beams == 4


def test_safetensors_stores_the_shared_embedding_once_and_no_positions(tmp_path):
    # A vocabulary size no other matrix has, so that the shape alone finds every copy of the embedding.
    tiny_model(vocab_size=96).save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as file:
        shapes = {key: tuple(file.get_slice(key).get_shape()) for key in file.keys()}
    embedding_keys = [key for key in shapes if "embed" in key or "shared" in key or "lm_head" in key]
    assert embedding_keys == ["model.shared.weight"]
    assert [key for key, shape in shapes.items() if shape == (96, 32)] == embedding_keys
    assert not [key for key in shapes if "position" in key]


def test_round_trip_has_no_key_problems_ties_and_equal_logits(tmp_path):
    original = tiny_model()
    original.save_pretrained(tmp_path)
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set()
    assert info["unexpected_keys"] == set()
    assert info["mismatched_keys"] == set()
    assert not info["error_msgs"]

    shared = loaded.model.shared.weight
    tied = (loaded.lm_head.weight, loaded.model.encoder.embed_tokens.weight, loaded.model.decoder.embed_tokens.weight)
    assert all(tensor is shared for tensor in tied)
    assert not any(parameter.is_meta for parameter in loaded.parameters())

    input_ids, attention_mask = _sources()
    decoder_input_ids = torch.tensor([[BOS, 9, 4, 11, 5]] * 3)
    with torch.no_grad():
        expected = original(input_ids, attention_mask, decoder_input_ids).logits
        actual = loaded.eval()(input_ids, attention_mask, decoder_input_ids).logits
    torch.testing.assert_close(actual, expected, **SAME_WEIGHTS_TOLERANCE[torch.float32])


@torch.no_grad()
def test_model_built_on_meta_then_loaded_has_correct_positions(tmp_path):
    original = tiny_model()
    original.save_pretrained(tmp_path)
    with torch.device("meta"):
        rebuilt = VaswaniForConditionalGeneration(tiny_config())
    result = rebuilt.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False, assign=True)
    assert set(result.missing_keys) == set(TIED) and not result.unexpected_keys
    rebuilt.tie_weights()
    rebuilt.eval()
    assert not any(tensor.is_meta for tensor in [*rebuilt.parameters(), *rebuilt.buffers()])
    assert rebuilt.model.encoder.embed_tokens.weight is rebuilt.model.shared.weight

    input_ids, attention_mask = _sources()
    expected = original.get_encoder()(input_ids, attention_mask).last_hidden_state
    torch.testing.assert_close(
        rebuilt.get_encoder()(input_ids, attention_mask).last_hidden_state,
        expected,
        **SAME_WEIGHTS_TOLERANCE[torch.float32],
    )
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        loaded.get_encoder()(input_ids, attention_mask).last_hidden_state,
        expected,
        **SAME_WEIGHTS_TOLERANCE[torch.float32],
    )

    # The encodings themselves, against the formula of §3.5 in float64.
    positions = torch.arange(40, dtype=torch.float64)[:, None]
    inverse_frequencies = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    formula = torch.stack(((positions * inverse_frequencies).sin(), (positions * inverse_frequencies).cos()), -1)
    for model in (rebuilt, loaded):
        for stack in (model.model.encoder, model.model.decoder):
            table = stack.embed_positions(torch.arange(40)[None])[0]
            torch.testing.assert_close(table.double(), formula.flatten(1), rtol=0, atol=5e-5)


# ---- 3. remote code in a fresh process ------------------------------------------------------------------------------

_REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["hf_vaswani"] = None  # as on a machine where the package was never installed
    try:
        import hf_vaswani  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("hf_vaswani is importable in the remote-code process")

    import json
    import os

    import torch
    from transformers import AutoModel, AutoModelForSeq2SeqLM

    folder, input_ids, attention_mask = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    cls = type(model)
    source = sys.modules[cls.__module__].__file__
    input_ids, attention_mask = torch.tensor(input_ids), torch.tensor(attention_mask)
    greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1)
    # generation_config.json: beam 4 with the GNMT length penalty, which lives in the copied modeling file.
    beam = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        num_return_sequences=4,
        output_scores=True,
        return_dict_in_generate=True,
    )
    base_model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    print(json.dumps({
        "base_class": type(base_model).__name__,
        "class": cls.__name__,
        "module": cls.__module__,
        "source": os.path.realpath(source),
        "hf_vaswani_loaded": sys.modules.get("hf_vaswani") is not None,
        "generation_config": {k: getattr(model.generation_config, k, None)
                              for k in ("num_beams", "length_penalty_type", "max_length_offset")},
        "greedy": greedy.tolist(),
        "beam": beam.sequences.tolist(),
        "beam_scores": beam.sequences_scores.tolist(),
    }))
    """
)


def test_saved_folder_loads_and_generates_with_remote_code_in_a_fresh_process(trained, tmp_path):
    folder = tmp_path / "checkpoint"
    trained.save_pretrained(folder)
    input_ids, attention_mask = _sources(lengths=(7, 4, 6, 5), seed=3)
    with torch.no_grad():
        greedy = trained.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1)
        beam = trained.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_return_sequences=4,
            output_scores=True,
            return_dict_in_generate=True,
        )
    # Not trivial outputs: several tokens each, rows of different lengths, four distinct hypotheses per source.
    assert greedy.shape[1] >= 5 and beam.sequences.shape[1] >= 5
    assert len({int((row != PAD).sum()) for row in greedy}) > 1
    assert len({tuple(row) for row in beam.sequences[:4].tolist()}) == 4

    home = tmp_path / "hf_home"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TRANSFORMERS_CACHE")}
    # One thread, like this module's process (see _single_thread), so both sum in the same order.
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home), HF_MODULES_CACHE=str(home / "modules"), OMP_NUM_THREADS="1")
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _REMOTE_SCRIPT,
            str(folder),
            json.dumps(input_ids.tolist()),
            json.dumps(attention_mask.tolist()),
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])

    assert result["class"] == "VaswaniForConditionalGeneration"
    assert result["base_class"] == "VaswaniModel"
    assert result["module"].startswith("transformers_modules.") and "hf_vaswani" not in result["module"]
    assert result["source"].startswith(os.path.realpath(home / "modules"))
    assert not result["hf_vaswani_loaded"]
    assert result["generation_config"] == {"num_beams": 4, "length_penalty_type": "gnmt", "max_length_offset": 50}
    assert result["greedy"] == greedy.tolist()
    assert result["beam"] == beam.sequences.tolist()
    torch.testing.assert_close(torch.tensor(result["beam_scores"]), beam.sequences_scores, rtol=0, atol=1e-5)


# ---- 4. dtypes ------------------------------------------------------------------------------------------------------


def test_float64_model_keeps_tying_through_save_and_load(tmp_path):
    model = tiny_model().to(torch.float64)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype="auto").eval()
    assert {parameter.dtype for parameter in loaded.parameters()} == {torch.float64}
    shared = loaded.model.shared.weight
    assert loaded.lm_head.weight is shared
    assert loaded.model.encoder.embed_tokens.weight is shared and loaded.model.decoder.embed_tokens.weight is shared
    input_ids, attention_mask = _sources()
    decoder_input_ids = torch.tensor([[BOS, 9, 4]] * 3)
    with torch.no_grad():
        expected = model(input_ids, attention_mask, decoder_input_ids).logits
        actual = loaded(input_ids, attention_mask, decoder_input_ids).logits
    assert actual.dtype == torch.float64
    # Tying is identity of storage (asserted above); the outputs agree to float64 rounding, not to the last bit.
    torch.testing.assert_close(actual, expected, **SAME_WEIGHTS_TOLERANCE[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_round_trip_keeps_dtype(tmp_path, dtype):
    model = tiny_model().to(dtype)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as file:
        assert {file.get_tensor(key).dtype for key in file.keys()} == {dtype}
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype="auto")
    assert loaded.dtype == dtype
    assert {parameter.dtype for parameter in loaded.parameters()} == {dtype}
    assert all(loaded.get_parameter(name) is loaded.model.shared.weight for name in TIED)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


# ---- 5. Seq2SeqTrainer ----------------------------------------------------------------------------------------------


def test_tokenizer_matches_the_tiny_vocabulary():
    tokenizer = word_level_tokenizer()
    assert len(tokenizer) == VOCAB
    special_ids = (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
    assert special_ids == (BOS, PAD, EOS, UNK)
    assert tokenizer("t5 t17 t63 zz", add_special_tokens=False)["input_ids"] == [5, 17, 63, UNK]


def test_collator_makes_decoder_inputs_with_the_models_shift(monkeypatch):
    model = tiny_model()
    shifts = []

    def spy(labels):
        shifts.append(labels.clone())
        return VaswaniForConditionalGeneration.prepare_decoder_input_ids_from_labels(model, labels)

    monkeypatch.setattr(model, "prepare_decoder_input_ids_from_labels", spy)
    examples = copy_examples(6, seed=1)
    assert len({len(example["labels"]) for example in examples}) > 1
    batch = DataCollatorForSeq2Seq(word_level_tokenizer(), model=model)(examples)
    assert len(shifts) == 1 and torch.equal(shifts[0], batch["labels"])
    labels, decoder_input_ids = batch["labels"], batch["decoder_input_ids"]
    assert (labels == -100).any() and (batch["input_ids"] == PAD).any()
    assert torch.equal(batch["attention_mask"], (batch["input_ids"] != PAD).long())
    assert (decoder_input_ids[:, 0] == model.config.decoder_start_token_id).all()
    assert torch.equal(decoder_input_ids[:, 1:], labels[:, :-1].masked_fill(labels[:, :-1] == -100, PAD))


def test_seq2seq_trainer_with_label_smoothing_trains(tmp_path):
    model = tiny_model()
    tokenizer = word_level_tokenizer()
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    examples = copy_examples(64, seed=2)
    collated = []

    def recording_collator(features):
        batch = collator(features)
        collated.append(batch)
        return batch

    args = seq2seq_training_args(
        tmp_path,
        per_device_train_batch_size=8,
        max_steps=30,
        learning_rate=5e-3,
        lr_scheduler_type="constant",
        label_smoothing_factor=0.1,
        logging_steps=1,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=examples_dataset(examples),
        data_collator=recording_collator,
        processing_class=tokenizer,
    )
    assert trainer.label_smoother is not None
    calls = _record_forward_kwargs(model)

    # The Trainer's smoothed loss (ε spread over all V classes) is the model's own `label_smoothing` loss.
    batch = collator(examples[:8])
    with torch.no_grad():
        trainer_loss = trainer.compute_loss(model.eval(), dict(batch))
        model_loss = model(**batch, label_smoothing=0.1).loss
    torch.testing.assert_close(trainer_loss, model_loss)
    calls.clear()

    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 30 and len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5

    # Label smoothing pops the labels, so the model saw only the collator's decoder inputs (the labels shifted
    # right), plus the number of label tokens in the batch.
    assert len(calls) == 30
    for call in calls:
        assert "labels" not in call
        source = next(batch for batch in collated if torch.equal(batch["decoder_input_ids"], call["decoder_input_ids"]))
        labels = source["labels"]
        assert torch.equal(call["input_ids"], source["input_ids"])
        assert (call["decoder_input_ids"][:, 0] == BOS).all()
        assert torch.equal(call["decoder_input_ids"][:, 1:], labels[:, :-1].masked_fill(labels[:, :-1] == -100, PAD))
        assert int(call["num_items_in_batch"]) == int((labels != -100).sum())


# ---- 6. gradient accumulation ---------------------------------------------------------------------------------------


_SGD_LR = 0.1


def _one_sgd_step(tmp_path, examples, batch_size, accumulation, accepts_loss_kwargs=True):
    """One optimizer step of plain SGD through Seq2SeqTrainer; returns the parameters before and after, and the
    keyword arguments of every forward call."""
    model = tiny_model(seed=0)
    if not accepts_loss_kwargs:
        model.accepts_loss_kwargs = False  # the Trainer then averages per micro-batch and divides by the steps
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    args = seq2seq_training_args(
        tmp_path / f"{batch_size}x{accumulation}-{accepts_loss_kwargs}",
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        optim="sgd",
        learning_rate=_SGD_LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping: the update is exactly -lr * gradient
        train_sampling_strategy="sequential",
        dataloader_drop_last=False,
    )
    tokenizer = word_level_tokenizer()
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=examples_dataset(examples),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    calls = _record_forward_kwargs(model)
    trainer.train()
    after = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    return before, after, calls


def test_gradient_accumulation_through_the_trainer_is_exact(tmp_path):
    # Unequal label lengths (2, 7, 4, 3 tokens), so that a mean of per-micro-batch means is not the token mean.
    examples = [copy_examples(1, seed=seed, min_length=n, max_length=n)[0] for seed, n in enumerate((1, 6, 3, 2))]
    total_tokens = sum(len(example["labels"]) for example in examples)

    before, whole, whole_calls = _one_sgd_step(tmp_path, examples, batch_size=4, accumulation=1)
    _, accumulated, accumulated_calls = _one_sgd_step(tmp_path, examples, batch_size=2, accumulation=2)

    # The Trainer counted the label tokens of the whole accumulated batch and passed the count to forward.
    assert len(whole_calls) == 1 and len(accumulated_calls) == 2
    assert [call["input_ids"].shape[0] for call in accumulated_calls] == [2, 2]
    for call in whole_calls + accumulated_calls:
        assert int(call["num_items_in_batch"]) == total_tokens

    # Reference: one SGD step on the token-mean loss over the four examples, computed directly.
    reference = tiny_model(seed=0).train()
    reference(**DataCollatorForSeq2Seq(word_level_tokenizer(), model=reference)(examples)).loss.backward()
    for name, parameter in reference.named_parameters():
        expected = before[name] - _SGD_LR * parameter.grad
        torch.testing.assert_close(whole[name], expected, atol=1e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(accumulated[name], whole[name], atol=1e-6, rtol=1e-5, msg=name)

    # Control: without num_items_in_batch (per-micro-batch means / 2) the same run differs measurably.
    _, averaged, averaged_calls = _one_sgd_step(tmp_path, examples, 2, 2, accepts_loss_kwargs=False)
    assert all("num_items_in_batch" not in call for call in averaged_calls)
    assert max((averaged[name] - whole[name]).abs().max().item() for name in whole) > 1e-4


# ---- 7. predict_with_generate ---------------------------------------------------------------------------------------


def test_predict_with_generate_through_the_trainer(trained, tmp_path):
    tokenizer = word_level_tokenizer()
    collator = DataCollatorForSeq2Seq(tokenizer, model=trained)
    examples = copy_examples(6, seed=7)
    args = seq2seq_training_args(
        tmp_path,
        per_device_eval_batch_size=2,
        predict_with_generate=True,
        generation_max_length=8,
        generation_num_beams=1,
    )
    seen = {}

    def compute_metrics(prediction):
        predictions = prediction.predictions
        seen["shape"] = predictions.shape
        exact = []
        for row, example in zip(predictions, examples, strict=True):
            tokens = [token for token in row.tolist() if token not in (-100, PAD)]
            assert tokens[0] == BOS  # generate() returns the decoder start token too
            exact.append(tokens[1:] == example["labels"])
        return {"exact_match": sum(exact) / len(exact)}

    trainer = Seq2SeqTrainer(
        model=trained,
        args=args,
        eval_dataset=examples_dataset(examples),
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )
    metrics = trainer.evaluate()
    assert seen["shape"][0] == 6
    assert 0 < metrics["eval_exact_match"] <= 1  # the fitted model copies some sources exactly

    # eval_loss is the model's own loss averaged over the three (equal-sized) batches.
    with torch.no_grad():
        batch_losses = [trained(**collator(examples[start : start + 2])).loss for start in (0, 2, 4)]
    expected_loss = (sum(batch_losses) / 3).item()
    assert metrics["eval_loss"] == pytest.approx(expected_loss, rel=1e-5)

    output = trainer.predict(examples_dataset(examples))
    predictions = torch.as_tensor(output.predictions).masked_fill(torch.as_tensor(output.predictions) == -100, PAD)
    assert predictions.shape[0] == 6
    assert output.metrics["test_exact_match"] == metrics["eval_exact_match"]

    # The same rows as calling generate() greedily, batch by batch, on the collated inputs.
    for start in (0, 2, 4):
        batch = collator(examples[start : start + 2])
        expected = trained.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=1, max_length=8
        )
        assert expected.shape[1] > 2
        actual = predictions[start : start + 2, : expected.shape[1]]
        assert torch.equal(actual, expected)
        assert (predictions[start : start + 2, expected.shape[1] :] == PAD).all()
