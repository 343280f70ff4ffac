"""Model FLOPs utilisation: FLOPs counted by hand (2mnk per matmul: q/k/v/out projections, attention scores and
weighted sums, feed-forward, output layer; x3 for training; training counts real tokens only, padding excluded;
generation counts every row and step that generate() runs) over the matmul peak of the machine, measured in the
same run with the same threads (a square `torch.mm`).
"""

from __future__ import annotations

from .machine import measured_matmul_peak


def training_flops(config, batch) -> float:
    """Forward+backward FLOPs (3 x forward) of one training batch, counting real (non-pad) tokens only."""
    d, heads_dim = config.d_model, config.d_model
    fe, fd, vocab = config.encoder_ffn_dim, config.decoder_ffn_dim, config.vocab_size
    source = batch["attention_mask"].sum(-1).double()  # (B,)
    target = (batch["labels"] != -100).sum(-1).double()  # (B,)
    encoder = config.encoder_layers * (
        source * (4 * 2 * d * d + 2 * 2 * d * fe)  # q/k/v/out projections, fc1 + fc2
        + 2 * 2 * source * source * heads_dim  # QK^T and (softmax)V over real keys
    )
    decoder = config.decoder_layers * (
        target * (4 * 2 * d * d + 2 * 2 * d * d + 2 * 2 * d * fd)  # self q/k/v/out, cross q/out, fc1 + fc2
        + source * 2 * 2 * d * d  # cross-attention keys and values of the source
        + 2 * 2 * heads_dim * target * (target + 1) / 2  # causal self-attention: query t sees t keys
        + 2 * 2 * target * source * heads_dim  # cross-attention
    )
    output = target * 2 * d * vocab
    return 3.0 * float((encoder + decoder + output).sum())


class GenerationFlopCounter:
    """Counts the FLOPs generate() executes (every row and step, padding included), from forward hooks."""

    def __init__(self, model):
        self.model = model
        self.config = model.config
        self.flops = 0.0
        self.decoder_row_steps = 0  # rows x new positions the decoder computed, finished rows included
        self.handles = []

    def __enter__(self):
        self.handles.append(self.model.get_encoder().register_forward_pre_hook(self._encoder, with_kwargs=True))
        self.handles.append(self.model.get_decoder().register_forward_pre_hook(self._decoder, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def _encoder(self, module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        rows, length = input_ids.shape
        c, d = self.config, self.config.d_model
        self.flops += (
            c.encoder_layers * rows * (length * (8 * d * d + 4 * d * c.encoder_ffn_dim) + 4 * length * length * d)
        )

    def _decoder(self, module, args, kwargs):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        rows, new = input_ids.shape
        # transformers 5.24 renamed the cache argument from past_key_values to cache
        cache = kwargs["cache"] if kwargs.get("cache") is not None else kwargs.get("past_key_values")
        past = cache.get_seq_length() if cache is not None else 0
        source = kwargs["encoder_hidden_states"].shape[1]
        c, d = self.config, self.config.d_model
        per_layer = rows * (
            new * (8 * d * d + 4 * d * d + 4 * d * c.decoder_ffn_dim)
            + 4 * new * (past + new) * d
            + 4 * new * source * d
            + (4 * source * d * d if past == 0 else 0)  # cross-attention keys/values, once per generate()
        )
        self.flops += c.decoder_layers * per_layer + rows * new * 2 * d * c.vocab_size
        self.decoder_row_steps += rows * new


def matmul_peak(args, seconds: float = 1.0) -> float:
    """Achievable matmul FLOP/s in the benchmark's dtype (lib/machine.py measures it)."""
    return measured_matmul_peak(args.device, args.torch_dtype, seconds)
