"""Evaluation during training decodes the validation split through decoding.translate_ids, as translate_texts() does.

The model is a tiny run's folder with re-initialised weights: random weights give long outputs that differ from
sentence to sentence, so a hypothesis scored against the wrong reference, or a batch decoded in the wrong order,
changes what the tests compare.
"""

import json
import os
import subprocess
import sys

import datasets
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq

import hf_vaswani
from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
from hf_vaswani_training.recipe.metrics import compute_translation_scores, load_translation_metric
from hf_vaswani_training.recipe.train import main as train_main
from hf_vaswani_training.recipe.trainer import VaswaniTrainer
from hf_vaswani_training.serving.decoding import translate_ids, translate_texts
from tests.conftest import REPO_ROOT, TINY

EVAL_MAX_TOKENS = 60


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory):
    trained = tmp_path_factory.mktemp("trained")
    train_main([*TINY, "--output_dir", str(trained), "--max_steps", "3", "--average_last_n", "0",
                "--toy_num_test", "2", "--toy_num_validation", "2"])  # fmt: skip
    trained_model = AutoModelForSeq2SeqLM.from_pretrained(trained)
    torch.manual_seed(0)
    model = hf_vaswani.VaswaniForConditionalGeneration(trained_model.config).eval()
    model.generation_config = trained_model.generation_config  # beam 4, GNMT 0.6, source + 5
    return model, AutoTokenizer.from_pretrained(trained)


@pytest.fixture(scope="module")
def split(model_and_tokenizer):
    """24 toy validation pairs, tokenized as the training run tokenizes them (source ids and labels, EOS included)."""
    _, tokenizer = model_and_tokenizer
    source = DataArguments(toy_num_train=10, toy_num_validation=24, toy_num_test=2)
    pairs = load_parallel_data(source, seed=3).splits["validation"]
    sources = [pair["en"] for pair in pairs["translation"]]
    references = [pair["tt"] for pair in pairs["translation"]]
    encoded = tokenizer(sources, text_target=references)
    dataset = datasets.Dataset.from_dict({"input_ids": encoded["input_ids"], "labels": encoded["labels"]})
    return sources, dataset


def make_trainer(model, tokenizer, dataset, tmp_path, metric=None, **overrides) -> VaswaniTrainer:
    args = VaswaniTrainingArguments(
        output_dir=str(tmp_path),
        report_to="none",
        eval_max_tokens=EVAL_MAX_TOKENS,
        per_device_eval_batch_size=8,
        dataloader_num_workers=0,
        **overrides,
    )
    return VaswaniTrainer(
        model=model,
        args=args,
        eval_dataset=dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        translation_metric=metric,
    )


