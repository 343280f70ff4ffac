"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), as a Hugging Face seq2seq model.

The model in one file, in the order of the paper. Besides torch, transformers and the standard library it imports
five sibling files, each of which `save_pretrained` copies into the folder with this one (transformers copies a
model file's relative imports), so that the folder loads with `trust_remote_code=True` on a machine that never
installed hf_vaswani:

- configuration_vaswani.py: `VaswaniConfig`, the only channel for hyperparameters;
- generation_vaswani.py: the paper's decoding (§6.1), mixed into `VaswaniForConditionalGeneration.generate`;
- compat_vaswani.py: the transformers internals whose form changed across 5.x (masks, output capture, attention
  lookup, the cache's name), so this file reads the same on every supported release;
- pipeline_vaswani.py and row_dropping_vaswani.py: imported only so that they travel with the model (the reasons
  are at their imports below).

Where this code differs from the paper or from `modeling_marian.py`, a comment says so at that line.
"""

import contextlib
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging
from transformers.utils.generic import can_return_tuple

from .compat_vaswani import (
    OutputRecorder,
    accepts_past_key_values,
    cache_field,
    capture_outputs,
    create_bidirectional_mask,
    create_causal_mask,
    get_attention_interface,
    merge_with_config_defaults,
    output_cache,
)
from .configuration_vaswani import VaswaniConfig
from .generation_vaswani import VaswaniGenerationMixin, set_paper_decoding

# Imported so that every save_pretrained copies the translation pipeline's code with the model's: a folder whose
# config.json names it in custom_pipelines (written by the pipeline's save) stays loadable after a plain re-save.
from .pipeline_vaswani import VaswaniTranslationPipeline  # noqa: F401

# Imported so that trust_remote_code loading on transformers 5.0 copies it: loading a local folder, that release copies
# only this file's own relative imports into its module cache, not generation_vaswani.py's (5.17 copies all of them).
from .row_dropping_vaswani import PerSourceStoppingCriteria  # noqa: F401

logger = logging.get_logger(__name__)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: the start token followed by the labels without their last token.

    Ignored label positions (-100) become padding, which the causal self-attention never lets a real position see.
    """
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError("VaswaniConfig: pad_token_id and decoder_start_token_id must be set to shift labels")
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


# ---------------------------------------------------------------------------------------------------------------------
# §3.4 Embeddings
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniScaledWordEmbedding(nn.Embedding):
    """Token embeddings multiplied by sqrt(d_model) (§3.4), the scale inside the module as in BART.

    So `model(inputs_embeds=model.get_input_embeddings()(ids))` equals `model(input_ids=ids)`. The matrix is still
    the one `weight` parameter shared with the other embedding and the pre-softmax projection.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.embed_scale


def _embed_scale(config: VaswaniConfig) -> float:
    return math.sqrt(config.d_model) if config.scale_embedding else 1.0


# ---------------------------------------------------------------------------------------------------------------------
# §3.5 Positional encoding
# ---------------------------------------------------------------------------------------------------------------------


def sinusoidal_position_encoding(position_ids: torch.Tensor, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), §3.5.

    Sines and cosines are interleaved as the formula writes them; Marian and fairseq put all sines first and all
    cosines second, which is a permutation of the channels and so not interchangeable with trained weights.
    Computed in float32 from the positions, so nothing is stored, trained, or left uninitialised when
    `from_pretrained` builds the model on the meta device.
    """
    exponents = torch.arange(0, d_model, 2, dtype=torch.float32, device=position_ids.device) / d_model
    inverse_frequencies = torch.pow(10000.0, -exponents)  # (d_model/2,)
    angles = position_ids.to(torch.float32)[..., None] * inverse_frequencies  # (..., d_model/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., d_model): sin, cos, sin, cos, ...


class VaswaniSinusoidalPositionalEmbedding(nn.Module):
    """The fixed positional encodings of §3.5; no parameters."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.d_model = config.d_model
        self.max_positions = config.max_position_embeddings

    def forward(self, position_ids: torch.Tensor, past_length: int = 0) -> torch.Tensor:
        # Longer inputs are allowed: the formula is defined for every position (§3.5 hopes it extrapolates).
        # `past_length`: positions already in the decoder's cache, so that step-by-step decoding warns too.
        if not torch.compiler.is_compiling() and past_length + position_ids.shape[-1] > self.max_positions:
            logger.warning_once(
                f"Input longer than max_position_embeddings={self.max_positions}: the sinusoidal encodings are "
                "still defined there, but the model never saw such positions in training."
            )
        return sinusoidal_position_encoding(position_ids, self.d_model)


# ---------------------------------------------------------------------------------------------------------------------
# §3.2 Attention
# ---------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention(Q, K, V) = softmax(QK^T / sqrt(d_k)) V, §3.2.1 (equation 1)."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, nh, T_q, T_k)
    if attention_mask is not None:
        # The mask helpers fill masked places with the dtype's minimum, never -inf: a fully masked row
        # becomes a uniform distribution instead of NaN.
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)  # (B, nh, T_q, hs)
    attn_output = attn_output.transpose(1, 2).contiguous()  # (B, T_q, nh, hs)
    return attn_output, attn_weights


# The config's names of PyTorch's scaled-dot-product backends (VaswaniConfig.sdpa_backends), torch's own spelling.
SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
# The device types on which `sdpa_backends` is applied. Not the CPU: there the choice is PyTorch's own, as before.
SDPA_BACKEND_DEVICES = ("cuda",)


def sdpa_backends_for(config: VaswaniConfig, device: torch.device) -> list[SDPBackend] | None:
    """The backends `scaled_dot_product_attention` may use for this model on `device`, or None for PyTorch's choice.

    Not in Marian. On Hopper GPUs PyTorch prefers cuDNN attention, which builds an execution plan for every new
    (batch, length) shape: with token batching nearly every step is a new shape, and with beam search dropping rows
    nearly every decoder step. The default, `config.sdpa_backends = ["flash", "mem_efficient", "math"]`, leaves it
    out; PyTorch then runs flash attention where no mask is passed (decoder self-attention) and memory-efficient
    attention where a padding mask is (encoder self-attention, encoder-decoder attention). None gives cuDNN back.
    """
    names = getattr(config, "sdpa_backends", None)
    if names is None or config._attn_implementation != "sdpa" or device.type not in SDPA_BACKEND_DEVICES:
        return None
    return [SDPA_BACKENDS[name] for name in names]


def sdpa_backends_context(config: VaswaniConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """`torch.nn.attention.sdpa_kernel` with `sdpa_backends_for(config, device)`; no context at all where that is
    None (the CPU). torch.compile traces the context manager into the graph (dynamo's SDPAKernelVariable)."""
    backends = sdpa_backends_for(config, device)
    return contextlib.nullcontext() if backends is None else sdpa_kernel(backends)


class VaswaniAttention(nn.Module):
    """Multi-head attention, §3.2.2: one class for encoder self-attention, masked decoder self-attention and
    encoder-decoder attention (queries from the decoder, keys and values from the encoder output, §3.2.3)."""

    def __init__(self, config: VaswaniConfig, num_heads: int, is_causal: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads  # d_k = d_v = d_model / h
        self.scaling = self.head_dim**-0.5  # the 1 / sqrt(d_k) of equation 1
        self.attention_dropout = config.attention_dropout
        # Read by the sdpa/flash integrations when no mask is given: must be False for encoder and cross-attention.
        self.is_causal = is_causal
        self.layer_idx = layer_idx

        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        batch_size, query_length = hidden_states.shape[:2]

        query_states = self.q_proj(hidden_states)
        query_states = query_states.view(batch_size, query_length, -1, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)

        layer_cache = None
        if cache is not None:
            if isinstance(cache, EncoderDecoderCache):
                layer_cache = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache
            else:
                layer_cache = cache

        if is_cross_attention and layer_cache is not None and cache.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys and values are projected once per source.
            key_states = layer_cache.layers[self.layer_idx].keys
            value_states = layer_cache.layers[self.layer_idx].values
        else:
            source_states = key_value_states if is_cross_attention else hidden_states
            source_length = source_states.shape[1]
            key_states = self.k_proj(source_states).view(batch_size, source_length, -1, self.head_dim).transpose(1, 2)
            value_states = self.v_proj(source_states).view(batch_size, source_length, -1, self.head_dim).transpose(1, 2)
            if layer_cache is not None:
                key_states, value_states = layer_cache.update(key_states, value_states, self.layer_idx)
                if is_cross_attention:
                    cache.is_updated[self.layer_idx] = True

        attention_interface: Callable = get_attention_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        with sdpa_backends_context(self.config, query_states.device):  # no cuDNN attention on a GPU, see above
            attn_output, attn_weights = attention_interface(
                self,
                query_states,
                key_states,
                value_states,
                attention_mask,
                dropout=self.attention_dropout if self.training else 0.0,
                scaling=self.scaling,
                **kwargs,
            )
        # Concat(head_1, ..., head_h) W^O
        attn_output = attn_output.reshape(batch_size, query_length, -1).contiguous()  # (B, T, d_model)
        attn_output = self.out_proj(attn_output)
        return attn_output, attn_weights


# ---------------------------------------------------------------------------------------------------------------------
# §3.3 Position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (equation 2), applied to each position separately."""

    def __init__(self, config: VaswaniConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        # Not in the paper (0 by default): dropout on the inner activations, as tensor2tensor allowed.
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


# ---------------------------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder layers
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniEncoderLayer(GradientCheckpointingLayer):
    """Self-attention, then feed-forward; each sub-layer wrapped as LayerNorm(x + Dropout(Sublayer(x))), §3.1/§5.4."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        self.dropout = config.dropout
        self.normalize_before = config.normalize_before
        self.self_attn = VaswaniAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> torch.Tensor:
        # --- sub-layer 1: multi-head self-attention ---
        residual = hidden_states
        if self.normalize_before:  # pre-LN option, not the paper
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)  # LayerNorm(x + Sublayer(x)), §3.1

        # --- sub-layer 2: position-wise feed-forward ---
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


class VaswaniDecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, encoder-decoder attention, feed-forward; each post-LN as in the encoder, §3.1."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        self.dropout = config.dropout
        self.normalize_before = config.normalize_before
        self.self_attn = VaswaniAttention(config, config.decoder_attention_heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VaswaniAttention(config, config.decoder_attention_heads, layer_idx=layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = VaswaniFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        # --- sub-layer 1: masked multi-head self-attention (position i sees positions <= i, §3.2.3) ---
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask, cache=cache, **kwargs)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.normalize_before:
            hidden_states = self.self_attn_layer_norm(hidden_states)

        # --- sub-layer 2: encoder-decoder attention, queries from the decoder, keys/values from the encoder ---
        # Skipped when the decoder runs on its own (as in Marian): without encoder states there is nothing to attend
        # to, and VaswaniAttention would otherwise become a second, unmasked self-attention writing the self cache.
        if encoder_hidden_states is not None:
            residual = hidden_states
            if self.normalize_before:
                hidden_states = self.encoder_attn_layer_norm(hidden_states)
            hidden_states, _ = self.encoder_attn(
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
            hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
            hidden_states = residual + hidden_states
            if not self.normalize_before:
                hidden_states = self.encoder_attn_layer_norm(hidden_states)

        # --- sub-layer 3: position-wise feed-forward ---
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.normalize_before:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states


# ---------------------------------------------------------------------------------------------------------------------
# Pretrained base: initialisation and capabilities
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniPreTrainedModel(PreTrainedModel):
    config: VaswaniConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniEncoderLayer", "VaswaniDecoderLayer"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers guesses this by finding the text "ALL_ATTENTION_FUNCTIONS.get_interface(" in the model's source
        # file; here that call sits in compat_vaswani.get_attention_interface. VaswaniAttention looks the
        # implementation up in the config on every forward, so `set_attn_implementation` after loading takes effect.
        return True

    def save_pretrained(self, save_directory, *args, **kwargs):
        # The stock code maps only the saved class in auto_map; map both, so a folder written by the generation
        # model also loads as the base model with AutoModel.from_pretrained(..., trust_remote_code=True).
        if self._auto_class is not None:
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            auto_map.setdefault("AutoModel", "modeling_vaswani.VaswaniModel")
            auto_map.setdefault("AutoModelForSeq2SeqLM", "modeling_vaswani.VaswaniForConditionalGeneration")
            self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except Exception as error:
            # safetensors' SafetensorError ("Error while deserializing header: ...") names no file. Matched by
            # name, because this file imports only torch and transformers.
            if type(error).__name__ != "SafetensorError":
                raise
            raise OSError(
                f"The weights in {pretrained_model_name_or_path} (model.safetensors or its shards) are truncated or "
                f"corrupted: {error}. Download or save them again."
            ) from error
        # transformers 5.3.0 counts the tied aliases absent from the file as present, does not tie them and leaves
        # them on the meta device (the first forward fails); tying again fixes it (scripts/check_transformers_versions.py).
        loaded = model[0] if isinstance(model, tuple) else model  # (model, loading_info) with output_loading_info
        if loaded.config.tie_word_embeddings and any(parameter.is_meta for parameter in loaded.parameters()):
            loaded.tie_weights()
        return model

    def _check_input_ids(self, input_ids: torch.Tensor) -> None:
        """A ValueError naming the id, instead of an IndexError from inside nn.Embedding."""
        # One min/max reduction and one host sync per forward; skipped where it would break a traced graph.
        if input_ids.numel() == 0 or torch.jit.is_tracing() or torch.compiler.is_compiling():
            return
        if input_ids.device.type != "cpu":  # on an accelerator: checked there, without stopping the host for it
            in_range = (input_ids >= 0).all() & (input_ids < self.config.vocab_size).all()
            torch._assert_async(in_range, "input_ids outside [0, vocab_size): the tokenizer does not match the model")
            return
        low, high = torch.stack(torch.aminmax(input_ids)).tolist()
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"{type(self).__name__}: input_ids contain {low if low < 0 else high}, outside [0, vocab_size="
                f"{self.config.vocab_size}): the tokenizer does not match the model (or -100 labels were passed "
                "as ids)"
            )

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The paper does not state its initialisation; its code (tensor2tensor, transformer_base) used:

        - every projection: Glorot/Xavier uniform ("uniform_unit_scaling" with gain 1, fan_avg), zero biases;
        - the shared embedding: N(0, d_model^-0.5), so that after the sqrt(d_model) scaling of §3.4 the token
          embeddings have unit variance, the same scale as the positional encodings;
        - LayerNorm: gain 1, bias 0.
        """
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)


# ---------------------------------------------------------------------------------------------------------------------
# §3.1 The encoder and decoder stacks
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniEncoder(VaswaniPreTrainedModel):
    """N identical layers over embedded source tokens plus positional encodings."""

    _can_record_outputs = {"hidden_states": VaswaniEncoderLayer, "attentions": VaswaniAttention}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.dropout = config.dropout
        # The same matrix as VaswaniModel.shared once tied; the sqrt(d_model) scale (§3.4) is inside the module.
        self.embed_tokens = VaswaniScaledWordEmbedding(config.vocab_size, config.d_model, _embed_scale(config))
        self.embed_positions = VaswaniSinusoidalPositionalEmbedding(config)
        self.layers = nn.ModuleList([VaswaniEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)])
        # Pre-LN leaves the last residual stream un-normalised, so it needs a final LayerNorm; post-LN does not.
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.gradient_checkpointing = False
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("VaswaniEncoder: give exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            self._check_input_ids(input_ids)
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, source_length = inputs_embeds.shape[:2]

        # Positions count real tokens only, so a left-padded sentence gets the same encodings as unpadded.
        if attention_mask is not None and attention_mask.dim() == 2:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        else:
            position_ids = torch.arange(source_length, device=inputs_embeds.device).expand(batch_size, -1)
        positions = self.embed_positions(position_ids).to(inputs_embeds.dtype)

        # §5.4: dropout on the sums of the embeddings and the positional encodings.
        hidden_states = nn.functional.dropout(inputs_embeds + positions, p=self.dropout, training=self.training)

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniPreTrainedModel):
    """N identical layers over the shifted target, attending to the encoder output."""

    _can_record_outputs = {
        "hidden_states": VaswaniDecoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.dropout = config.dropout
        # The same matrix as VaswaniModel.shared once tied; the sqrt(d_model) scale (§3.4) is inside the module.
        self.embed_tokens = VaswaniScaledWordEmbedding(config.vocab_size, config.d_model, _embed_scale(config))
        self.embed_positions = VaswaniSinusoidalPositionalEmbedding(config)
        self.layers = nn.ModuleList([VaswaniDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.gradient_checkpointing = False
        self.post_init()

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("VaswaniDecoder: give exactly one of input_ids or inputs_embeds")
        # One-token steps on a cache the caller passed are generate() feeding back the model's own argmax/samples:
        # checking their ids would only add a host sync per generated token. Decided on shapes and on whether a cache
        # was given, never on the cache length (a tensor for a static cache, which a compiled graph cannot branch on).
        check_ids = cache is None or (input_ids is not None and input_ids.shape[-1] > 1)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        # An int for a dynamic cache, a tensor for a static one: used only in arithmetic, never in a Python `if`.
        past_length = cache.get_seq_length() if cache is not None else 0

        if inputs_embeds is None:
            if check_ids:
                self._check_input_ids(input_ids)
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, target_length = inputs_embeds.shape[:2]

        # A step of incremental decoding continues the positions where the cache stops.
        position_ids = torch.arange(target_length, device=inputs_embeds.device) + past_length
        positions = self.embed_positions(position_ids.expand(batch_size, -1), past_length=past_length)
        positions = positions.to(inputs_embeds.dtype)
        hidden_states = nn.functional.dropout(inputs_embeds + positions, p=self.dropout, training=self.training)

        self_attention_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        causal_mask = create_causal_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, cache=self_attention_cache
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, so gradient checkpointing passes it through
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **cache_field(cache))


# ---------------------------------------------------------------------------------------------------------------------
# The encoder-decoder (§3, Figure 1)
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniModel(VaswaniPreTrainedModel):
    """Encoder and decoder sharing one token embedding matrix (§3.4); returns decoder hidden states."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.shared = VaswaniScaledWordEmbedding(config.vocab_size, config.d_model, _embed_scale(config))
        self.encoder = VaswaniEncoder(config)
        self.decoder = VaswaniDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    # return_dict=False: the decorator takes it out of kwargs and turns the result into a tuple at the end, so the
    # encoder and decoder below always return their output classes (as in Marian).
    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            # return_dict=True: the config's return_dict=False must not turn the inner outputs into tuples.
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **kwargs,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **cache_field(output_cache(decoder_outputs)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, VaswaniGenerationMixin):
    """The Transformer with its pre-softmax linear transformation, which shares the embedding matrix (§3.4)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.model = VaswaniModel(config)
        # No output bias: the paper's softmax layer is the transposed embedding matrix alone (§3.4).
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        # The paper's decoding (§6.1, PAPER_DECODING) unless a saved generation_config.json says otherwise: beam 4,
        # GNMT length penalty 0.6, outputs at most 50 tokens longer than their source. Greedy: generate(num_beams=1).
        set_paper_decoding(self.generation_config)
        # Greedy and beam search stop computing rows that have finished (_sample, _beam_search); False: the stock loops.
        self.generation_config.drop_finished_rows = True
        # ... shrinking the batch only to powers of two ("auto": on a GPU, where each new batch size is a new shape).
        self.generation_config.row_buckets = "auto"
        # Not derived from the model config any more: without this, loading the saved file drops the two entries.
        self.generation_config._from_model_config = False

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def get_encoder(self) -> VaswaniEncoder:
        return self.model.encoder

    def get_decoder(self) -> VaswaniDecoder:
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        label_smoothing: float = 0.0,
        num_items_in_batch: int | torch.Tensor | None = None,
        loss_only: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        labels: target token ids, -100 where no loss is wanted. When given without `decoder_input_ids`, the
            decoder inputs are the labels shifted right behind `decoder_start_token_id` (teacher forcing).
        label_smoothing: epsilon_ls of §5.4 (the paper trains with 0.1). Spread over all classes, as in
            `torch.nn.functional.cross_entropy`.
        num_items_in_batch: the number of label tokens in the whole (accumulated, all-process) batch, passed by
            the Trainer; the loss is then sum / num_items_in_batch so gradient accumulation is exact.
        loss_only: the training shortcut: apply the output layer only where labels != -100 and return the loss with
            `logits=None`. Logits of padding positions are never scored, so computing them (a matmul with the whole
            vocabulary and its softmax, forward and backward) is wasted; a training step needs only the loss.
            Needs `labels`.
        """
        if loss_only and labels is None:
            raise ValueError("VaswaniForConditionalGeneration: loss_only=True needs labels (it returns only the loss)")
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        # Under torch.compile every position is scored instead (ignore_index skips the padding): N changes every
        # batch, and selecting it is a data-dependent shape, a graph break and a recompile per N with dynamic=False.
        if loss_only and not torch.compiler.is_compiling():
            # Not in Marian: the pre-softmax linear transformation only at the N positions that have a label.
            labels = labels.to(hidden_states.device)
            is_labelled = labels != -100
            logits = self.lm_head(hidden_states[is_labelled])  # (N, vocab)
            labels = labels[is_labelled]  # (N,)
        else:
            logits = self.lm_head(hidden_states)  # (B, T, vocab)

        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits.flatten(0, -2).float(),
                labels.flatten().to(logits.device),
                ignore_index=-100,
                reduction="sum",
                label_smoothing=label_smoothing,
            )
            if num_items_in_batch is None:
                num_items_in_batch = (labels != -100).sum()
            if isinstance(num_items_in_batch, torch.Tensor):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch

        return Seq2SeqLMOutput(
            loss=loss,
            logits=None if loss_only else logits,
            **cache_field(output_cache(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "VaswaniForConditionalGeneration",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "sinusoidal_position_encoding",
]
