"""What both sides of the comparison are made of: the Multi30K corpus and its token batches, our model with warm
weights, `MarianMTModel` holding a copy of them, and the parity check that they compute the same function.

Marian's sinusoid table is laid out sin-half/cos-half while ours interleaves, so our table is copied into Marian's
`embed_positions`; Marian's LayerNorms are built with eps 1e-5 (not configurable), so their `eps` is set to ours.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time

import torch
from transformers import DataCollatorForSeq2Seq, MarianConfig, MarianMTModel, PreTrainedTokenizerFast

from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, preset_config, sinusoidal_position_encoding
from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.batching import TokenBatchSampler
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.data.tokenizer import train_joint_bpe
from hf_vaswani_training.recipe.arguments import VaswaniTrainingArguments
from hf_vaswani_training.recipe.trainer import VaswaniTrainer

logger = logging.getLogger("speed_vs_marian")

PARITY_TOLERANCE = 1e-4
LABEL_SMOOTHING = 0.1  # the paper's epsilon_ls (§5.4): the objective both models train on
# The paper's optimizer (§5.3) and regularization (§5.4) as Seq2SeqTrainingArguments, for every model measured alike.
PAPER_OPTIMIZER = dict(
    adam_beta1=0.9,
    adam_beta2=0.98,
    adam_epsilon=1e-9,
    weight_decay=0.0,
    max_grad_norm=0.0,
    label_smoothing_factor=LABEL_SMOOTHING,
)


# ---- data -----------------------------------------------------------------------------------------------------------


def load_corpus(args):
    """Multi30K de->en, an 8k joint BPE (trained once, cached) and the tokenized training pairs (cached)."""
    raw = load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=args.data_dir)).splits
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = args.cache_dir / f"tokenizer-bpe{args.vocab_size}"
    if (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    else:
        logger.info(
            "training a joint BPE of %d tokens on Multi30K train (cached in %s)", args.vocab_size, tokenizer_dir
        )
        pairs = raw["train"]["translation"]
        tokenizer = train_joint_bpe((s for p in pairs for s in (p["de"], p["en"])), vocab_size=args.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)
    ids_file = args.cache_dir / f"train-ids-bpe{args.vocab_size}.json"
    if ids_file.is_file():
        ids = json.loads(ids_file.read_text())
    else:
        pairs = raw["train"]["translation"]
        ids = {
            "source": tokenizer([p["de"] for p in pairs])["input_ids"],
            "target": tokenizer(text_target=[p["en"] for p in pairs])["input_ids"],
        }
        ids_file.write_text(json.dumps(ids))
    test = raw["test"]["translation"]
    return tokenizer, ids, [p["de"] for p in test], [p["en"] for p in test]


def features(ids, indices):
    return [
        {"input_ids": ids["source"][i], "attention_mask": [1] * len(ids["source"][i]), "labels": ids["target"][i]}
        for i in indices
    ]


def token_batches(ids, max_tokens: int, count: int | None, seed: int) -> list[list[int]]:
    """The first `count` (None: all) batches of a shuffled TokenBatchSampler epoch over all training pairs."""
    sampler = TokenBatchSampler(
        source_lengths=[len(s) for s in ids["source"]],
        target_lengths=[len(t) for t in ids["target"]],
        max_tokens=max_tokens,
        shuffle=True,
        seed=seed,
    )
    return sampler.all_batches()[:count]


# ---- models ---------------------------------------------------------------------------------------------------------


def vaswani_config(args, tokenizer) -> VaswaniConfig:
    return preset_config(args.preset, tokenizer)


# Fields with the same name and meaning in VaswaniConfig and MarianConfig. decoder_start_token_id too: Marian's
# default is the pad id, ours is <s> = 0.
SHARED_CONFIG_FIELDS = (
    "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "dropout", "attention_dropout", "activation_dropout", "activation_function",
    "max_position_embeddings", "scale_embedding", "pad_token_id", "bos_token_id", "eos_token_id",
    "decoder_start_token_id",
)  # fmt: skip


def marian_config(config: VaswaniConfig) -> MarianConfig:
    """MarianConfig with our architecture. Marian has no pre-LN and no layer_norm_eps: see `marian_from_ours`."""
    if config.normalize_before:
        raise ValueError("MarianMTModel is post-LN only; compare a post-LN preset")
    return MarianConfig(
        **{name: getattr(config, name) for name in SHARED_CONFIG_FIELDS},
        decoder_vocab_size=config.vocab_size,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        forced_eos_token_id=None,
    )


def attention_weights(attention) -> dict[str, torch.Tensor]:
    """q/k/v/out weights and biases of one of our attention modules, whichever projection layout it uses."""
    d = attention.embed_dim
    out = {"out_proj.weight": attention.out_proj.weight, "out_proj.bias": attention.out_proj.bias}
    if hasattr(attention, "q_proj"):
        for name in ("q_proj", "k_proj", "v_proj"):
            out[f"{name}.weight"] = getattr(attention, name).weight
            out[f"{name}.bias"] = getattr(attention, name).bias
        return out
    # Fused layout: in_proj = [W_Q; W_K; W_V] stacked along the output dimension, as nn.MultiheadAttention.
    for index, name in enumerate(("q_proj", "k_proj", "v_proj")):
        out[f"{name}.weight"] = attention.in_proj.weight[index * d : (index + 1) * d]
        out[f"{name}.bias"] = attention.in_proj.bias[index * d : (index + 1) * d]
    return out


@torch.no_grad()
def marian_from_ours(ours: VaswaniForConditionalGeneration, attn_implementation: str = "sdpa") -> MarianMTModel:
    """A MarianMTModel computing the same function as `ours`, with copies of its weights."""
    config = ours.config
    marian = MarianMTModel._from_config(marian_config(config), attn_implementation=attn_implementation)
    marian.to(ours.device)
    target = marian.model
    target.shared.weight.copy_(ours.model.shared.weight)
    if not (target.encoder.embed_tokens.weight is target.shared.weight is marian.lm_head.weight):
        raise RuntimeError("MarianMTModel did not tie its embeddings and softmax weights")
    marian.final_logits_bias.zero_()
    # Marian's table is sin-half/cos-half; ours interleaves (§3.5 as written). Give Marian ours.
    table = sinusoidal_position_encoding(torch.arange(config.max_position_embeddings), config.d_model)
    target.encoder.embed_positions.weight.copy_(table)
    target.decoder.embed_positions.weight.copy_(table)

    def copy_attention(dst, src):
        for name, tensor in attention_weights(src).items():
            dst.get_parameter(name).copy_(tensor)

    def copy_norm(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)
        dst.eps = src.eps  # Marian hard-codes nn.LayerNorm's 1e-5

    for dst, src in zip(target.encoder.layers, ours.model.encoder.layers, strict=True):
        copy_attention(dst.self_attn, src.self_attn)
        copy_norm(dst.self_attn_layer_norm, src.self_attn_layer_norm)
        dst.fc1.load_state_dict(src.feed_forward.fc1.state_dict())
        dst.fc2.load_state_dict(src.feed_forward.fc2.state_dict())
        copy_norm(dst.final_layer_norm, src.final_layer_norm)
    for dst, src in zip(target.decoder.layers, ours.model.decoder.layers, strict=True):
        copy_attention(dst.self_attn, src.self_attn)
        copy_norm(dst.self_attn_layer_norm, src.self_attn_layer_norm)
        copy_attention(dst.encoder_attn, src.encoder_attn)
        copy_norm(dst.encoder_attn_layer_norm, src.encoder_attn_layer_norm)
        dst.fc1.load_state_dict(src.feed_forward.fc1.state_dict())
        dst.fc2.load_state_dict(src.feed_forward.fc2.state_dict())
        copy_norm(dst.final_layer_norm, src.final_layer_norm)
    marian.train(ours.training)
    return marian


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def warm_model(args, tokenizer, ids) -> tuple[VaswaniForConditionalGeneration, str]:
    """Trained weights: --model-dir, or a few hundred steps of our own pipeline on Multi30K (cached)."""
    if args.model_dir is not None:
        model = VaswaniForConditionalGeneration.from_pretrained(args.model_dir, attn_implementation="sdpa")
        return model, f"loaded from {args.model_dir}"
    config = vaswani_config(args, tokenizer)
    probe = VaswaniForConditionalGeneration(config)
    # The cache is keyed on everything that makes the weights, including the parameter layout of the model file.
    key = hashlib.sha256(
        json.dumps(
            [config.to_diff_dict(), sorted(probe.state_dict()), args.warm_steps, args.seed], sort_keys=True, default=str
        ).encode()
    ).hexdigest()[:12]
    del probe
    folder = args.cache_dir / f"warm-{args.preset}-{args.warm_steps}steps-{key}"
    if (folder / "config.json").is_file():
        return (
            VaswaniForConditionalGeneration.from_pretrained(folder, attn_implementation="sdpa"),
            f"{args.warm_steps} warm-up steps (cached {folder.name})",
        )
    logger.info("warm-up training: %d steps of our pipeline on Multi30K (once; cached in %s)", args.warm_steps, folder)
    torch.manual_seed(args.seed)
    model = VaswaniForConditionalGeneration._from_config(config, attn_implementation="sdpa")
    dataset = make_dataset(ids, range(len(ids["source"])))
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = trainer_arguments(
            VaswaniTrainingArguments,
            args,
            output_dir,
            max_steps=args.warm_steps,
            max_tokens=1024,
            learning_rate=1.5e-3,
            lr_scheduler_type="inverse_sqrt",
            warmup_steps=min(100, args.warm_steps // 4),
        )
        trainer = VaswaniTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            processing_class=tokenizer,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
            max_tokens=training_args.max_tokens,
        )
        started = time.perf_counter()
        trainer.train()
        logger.info("warm-up training took %.0f s", time.perf_counter() - started)
    model = trainer.model.to("cpu")
    model.save_pretrained(folder)
    return model, f"{args.warm_steps} warm-up steps (trained now, {time.perf_counter() - started:.0f} s)"


def make_dataset(ids, indices):
    """A `datasets.Dataset` of the tokenized pairs at `indices`, as the Trainers take it."""
    import datasets

    return datasets.Dataset.from_list(features(ids, indices))


def trainer_arguments(cls, args, output_dir, **overrides):
    """`cls` (our or the stock Seq2Seq training arguments) with the same optimizer, objective and no side work."""
    values = dict(
        output_dir=output_dir,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=args.device.type == "cpu",
        bf16=args.torch_dtype == torch.bfloat16,
        seed=args.seed,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        **PAPER_OPTIMIZER,
        predict_with_generate=False,
    )
    if cls is VaswaniTrainingArguments:
        values["average_last_n"] = 0
    values.update(overrides)
    return cls(**values)


# ---- parity ---------------------------------------------------------------------------------------------------------


@torch.no_grad()
def parity(ours, marian, batch) -> dict:
    ours.eval()
    marian.eval()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}
    logits_ours = ours(**inputs).logits.float()
    logits_marian = marian(**inputs).logits.float()
    # Every decoder position: pad positions of the target are computed the same way by both (no decoder mask).
    difference = (logits_ours - logits_marian).abs().max().item()
    return {"max_abs_logit_difference": difference, "tolerance": PARITY_TOLERANCE, "shape": list(logits_ours.shape)}
