"""The training path as it runs on a GPU (issue 22, section 2), checked on the CPU.

Host-device synchronisation. On a GPU the host queues work and runs ahead; reading a device value on the host
(`.item()`, `bool(t)`, `int(t)`, `float(t)`, `.tolist()`, `.numpy()`) waits for the queue to drain and leaves the
GPU idle while the host catches up. The CPU has no such queue, so `torch.cuda.set_sync_debug_mode` has nothing to
report here; the equivalent check counts those conversions, by patching them on `torch.Tensor`, through the
training loop outside its logging, saving and evaluation (`SyncCounter`). Not seen by this
check: syncs inside C++ operators. What remains in a step is in the model's forward, not the training path:
hf_vaswani's `_check_input_ids` reads the min/max id of the encoder's and decoder's inputs (a ValueError for an
out-of-vocabulary id instead of a device-side assert), transformers' mask helper asks whether a padding mask is all
ones (`MODEL_READS`), and the `loss_only` shortcut indexes the labelled positions with a boolean mask, whose count
the host needs for the output shape (inside C++, not counted here).
"""

import math

import datasets
import pytest
import torch
from transformers import TrainerCallback

import hf_vaswani
from hf_vaswani_training.data.tokenizer import train_joint_bpe
from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
from hf_vaswani_training.recipe.train import make_data_collator
from hf_vaswani_training.recipe.trainer import NonFiniteLossError, VaswaniTrainer
from hf_vaswani_training.usage import UsageError

# Host reads in the model's forward (not the training path): hf_vaswani's out-of-vocabulary check of the encoder's
# and decoder's ids, and transformers' masking_utils deciding whether sdpa may skip a padding mask (`mask.all()`,
# for the encoder's self-attention and the cross-attention). Both are skipped under torch.compile.
MODEL_READS = ("_check_input_ids", "_ignore_bidirectional_mask_sdpa")
SYNCING = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


@pytest.fixture(scope="module")
def tokenizer():
    words = "der die das ein eine the a an house haus cat katze dog hund sees sieht".split()
    return train_joint_bpe([" ".join(words)] * 20, vocab_size=80)


def make_dataset(tokenizer, rows: int = 48, seed: int = 0) -> datasets.Dataset:
    generator = torch.Generator().manual_seed(seed)
    low, high, eos = 4, len(tokenizer), tokenizer.eos_token_id

    def sentence():
        length = int(torch.randint(2, 14, (), generator=generator))
        return torch.randint(low, high, (length,), generator=generator).tolist() + [eos]

    sources, targets = [sentence() for _ in range(rows)], [sentence() for _ in range(rows)]
    return datasets.Dataset.from_dict(
        {"input_ids": sources, "attention_mask": [[1] * len(s) for s in sources], "labels": targets}
    )


def make_trainer(tmp_path, tokenizer, on_device_checks: bool, **overrides) -> VaswaniTrainer:
    torch.manual_seed(0)
    config = hf_vaswani.preset_config("tiny", tokenizer, dropout=0.0)
    model = hf_vaswani.VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")
    values = dict(
        output_dir=str(tmp_path / "out"), max_steps=6, logging_steps=3, max_tokens=96, save_strategy="no",
        report_to="none", average_last_n=0, predict_with_generate=False, learning_rate=1e-3, warmup_steps=2,
        seed=0, disable_tqdm=True,
    )  # fmt: skip
    values.update(overrides)
    trainer = VaswaniTrainer(
        model=model,
        args=VaswaniTrainingArguments(**values),
        train_dataset=make_dataset(tokenizer),
        processing_class=tokenizer,
        data_collator=make_data_collator(tokenizer, model, pad_to_multiple_of=8),  # as on a GPU
        max_tokens=values["max_tokens"],
    )
    trainer.check_finite_every_step = not on_device_checks  # the GPU's way, on the CPU
    return trainer


class SyncCounter(TrainerCallback):
    """Counts host reads of tensors in the training loop (`in_steps`, with where they came from) and outside it.

    The loop, from the first step's start to the last step's end, less the logging/saving/evaluation part of each
    step (`_maybe_log_save_evaluate`): so fetching the next batches and counting their labels (`get_batch_samples`)
    is counted as well as forward, backward, gradient norm, optimizer and scheduler step."""

    def __init__(self, monkeypatch, trainer):
        self.active = False
        self.in_steps: list[str] = []
        self.outside = 0
        self.steps = 0
        for name in SYNCING:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counted(name, original))
        log_save_evaluate = trainer._maybe_log_save_evaluate

        def not_counted(*args, **kwargs):
            active, self.active = self.active, False
            try:
                return log_save_evaluate(*args, **kwargs)
            finally:
                self.active = active

        monkeypatch.setattr(trainer, "_maybe_log_save_evaluate", not_counted)
        trainer.add_callback(self)

    def _counted(self, name, original):
        import traceback

        def wrapper(tensor, *args, **kwargs):
            if self.active:
                frame = traceback.extract_stack(limit=2)[0]  # the caller of the conversion
                self.in_steps.append(f"{name} in {frame.name} at {frame.filename}:{frame.lineno}")
            else:
                self.outside += 1
            return original(tensor, *args, **kwargs)

        return wrapper

    def on_step_begin(self, args, state, control, **kwargs):
        self.active = True

    def on_step_end(self, args, state, control, **kwargs):
        self.steps += 1
        if state.global_step >= state.max_steps:
            self.active = False


