"""The one-GPU WMT recipes (wmt14-en-de-{base,big}-1gpu.yaml): vaswani-train's pre-checks and parser accept them, they
update with the paper's ~25k tokens per side (§5.1), as the 8-GPU recipes do, and differ from their 8-GPU twins only
where one GPU needs it. bf16 is left to vaswani-train's default (on where the GPU has it; a recipe saying bf16 True
would be refused on the CPU by the stock arguments)."""

import pytest

from hf_vaswani_training.recipe.options import parse_arguments, preflight_train, split_recipe

ONE_GPU_ONLY = {"max_tokens", "gradient_accumulation_steps", "output_dir"}


@pytest.mark.parametrize("size", ["base", "big"])
def test_one_gpu_recipe_is_the_paper_batch_in_one_step(size, tmp_path):
    (tmp_path / "data").mkdir()
    argv = [f"wmt14-en-de-{size}-1gpu", "--data_dir", str(tmp_path / "data"), "--output_dir", str(tmp_path / "out")]
    request = preflight_train(argv)  # the checks vaswani-train runs before torch loads
    model_args, data_args, training_args = parse_arguments(request)
    assert model_args.preset == size
    assert training_args.bf16 is False and "bf16" not in request.values  # the CPU here; on a bf16 GPU: True
    per_update = training_args.max_tokens * training_args.gradient_accumulation_steps  # one process
    assert 25000 <= per_update <= 26000

    _, one_gpu, _ = split_recipe([f"wmt14-en-de-{size}-1gpu"])
    _, eight_gpus, _ = split_recipe([f"wmt14-en-de-{size}"])
    assert eight_gpus["max_tokens"] * eight_gpus["gradient_accumulation_steps"] * 8 == per_update
    assert {key: value for key, value in one_gpu.items() if key not in ONE_GPU_ONLY} == {
        key: value for key, value in eight_gpus.items() if key not in ONE_GPU_ONLY
    }