def test_evaluation_decodes_like_translate_in_token_budgeted_sorted_batches(
    model_and_tokenizer, split, tmp_path, monkeypatch
):
    model, tokenizer = model_and_tokenizer
    sources, dataset = split
    trainer = make_trainer(model, tokenizer, dataset, tmp_path, metric=load_translation_metric())
    shapes = []
    generate = model.generate

    def recording_generate(**kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return generate(**kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    metrics = trainer.evaluate()
    monkeypatch.undo()

    # Token budget: every batch's padded source fits in --eval_max_tokens, and it took several batches.
    assert len(shapes) > 1
    assert all(rows * width <= EVAL_MAX_TOKENS for rows, width in shapes)
    assert sum(rows for rows, _ in shapes) == len(sources)
    # Length-sorted: the batches' widths never grow (longest first), unlike dataset order.
    widths = [width for _, width in shapes]
    assert widths == sorted(widths, reverse=True)

    # The same hypotheses as translate_texts() on the text, and BLEU/chrF computed from them directly.
    hypotheses = translate_texts(model, tokenizer, sources, max_tokens=EVAL_MAX_TOKENS)
    assert trainer.decode_for_evaluation(list(dataset["input_ids"])) == hypotheses
    assert len(set(hypotheses)) > len(hypotheses) // 2  # random weights: outputs differ between sentences
    references = tokenizer.batch_decode(list(dataset["labels"]), skip_special_tokens=True)
    direct = compute_translation_scores(hypotheses, references)
    assert metrics["eval_bleu"] == pytest.approx(direct["bleu"], abs=1e-9)
    assert metrics["eval_chrf"] == pytest.approx(direct["chrf"], abs=1e-9)

    # eval_loss still comes from the stock loop: the same as an evaluation without generation.
    loss_only = make_trainer(model, tokenizer, dataset, tmp_path, predict_with_generate=False).evaluate()
    assert "eval_bleu" not in loss_only
    assert metrics["eval_loss"] == pytest.approx(loss_only["eval_loss"], rel=1e-5)
    # ... and it is the plain cross-entropy (label smoothing is for training): the mean of the three batches' losses.
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    rows = [{"input_ids": ids, "labels": labels} for ids, labels in zip(dataset["input_ids"], dataset["labels"])]
    with torch.no_grad():
        batch_losses = [float(model(**collator(rows[start : start + 8])).loss) for start in range(0, len(rows), 8)]
    assert metrics["eval_loss"] == pytest.approx(sum(batch_losses) / len(batch_losses), rel=1e-4)


def test_hypotheses_stay_in_input_order(model_and_tokenizer, split):
    """Each hypothesis is that source's own greedy translation, decoded alone (no batching, no padding)."""
    model, tokenizer = model_and_tokenizer
    _, dataset = split
    input_ids = list(dataset["input_ids"])
    batched = translate_ids(model, tokenizer, input_ids, max_tokens=EVAL_MAX_TOKENS, num_beams=1)
    alone = [
        tokenizer.decode(model.generate(input_ids=torch.tensor([ids]), num_beams=1)[0], skip_special_tokens=True)
        for ids in input_ids
    ]
    assert batched == alone


def test_shards_partition_the_batches(model_and_tokenizer, split):
    """Two ranks' shards (rank 0 and 1 of 2) fill complementary entries whose union is the one-process result."""
    model, tokenizer = model_and_tokenizer
    _, dataset = split
    input_ids = list(dataset["input_ids"])
    whole = translate_ids(model, tokenizer, input_ids, max_tokens=EVAL_MAX_TOKENS, num_beams=1)
    shards = [
        translate_ids(model, tokenizer, input_ids, max_tokens=EVAL_MAX_TOKENS, num_beams=1, shard=(rank, 2))
        for rank in range(2)
    ]
    for index, expected in enumerate(whole):
        filled = [shard[index] for shard in shards if shard[index] is not None]
        assert filled == [expected]
    assert all(any(entry is not None for entry in shard) for shard in shards)


def test_two_processes_report_the_scores_of_the_evaluated_weights(tmp_path):
    """Under `accelerate launch --num_processes 2` each rank decodes every other batch and the hypotheses are
    gathered: the logged eval_bleu/eval_chrf are those of translate_texts() with the weights evaluated (checkpoint-3,
    saved right after the step-3 evaluation) on the whole validation split."""
    output_dir = tmp_path / "two"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env["TOKENIZERS_PARALLELISM"] = "false"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "-m", "hf_vaswani_training.train"]  # fmt: skip
    run = [*TINY, "--output_dir", str(output_dir), "--max_steps", "3", "--average_last_n", "0",
           "--toy_num_test", "2", "--eval_strategy", "steps", "--eval_steps", "3",
           "--eval_max_tokens", str(EVAL_MAX_TOKENS), "--final_eval_splits", "none"]  # fmt: skip
    completed = subprocess.run(
        [*launch, *run], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    state = json.loads((output_dir / "checkpoints" / "checkpoint-3" / "trainer_state.json").read_text())
    logged = next(entry for entry in state["log_history"] if "eval_bleu" in entry)
    assert "eval_loss" in logged

    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir / "checkpoints" / "checkpoint-3").eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    source = DataArguments(toy_num_train=400, toy_num_validation=20, toy_num_test=20)
    pairs = load_parallel_data(source, seed=7).splits["validation"]
    sources = [pair["en"] for pair in pairs["translation"]]
    labels = tokenizer(text_target=[pair["tt"] for pair in pairs["translation"]])["input_ids"]
    references = tokenizer.batch_decode(labels, skip_special_tokens=True)
    hypotheses = translate_texts(model, tokenizer, sources, max_tokens=EVAL_MAX_TOKENS)
    assert len(set(hypotheses)) > 1  # not one output for every sentence, which any order would score the same
    direct = compute_translation_scores(hypotheses, references)
    assert logged["eval_chrf"] == pytest.approx(direct["chrf"], abs=1e-6)
    assert logged["eval_bleu"] == pytest.approx(direct["bleu"], abs=1e-6)
