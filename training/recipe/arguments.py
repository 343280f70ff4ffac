"""Command-line arguments of `python -m training.train`: three `HfArgumentParser` dataclasses.

`VaswaniTrainingArguments` is `Seq2SeqTrainingArguments` with the paper's recipe as defaults (§5.3, §5.4, §6.1)
and the few settings the stock arguments cannot express (token-count batches, checkpoint averaging, GNMT length
penalty, a wall-clock budget). Every default can be overridden on the command line or in a JSON/YAML file.
"""

import os
from dataclasses import dataclass, field

import torch
from transformers import Seq2SeqTrainingArguments
from transformers.trainer_utils import HubStrategy, IntervalStrategy, SaveStrategy
from transformers.training_args import SchedulerType

from hf_vaswani import PAPER_DECODING

from ..console import show_progress_bar
from ..serving.decoding import DEFAULT_MAX_TOKENS
from ..usage import UsageError


@dataclass
class ModelArguments:
    preset: str = field(
        default="base",
        metadata={
            "help": "Architecture: a preset of hf_vaswani/presets (tiny, small, base, big, toy) or a path "
            "to a config JSON. Ignored when --model_name_or_path is given."
        },
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Start from a trained model (folder or Hub id) instead of a fresh one."}
    )
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "Reuse this tokenizer instead of training a joint BPE on the train split."}
    )
    vocab_size: int = field(
        default=37000, metadata={"help": "Size of the joint BPE vocabulary to train (the paper: about 37000)."}
    )
    bpe_min_frequency: int = field(default=2, metadata={"help": "A pair is merged only if it occurs this often."})
    dropout: float | None = field(default=None, metadata={"help": "Override the preset's residual dropout."})
    attn_implementation: str = field(default="sdpa", metadata={"help": "eager, sdpa, flash_attention_2, ..."})
    trust_remote_code: bool = field(default=False, metadata={"help": "For --model_name_or_path from the Hub."})

    def __post_init__(self):
        # 4 is the number of special tokens: a smaller vocabulary leaves no room for a single character.
        if self.vocab_size < 5:
            raise UsageError(f"--vocab_size {self.vocab_size}: must exceed the 4 special tokens (the paper: 37000)")
        if self.bpe_min_frequency < 1:
            raise UsageError(f"--bpe_min_frequency {self.bpe_min_frequency}: must be 1 or more")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise UsageError(f"--dropout {self.dropout}: must be in [0, 1)")