def test_no_host_read_inside_a_training_step(tmp_path, tokenizer, monkeypatch):
    trainer = make_trainer(tmp_path, tokenizer, on_device_checks=True, max_steps=9)  # into a second epoch
    counter = SyncCounter(monkeypatch, trainer)
    trainer.train()
    assert counter.steps == 9
    # None from the training path (training/, the stock Trainer, Accelerate, torch.optim). The model's forward
    # has two kinds (see the module docstring), known and the only ones allowed, so that a new read fails here.
    in_forward = [read for read in counter.in_steps if read.split(" at ")[0].split(" in ")[1] in MODEL_READS]
    assert len(in_forward) == len(MODEL_READS) * 2 * counter.steps  # each: encoder and decoder side, every step
    # A new epoch's DataLoader draws its base seed from a CPU generator (`.item()` of a CPU tensor on any machine).
    loader_seed = [read for read in counter.in_steps if read.startswith("item in __init__") and "dataloader" in read]
    assert len(loader_seed) == 1
    assert [read for read in counter.in_steps if read not in in_forward + loader_seed] == []
    # The counter sees reads where they are allowed: the logging steps read the loss and the token count.
    assert counter.outside > 0
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3 and all(entry["tokens_per_second"] > 0 for entry in logged)


def test_the_counter_sees_the_per_step_checks_of_the_cpu_path(tmp_path, tokenizer, monkeypatch):
    """On the CPU the finite checks read the loss and the gradient norm every step (free there): the counter must
    see them, or the test above proves nothing."""
    trainer = make_trainer(tmp_path, tokenizer, on_device_checks=False)
    counter = SyncCounter(monkeypatch, trainer)
    trainer.train()
    assert len(counter.in_steps) >= 2 * counter.steps, counter.in_steps


def test_a_nonfinite_loss_is_skipped_on_the_device_and_raised_at_the_next_log(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, on_device_checks=True)
    compute_loss = trainer.compute_loss

    def poisoned(model, inputs, *args, **kwargs):
        loss = compute_loss(model, inputs, *args, **kwargs)
        return loss * math.nan if trainer.state.global_step == 1 else loss  # the second step

    trainer.compute_loss = poisoned
    with pytest.raises(NonFiniteLossError, match=r"non-finite at step 2 \(seen at step 3"):
        trainer.train()
    # The fused AdamW kernel skipped that update (found_inf): nothing non-finite reached the weights or moments.
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    state = trainer.optimizer.optimizer.state if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer.state
    assert all(torch.isfinite(s["exp_avg_sq"]).all() for s in state.values())
    assert {int(s["step"]) for s in state.values()} == {2}  # steps 1 and 3 applied, step 2 skipped


def test_optimizer_is_fused_adamw_with_the_papers_betas_and_epsilon(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, on_device_checks=True, max_steps=1)
    trainer.train()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["fused"] is True
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9


def test_batches_padded_to_a_multiple_of_8_change_nothing(tokenizer):
    """On a GPU the recipe's collator rounds lengths up to a multiple of 8; masks make the extra padding inert, so
    loss and gradients equal those of the batch padded to its longest sentence (to float32 rounding: other matrix
    shapes; that rounding is why the CPU, which gains nothing from it, does not round)."""
    dataset = make_dataset(tokenizer, rows=6)
    torch.manual_seed(0)
    model = hf_vaswani.VaswaniForConditionalGeneration._from_config(
        hf_vaswani.preset_config("tiny", tokenizer, dropout=0.0), attn_implementation="sdpa"
    )
    rows = [dataset[i] for i in range(len(dataset))]
    rounded = make_data_collator(tokenizer, model, pad_to_multiple_of=8)(rows)
    assert rounded["input_ids"].shape[1] % 8 == 0 and rounded["labels"].shape[1] % 8 == 0
    longest = make_data_collator(tokenizer, model)(rows)
    assert rounded["input_ids"].shape[1] > longest["input_ids"].shape[1]  # the rounding did add padding

    def loss_and_grads(batch):
        model.zero_grad()
        loss = model(**batch, label_smoothing=0.1, loss_only=True).loss
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    loss_rounded, grads_rounded = loss_and_grads(rounded)
    loss_longest, grads_longest = loss_and_grads(longest)
    assert loss_rounded == pytest.approx(loss_longest, rel=1e-6)
    for a, b in zip(grads_rounded, grads_longest, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_gpu_defaults_resolve_from_the_hardware(tmp_path, monkeypatch):
    """bf16 where the GPU has it, fp16 left to be asked for, TF32 on Ampere and newer, 2 loader workers; a GPU
    without bf16 refuses --bf16 in one line. The CPU keeps the stock defaults."""
    arguments = VaswaniTrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert (arguments.bf16, arguments.tf32, arguments.dataloader_num_workers) == (False, None, 0)
    assert arguments.logging_nan_inf_filter is False

    def on_gpu(name, capability, bf16):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **k: bf16)

    def resolve(**given):
        arguments.bf16, arguments.tf32, arguments.dataloader_num_workers, arguments.fp16 = None, None, None, False
        for name, value in given.items():
            setattr(arguments, name, value)
        arguments._resolve_accelerator_defaults()
        return arguments.bf16, arguments.tf32, arguments.dataloader_num_workers

    on_gpu("NVIDIA H100 80GB HBM3", (9, 0), True)
    assert resolve() == (True, True, 2)
    assert resolve(fp16=True) == (False, True, 2)
    on_gpu("Tesla T4", (7, 5), False)
    assert resolve() == (False, None, 2)
    with pytest.raises(UsageError, match=r"--bf16: this GPU \(Tesla T4\) has no bf16.*--fp16 True"):
        resolve(bf16=True)
