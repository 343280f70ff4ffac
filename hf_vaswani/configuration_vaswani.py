"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Field names follow `MarianConfig`, so anyone who knows Hugging Face seq2seq configs can read it; the defaults
are the paper's base model (Table 3, row "base").
"""

import transformers
from packaging.specifiers import SpecifierSet

# The transformers releases this code is checked on (scripts/check_transformers_versions.py runs the remote-code
# check on every 5.x minor); a saved folder's code refuses to load outside them rather than fail later or, worse,
# give different tokens.
SUPPORTED_TRANSFORMERS = ">=5.0.0,<6"
if not SpecifierSet(SUPPORTED_TRANSFORMERS).contains(transformers.__version__, prereleases=True):
    raise ImportError(
        f"hf-vaswani needs transformers{SUPPORTED_TRANSFORMERS}; this is {transformers.__version__}: "
        f'pip install "transformers{SUPPORTED_TRANSFORMERS}"'
    )

from transformers.configuration_utils import PreTrainedConfig  # noqa: E402

# torch.nn.attention's names of the scaled-dot-product backends (VaswaniConfig.sdpa_backends).
SDPA_BACKEND_NAMES = ("flash", "mem_efficient", "math", "cudnn")


class VaswaniConfig(PreTrainedConfig):
    r"""
    Configuration for [`VaswaniModel`] and [`VaswaniForConditionalGeneration`].

    The defaults reproduce the base model of the paper: d_model 512, 6 encoder and 6 decoder layers, 8 heads,
    inner feed-forward size 2048, residual dropout 0.1, token embeddings scaled by sqrt(d_model) and one
    embedding matrix shared by encoder input, decoder input and the pre-softmax projection (§3.4).

    Args:
        vocab_size: size of the joint (source + target) vocabulary.
        d_model: width of every sub-layer output and of the embeddings (§3.1).
        encoder_layers / decoder_layers: N, the number of identical layers in each stack (§3.1).
        encoder_attention_heads / decoder_attention_heads: h, the number of attention heads (§3.2.2).
        encoder_ffn_dim / decoder_ffn_dim: d_ff, the inner size of the position-wise feed-forward network (§3.3).
        dropout: P_drop, applied to each sub-layer output before the residual addition and to the sums of
            embeddings and positional encodings (§5.4).
        attention_dropout: dropout on the attention probabilities. Not in the paper (0 by default); the
            tensor2tensor code it was run with had it as an option.
        activation_dropout: dropout after the ReLU of the feed-forward network. Not in the paper (0 by default).
        activation_function: the feed-forward non-linearity; the paper uses "relu" (§3.3).
        max_position_embeddings: the longest sequence the model is meant for. Sinusoidal positions are computed
            from the formula for any position, so longer inputs still run (with a one-time warning): §3.5
            chose sinusoids because they "may allow the model to extrapolate to sequence lengths longer than
            the ones encountered during training".
        scale_embedding: multiply token embeddings by sqrt(d_model) (§3.4).
        layer_norm_eps: epsilon of every LayerNorm; 1e-6 as in tensor2tensor.
        normalize_before: pre-LN layers (LayerNorm inside the residual branch, plus a final LayerNorm on each
            stack). Off by default: the paper is post-LN, LayerNorm(x + Sublayer(x)) (§3.1).
        init_std: standard deviation of the token-embedding initialisation; `None` means d_model**-0.5, the
            tensor2tensor value the paper was trained with.
        tie_word_embeddings: share one matrix between encoder input, decoder input and pre-softmax projection.
        sdpa_backends: the scaled-dot-product attention backends PyTorch may choose from on a CUDA GPU, in torch's
            names ("flash", "mem_efficient", "math", "cudnn"); `None` leaves the choice to PyTorch. Not a model
            hyperparameter and not in the paper: the default leaves out cuDNN attention, which on Hopper GPUs builds an
            execution plan for every new (batch, length) shape (modeling_vaswani.sdpa_backends_for). Applied only
            with `attn_implementation="sdpa"` and on CUDA tensors; the CPU keeps PyTorch's choice.
    """

    model_type = "vaswani"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the cache's name from transformers 5.24 on, and before
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    def __init__(
        self,
        vocab_size: int = 37000,
        d_model: int = 512,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        encoder_attention_heads: int = 8,
        decoder_attention_heads: int = 8,
        encoder_ffn_dim: int = 2048,
        decoder_ffn_dim: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_function: str = "relu",
        max_position_embeddings: int = 1024,
        scale_embedding: bool = True,
        layer_norm_eps: float = 1e-6,
        normalize_before: bool = False,
        init_std: float | None = None,
        use_cache: bool = True,
        is_encoder_decoder: bool = True,
        tie_word_embeddings: bool = True,
        # fairseq's layout (<s>=0, <pad>=1, </s>=2, <unk>=3). A pad id of 0 would be falsy, and generate()'s beam
        # search fills finished rows with `pad_token_id or eos_token_id`, i.e. with EOS.
        bos_token_id: int | None = 0,
        pad_token_id: int | None = 1,
        eos_token_id: int | list[int] | None = 2,
        decoder_start_token_id: int | None = 0,
        sdpa_backends: list[str] | None = ("flash", "mem_efficient", "math"),
        **kwargs,
    ):
        # A plain __init__, not dataclass fields under @strict: the one form every 5.x release accepts. 5.0-5.2
        # have no dataclass configs (@strict raises there), and later releases keep a subclass's own __init__.
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation_function = activation_function
        self.max_position_embeddings = max_position_embeddings
        self.scale_embedding = scale_embedding
        self.layer_norm_eps = layer_norm_eps
        self.normalize_before = normalize_before
        self.init_std = init_std
        self.use_cache = use_cache
        self.sdpa_backends = None if sdpa_backends is None else list(sdpa_backends)
        # Checked before the base class runs, so that an invalid value is a plain ValueError naming the field.
        self._check_values(bos_token_id, pad_token_id, eos_token_id, decoder_start_token_id)
        super().__init__(
            bos_token_id=bos_token_id,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            is_encoder_decoder=is_encoder_decoder,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    def _check_values(self, bos_token_id, pad_token_id, eos_token_id, decoder_start_token_id) -> None:
        positive = (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"VaswaniConfig: {name}={value} must be a positive integer")
        for heads in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, heads) != 0:
                raise ValueError(
                    f"VaswaniConfig: d_model={self.d_model} is not divisible by {heads}={getattr(self, heads)}"
                )
        if self.d_model % 2 != 0:
            raise ValueError(
                f"VaswaniConfig: d_model={self.d_model} must be even (sinusoidal positions pair sin and cos, §3.5)"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"VaswaniConfig: {name}={value} must be in [0, 1)")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"VaswaniConfig: layer_norm_eps={self.layer_norm_eps} must be positive")
        if self.init_std is not None and self.init_std <= 0:
            raise ValueError(f"VaswaniConfig: init_std={self.init_std} must be positive (or None for d_model**-0.5)")
        if self.sdpa_backends is not None:
            unknown = [name for name in self.sdpa_backends if name not in SDPA_BACKEND_NAMES]
            if unknown or not self.sdpa_backends:
                raise ValueError(
                    f"VaswaniConfig: sdpa_backends={self.sdpa_backends!r} must be a non-empty list of "
                    f"{', '.join(SDPA_BACKEND_NAMES)} (or None for PyTorch's own choice)"
                )
        # Imported lazily: the activation table is only needed for this check.
        from transformers.activations import ACT2FN

        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"VaswaniConfig: activation_function={self.activation_function!r} is not one of {sorted(ACT2FN)}"
            )
        special = {"pad_token_id": pad_token_id, "bos_token_id": bos_token_id}
        special["decoder_start_token_id"] = decoder_start_token_id
        for name, value in special.items():
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"VaswaniConfig: {name}={value} must be in [0, vocab_size={self.vocab_size})")
        eos_ids = eos_token_id if isinstance(eos_token_id, list) else [eos_token_id]
        for value in eos_ids:
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"VaswaniConfig: eos_token_id={value} must be in [0, vocab_size={self.vocab_size})")


__all__ = ["VaswaniConfig"]