@dataclass
class VaswaniTrainingArguments(Seq2SeqTrainingArguments):
    # --- the paper's recipe as defaults ---
    output_dir: str | None = field(
        default="outputs/vaswani", metadata={"help": "Where checkpoints, logs and the final model go."}
    )
    learning_rate: float = field(
        default=0.0,
        metadata={
            "help": "Peak learning rate. 0 (default) means the paper's d_model^-0.5 * warmup_steps^-0.5, which "
            "with lr_scheduler_type=inverse_sqrt is the schedule of §5.3 (recipe/schedule.py)."
        },
    )
    lr_scheduler_type: SchedulerType | str = field(
        default="inverse_sqrt", metadata={"help": "The paper's schedule (§5.3)."}
    )
    warmup_steps: float = field(default=4000, metadata={"help": "warmup_steps of §5.3 (the paper: 4000)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "Adam beta1 (§5.3: 0.9)."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (§5.3: 0.98)."})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (§5.3: 1e-9)."})
    weight_decay: float = field(default=0.0, metadata={"help": "None in the paper."})
    max_grad_norm: float = field(default=0.0, metadata={"help": "Gradient clipping; the paper clips nothing (0)."})
    label_smoothing_factor: float = field(default=0.1, metadata={"help": "epsilon_ls of §5.4 (the paper: 0.1)."})
    predict_with_generate: bool = field(default=True, metadata={"help": "Evaluate with generate() and BLEU."})
    generation_num_beams: int | None = field(
        default=PAPER_DECODING["num_beams"], metadata={"help": "Beam size for evaluation (§6.1: 4)."}
    )
    save_strategy: SaveStrategy | str = field(default="steps", metadata={"help": "When to write checkpoints."})
    save_steps: float = field(default=1000, metadata={"help": "Checkpoint interval in optimizer steps."})
    save_total_limit: int | None = field(default=6, metadata={"help": "Keep at most this many checkpoints."})
    logging_steps: float = field(default=100, metadata={"help": "Log loss, learning rate and tokens/s this often."})
    hub_strategy: HubStrategy | str = field(
        default="end",
        metadata={"help": "With --push_to_hub: push only the final (averaged) model and its card, not checkpoints."},
    )
    eval_strategy: IntervalStrategy | str = field(
        default="no", metadata={"help": "Validation BLEU during training: no, steps, epoch."}
    )
    report_to: None | str | list[str] = field(
        default="auto", metadata={"help": "auto: TensorBoard when it is installed, else nothing."}
    )
    # --- on a GPU (issue 22); on the CPU these resolve to the stock behaviour ---
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision (autocast, fp32 weights). Default: on where the GPU has bf16 (Ampere or "
            "newer) and --fp16 is not given; off on the CPU."
        },
    )
    tf32: bool | None = field(
        default=None,
        metadata={"help": "TF32 matrix products for what runs in fp32. Default: on where the GPU has TF32."},
    )
    dataloader_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Processes collating batches beside the training loop. Default: 2 on a GPU (batches are "
            "ready before the step that needs them), 0 on the CPU (workers would take cores from the step)."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "The stock filter of non-finite losses from the logged average. Off: a non-finite loss stops "
            "training (NonFiniteLossError), so there is nothing to filter, and the filter reads the loss on the "
            "host every step, a host-device synchronisation."
        },
    )
    # --- what the stock arguments cannot express ---
    max_tokens: int | None = field(
        default=4096,
        metadata={
            "help": "Token-count batches (fairseq's --max-tokens): per process and micro-batch, sentences of "
            "similar length grouped so that batch size x longest side <= max_tokens. The paper used about 25000 "
            "source + 25000 target tokens per step over 8 GPUs. 0 falls back to --per_device_train_batch_size."
        },
    )
    average_last_n: int = field(
        default=5,
        metadata={"help": "Average the last N checkpoints into the final model (§6.1: 5; 0 or 1 disables)."},
    )
    length_penalty: float = field(
        default=PAPER_DECODING["length_penalty"], metadata={"help": "GNMT length penalty alpha (§6.1: 0.6)."}
    )
    max_length_offset: int = field(
        default=PAPER_DECODING["max_length_offset"], metadata={"help": "Max output length = source length + this."}
    )
    max_train_minutes: float | None = field(
        default=None, metadata={"help": "Stop training after this much wall-clock time (a budget)."}
    )
    final_eval_splits: str = field(
        default="validation,test",
        metadata={"help": "Splits translated and scored at the end (comma-separated, of validation and test; none)."},
    )
    num_samples_to_print: int = field(default=5, metadata={"help": "Sample test translations printed at the end."})
    verbose: bool = field(
        default=False,
        metadata={
            "help": "Show the libraries' INFO logs too (every config loaded or saved, the Trainer's messages, "
            "sacreBLEU's notes on the toy corpus); by default the console shows the run's progress and results."
        },
    )
    threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads torch computes with. Default: the CPUs free to this run (its affinity and cgroup "
            "quota, less the cores other programs keep busy; training/threads.py), looked at again while it runs; "
            "OMP_NUM_THREADS is taken when set."
        },
    )
    eval_max_tokens: int = field(
        default=DEFAULT_MAX_TOKENS,
        metadata={
            "help": "Padded source tokens per length-sorted batch when translating: evaluation during training and "
            "the final evaluation (beam search multiplies the work by the beam size)."
        },
    )

    def __post_init__(self):
        # `accelerate launch --multi_gpu --num_processes N` on a machine without an accelerator: Accelerate only sets up
        # multi-process CPU training (gloo) when told the run is on the CPU.
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available():
            self.use_cpu = True
        # Pinned memory only serves copies to an accelerator; on the CPU torch warns at every evaluation loader.
        if self.use_cpu or not torch.accelerator.is_available():
            self.dataloader_pin_memory = False
        self._resolve_accelerator_defaults()
        if self.disable_tqdm is None:  # a progress bar on a terminal; in a file, recipe/console.py's plain lines
            self.disable_tqdm = not show_progress_bar()
        if self.report_to == "auto":
            try:
                import tensorboard  # noqa: F401

                self.report_to = ["tensorboard"]
            except ImportError:
                self.report_to = "none"
        super().__post_init__()
        if self.dataloader_pin_memory and torch.cuda.is_available() and not self.use_cpu:
            # Pinned batches let Accelerate's copy to the GPU overlap the step in flight (no synchronisation).
            self.accelerator_config.non_blocking = True
        if self.max_tokens is not None and self.max_tokens < 0:
            raise UsageError(f"--max_tokens={self.max_tokens} must be positive (or 0 to disable)")
        if self.average_last_n < 0:
            raise UsageError(f"--average_last_n={self.average_last_n} must be >= 0")
        # generate() would take 0 beams as "not set" and decode with the generation config's 4.
        if self.generation_num_beams is not None and self.generation_num_beams < 1:
            raise UsageError(
                f"--generation_num_beams {self.generation_num_beams}: must be 1 or more (1 is greedy, the paper's 4)"
            )
        if self.max_length_offset < 0:
            raise UsageError(
                f"--max_length_offset {self.max_length_offset}: must be 0 or more (outputs may be this many tokens "
                "longer than their source; the paper's 50)"
            )
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads {self.threads}: must be 1 or more (default: the CPUs free to the run)")
        if self.eval_max_tokens < 1:
            raise UsageError(f"--eval_max_tokens {self.eval_max_tokens}: must be 1 or more")
        if (
            self.average_last_n > 1
            and self.save_total_limit is not None
            and self.save_total_limit < self.average_last_n
        ):
            raise UsageError(
                f"--average_last_n={self.average_last_n} needs --save_total_limit >= {self.average_last_n} "
                f"(got {self.save_total_limit}): the checkpoints to average would be deleted"
            )

    def _resolve_accelerator_defaults(self) -> None:
        """bf16, TF32 and loader workers where the stock defaults leave speed on a GPU unused; the stock defaults on
        the CPU. A GPU asked for bf16 that has none is refused here, in one line, before any work."""
        on_gpu = torch.cuda.is_available() and not self.use_cpu
        gpu_bf16 = on_gpu and torch.cuda.is_bf16_supported(including_emulation=False)
        if self.fp16 and not on_gpu and (self.use_cpu or not torch.accelerator.is_available()):
            # The stock Trainer would train in float32 and say nothing; fp16 with loss scaling is an accelerator path.
            raise UsageError(
                "--fp16 True: there is no GPU here (fp16 with loss scaling runs on an accelerator); train in float32 "
                "(the default on a CPU) or with --bf16 True (CPU autocast)"
            )
        if self.bf16 and on_gpu and not gpu_bf16:
            raise UsageError(
                f"--bf16: this GPU ({torch.cuda.get_device_name()}) has no bf16 (Ampere or newer has it); use "
                "--fp16 True, fp16 with loss scaling"
            )
        if self.bf16 is None:
            self.bf16 = gpu_bf16 and not self.fp16
        if self.tf32 is None and on_gpu and torch.cuda.get_device_capability()[0] >= 8:
            self.tf32 = True
        if self.dataloader_num_workers is None:
            self.dataloader_num_workers = 2 if on_gpu else 0
