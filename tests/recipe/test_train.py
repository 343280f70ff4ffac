"""End-to-end tests of `python -m training.train` on tiny settings (a few steps of the tiny preset)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from hf_vaswani_training.data.batching import TokenBatchSampler
from hf_vaswani_training.recipe.options import parse_arguments
from hf_vaswani_training.recipe.train import check_tokenizer_fits, main
from tests.conftest import REPO_ROOT, TINY


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run")
    evaluation = ["--eval_strategy", "steps", "--eval_steps", "6", "--max_eval_samples", "8"]
    results = main([*TINY, *evaluation, "--output_dir", str(output_dir), "--max_steps", "9", "--average_last_n", "3"])
    return output_dir, results


def test_output_folder_is_complete_and_loads(finished_run):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    output_dir, results = finished_run
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "README.md"):
        assert (output_dir / name).is_file(), name
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert model.config.vocab_size == len(tokenizer) <= 300
    generation = json.loads((output_dir / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.6
    assert generation["length_penalty_type"] == "gnmt" and generation["max_length_offset"] == 5
    # An evaluation ran during training (step 6); the stock Seq2SeqTrainer would have written every global default
    # (max_length=20, top_k=50, ...) into the model's generation config, and so into this file.
    state_file = output_dir / "checkpoints" / "checkpoint-9" / "trainer_state.json"  # checkpoints/: kept out of uploads
    log_history = json.loads(state_file.read_text())["log_history"]
    assert any("eval_bleu" in entry for entry in log_history)
    assert "max_length" not in generation and "top_k" not in generation
    assert results["train_steps"] == 9
    assert {"bleu", "chrf", "bleu_signature"} <= set(results["test"])
    assert "tok:13a" in results["test"]["bleu_signature"]


def test_final_model_is_the_average_of_the_last_checkpoints(finished_run):
    output_dir, results = finished_run
    assert results["averaged_checkpoints"] == ["checkpoint-3", "checkpoint-6", "checkpoint-9"]
    averaged = [output_dir / "checkpoints" / name for name in results["averaged_checkpoints"]]
    checkpoints = [load_file(checkpoint / "model.safetensors") for checkpoint in averaged]
    final = load_file(output_dir / "model.safetensors")
    assert list(final) == ["model.shared.weight"] or "model.shared.weight" in final
    for key, value in final.items():
        expected = torch.stack([c[key].double() for c in checkpoints]).mean(0).to(value.dtype)
        torch.testing.assert_close(value, expected)


def test_training_logs_loss_learning_rate_and_throughput(finished_run):
    output_dir, _ = finished_run
    state = json.loads((output_dir / "checkpoints" / "checkpoint-9" / "trainer_state.json").read_text())
    logs = [entry for entry in state["log_history"] if "loss" in entry]
    assert logs and all("learning_rate" in e and e["tokens_per_second"] > 0 for e in logs)


def test_learning_rate_follows_the_papers_schedule(finished_run):
    """lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), with d_model 64 and warmup 20.

    The stock inverse_sqrt schedule gives update k the paper's rate of step k - 1 (its first update has lr 0).
    """
    output_dir, _ = finished_run
    state = json.loads((output_dir / "checkpoints" / "checkpoint-9" / "trainer_state.json").read_text())
    entries = [e for e in state["log_history"] if "learning_rate" in e]
    assert len(entries) >= 4
    for entry in entries:
        paper_step = entry["step"] - 1
        expected = 64**-0.5 * min(paper_step**-0.5, paper_step * 20**-1.5)
        assert entry["learning_rate"] == pytest.approx(expected, rel=1e-4), entry


def test_model_card_is_filled_from_the_run(finished_run):
    output_dir, results = finished_run
    card = (output_dir / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: transformers" in card
    assert f"{results['test']['bleu']:.2f}" in card and results["test"]["bleu_signature"] in card
    assert "{" not in card.split("---", 2)[2].replace("```", "").split("## Architecture")[1][:50]


def test_recipe_file_with_command_line_override(tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"preset": "tiny", "max_tokens": 1000, "output_dir": str(tmp_path / "a")}))
    model_args, data_args, training_args = parse_arguments([str(recipe), "--max_tokens", "2000"])
    assert model_args.preset == "tiny" and training_args.max_tokens == 2000
    assert training_args.output_dir == str(tmp_path / "a")
    # the paper's recipe is the default
    assert (training_args.adam_beta1, training_args.adam_beta2, training_args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert training_args.label_smoothing_factor == 0.1 and training_args.lr_scheduler_type == "inverse_sqrt"
    assert training_args.warmup_steps == 4000 and training_args.generation_num_beams == 4


def test_yaml_recipe(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("preset: small\nvocab_size: 8000\nreport_to: none\n")
    model_args, _, _ = parse_arguments([str(recipe)])
    assert (model_args.preset, model_args.vocab_size) == ("small", 8000)


def test_unknown_preset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="--preset huge: .*presets are base, big, small, tiny, toy"):
        main([*TINY, "--preset", "huge", "--output_dir", str(tmp_path), "--max_steps", "1"])


@pytest.mark.parametrize(("mode", "expected"), [("error", "exceed --max_source_length"), ("skip", None)])
def test_long_sentences(tmp_path, mode, expected, caplog):
    args = [*TINY, "--output_dir", str(tmp_path), "--max_steps", "1", "--save_strategy", "no"]
    args += ["--max_source_length", "8", "--max_target_length", "8", "--long_sentences", mode, "--toy_num_test", "2"]
    if expected:
        with pytest.raises(ValueError, match=expected):
            main(args)
    else:
        main(args)
        assert "skipped them" in caplog.text


def test_truncation_is_counted_and_keeps_eos(tmp_path, caplog):
    args = [*TINY, "--output_dir", str(tmp_path), "--max_steps", "1", "--save_strategy", "no", "--toy_num_test", "2"]
    main([*args, "--max_source_length", "8", "--max_target_length", "8"])
    assert "training pairs exceed --max_source_length/--max_target_length: truncated them" in caplog.text


def test_tokenizer_larger_than_the_model_is_refused():
    from transformers import PreTrainedTokenizerFast

    from tests.conftest import tiny_config

    class FakeTokenizer:
        pad_token_id, eos_token_id = 1, 2

        def __len__(self):
            return 100

    with pytest.raises(ValueError, match="tokenizer has 100 tokens but the model's vocab_size is 64"):
        check_tokenizer_fits(FakeTokenizer(), tiny_config())
    assert PreTrainedTokenizerFast  # the real class is what train.py passes


def test_resume_continues_to_the_same_weights(tmp_path):
    """Stopping at step 6 and resuming to step 9 gives the weights of an uninterrupted 9-step run."""
    base = [*TINY, "--max_steps", "9", "--average_last_n", "0", "--toy_num_test", "2", "--dropout", "0.1"]
    main([*base, "--output_dir", str(tmp_path / "straight")])
    interrupted = tmp_path / "interrupted"
    main([*base, "--output_dir", str(interrupted), "--max_steps", "6"])
    # the interrupted run's schedule must be the 9-step one, so restart with the same arguments from step 6
    resume_from = interrupted / "checkpoints" / "checkpoint-6"
    main([*base, "--output_dir", str(interrupted), "--resume_from_checkpoint", str(resume_from)])
    straight = load_file(tmp_path / "straight" / "checkpoints" / "checkpoint-9" / "model.safetensors")
    resumed = load_file(interrupted / "checkpoints" / "checkpoint-9" / "model.safetensors")
    # Not bit for bit: the two runs may sum in another order (CPU matmul blocking follows memory alignment), which
    # moves float32 weights by ~1e-7; a resume fault (other dropout masks, lost optimizer state, a skipped batch)
    # moves them by ~1e-3 after one step.
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], atol=1e-5, rtol=1e-4, msg=key)


def _losses(output_dir):
    state = json.loads((output_dir / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path):
    """2 ranks x 1 batch per step == 1 rank x 2 accumulated batches: the same global batch each step."""
    # A max_tokens for which the single-process batch list is even, so the 2-rank sampler splits nothing and
    # both runs see exactly the same batches.
    max_tokens = next(m for m in range(300, 700, 16) if _batch_count(m) % 2 == 0)
    common = [*TINY, "--max_tokens", str(max_tokens), "--max_steps", "6", "--average_last_n", "0",
              "--toy_num_test", "2", "--toy_num_validation", "2", "--dropout", "0", "--logging_steps", "1"]  # fmt: skip
    one = tmp_path / "one"
    main([*common, "--output_dir", str(one), "--gradient_accumulation_steps", "2"])
    two = tmp_path / "two"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env["TOKENIZERS_PARALLELISM"] = "false"
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
    ]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_vaswani_training.train"]
    completed = subprocess.run(
        [*launch, *common, "--output_dir", str(two)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    # The Trainer's summary counts tokens under token batches, and it must see both processes.
    summary = f"updates of <= {max_tokens * 2:,} tokens a side: --max_tokens {max_tokens:,} x gradient accumulation 1"
    assert f"{summary} x 2 processes)" in completed.stdout
    state = json.loads((two / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    one_state = json.loads((one / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["train_batch_size"] == one_state["train_batch_size"]
    one_losses, two_losses = _losses(one), _losses(two)
    assert len(one_losses) == len(two_losses) == 6
    assert one_losses == pytest.approx(two_losses, rel=1e-3)
    final_one = load_file(one / "checkpoints" / "checkpoint-6" / "model.safetensors")
    final_two = load_file(two / "checkpoints" / "checkpoint-6" / "model.safetensors")
    for key in final_one:
        if key.endswith("k_proj.bias"):
            # A key bias adds the same q.b_k to every score of a softmax row, so its true gradient is zero; Adam
            # normalises the float rounding noise it gets into full-size steps, which differ between the runs.
            continue
        torch.testing.assert_close(final_two[key], final_one[key], atol=1e-5, rtol=1e-4, msg=key)


def _batch_count(max_tokens: int) -> int:
    """Batches per epoch of the 2-process test's training split with one process, through the run's own code."""
    import contextlib

    from hf_vaswani_training.data.arguments import DataArguments
    from hf_vaswani_training.data.corpora import load_parallel_data
    from hf_vaswani_training.data.tokenizer import load_or_train_tokenizer
    from hf_vaswani_training.recipe.train import tokenize_splits

    _, data_args, _ = parse_arguments(["--report_to", "none", "--output_dir", "unused"])
    raw = load_parallel_data(DataArguments(toy_num_train=400, toy_num_validation=2, toy_num_test=2), seed=7).splits
    tokenizer = load_or_train_tokenizer(None, raw["train"], "en", "tt", vocab_size=300, model_max_length=256)
    train = tokenize_splits(raw, tokenizer, data_args, "en", "tt", lambda desc: contextlib.nullcontext())["train"]
    lengths = ([len(ids) for ids in train["input_ids"]], [len(ids) for ids in train["labels"]])
    return len(TokenBatchSampler(*lengths, max_tokens=max_tokens, num_replicas=1, rank=0))


@pytest.mark.parametrize(
    "recipe", sorted((REPO_ROOT / "training" / "recipe" / "recipes").glob("*.json")), ids=lambda p: p.name
)
def test_every_shipped_recipe_parses_and_names_a_preset(recipe):
    from hf_vaswani_training.recipe.train import load_preset

    model_args, data_args, training_args = parse_arguments([str(recipe)])
    assert load_preset(model_args.preset)["d_model"] > 0
    assert training_args.output_dir.startswith("outputs/")
    assert training_args.average_last_n <= training_args.save_total_limit


def test_cpu_launch_of_several_processes_fails_loudly(monkeypatch):
    """`accelerate launch --cpu --num_processes 2` starts one process (`--num_machines 2` one per machine, unconnected);
    the script says so instead of training alone."""
    from hf_vaswani_training.recipe.launch import check_launch
    from hf_vaswani_training.usage import UsageError

    launcher = ["accelerate", "launch", "--cpu", "--num_processes", "2", "-m", "training.train"]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    with pytest.raises(UsageError, match=r"starts only 1 process.*--multi_gpu --num_processes 2"):
        check_launch(launcher)
    with pytest.raises(UsageError, match="--multi_gpu --num_processes 4"):
        check_launch(["accelerate", "launch", "--cpu", "--num_processes=4", "train.py"])
    check_launch(["accelerate", "launch", "--cpu", "--num_processes", "1", "train.py"])  # one was asked for
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_launch(launcher)  # a real multi-process launch (torchrun sets WORLD_SIZE)
    monkeypatch.delenv("WORLD_SIZE")
    # Without --cpu the simple launcher sets ACCELERATE_USE_CPU=False, and still starts one process per machine.
    monkeypatch.setenv("ACCELERATE_USE_CPU", "False")
    with pytest.raises(UsageError, match=r"launch --num_processes 2 starts only 1 process"):
        check_launch(["accelerate", "launch", "--num_processes", "2", "train.py"])
    two_machines = ["--num_machines", "2", "--machine_rank", "1", "--main_process_ip", "10.0.0.1", "train.py"]
    with pytest.raises(UsageError, match=r"separate process on each machine.*--multi_gpu --num_machines 2"):
        check_launch(["accelerate", "launch", "--cpu", *two_machines])
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    check_launch(["accelerate", "launch", "--cpu", *two_machines])  # under mpirun, a real multi-process launch
    monkeypatch.delenv("ACCELERATE_USE_CPU")
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    check_launch(launcher)  # not started by Accelerate's simple launcher
