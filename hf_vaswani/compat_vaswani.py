"""The few transformers internals whose form changed across the 5.x releases this model supports.

Each name here is the newest release's, adapted once at import to the installed release (checked by feature, not by
version number), so that `modeling_vaswani.py` reads like a model written for the newest release. A sibling of the
modeling file (`from .compat_vaswani import ...`), so `save_pretrained` copies it with the model's code.
"""

import inspect

import torch
from transformers import masking_utils
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

try:
    from transformers.utils.generic import merge_with_config_defaults
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # transformers 5.0 and 5.1: one decorator did both (config defaults, recorded outputs)
    from transformers.utils.generic import OutputRecorder
    from transformers.utils.generic import check_model_inputs as capture_outputs

    def merge_with_config_defaults(func):
        return func


_CAUSAL_PARAMETERS = inspect.signature(masking_utils.create_causal_mask).parameters
_BIDIRECTIONAL_PARAMETERS = inspect.signature(masking_utils.create_bidirectional_mask).parameters
# 5.0 and 5.1 spell the embeddings argument `input_embeds`.
_CAUSAL_EMBEDS = "inputs_embeds" if "inputs_embeds" in _CAUSAL_PARAMETERS else "input_embeds"
_BIDIRECTIONAL_EMBEDS = "inputs_embeds" if "inputs_embeds" in _BIDIRECTIONAL_PARAMETERS else "input_embeds"
# Releases before the cache knew its own positions need the positions of the new tokens (required up to 5.1).
_CAUSAL_NEEDS_POSITIONS = (
    "cache_position" in _CAUSAL_PARAMETERS and _CAUSAL_PARAMETERS["cache_position"].default is inspect.Parameter.empty
)


def create_causal_mask(config, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None, past_key_values):
    """`masking_utils.create_causal_mask` of the newest release, on the installed one."""
    kwargs = {_CAUSAL_EMBEDS: inputs_embeds}
    if _CAUSAL_NEEDS_POSITIONS:
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        kwargs["cache_position"] = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_length
    return masking_utils.create_causal_mask(
        config=config, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
    )


def create_bidirectional_mask(
    config,
    inputs_embeds: torch.Tensor,
    attention_mask: torch.Tensor | None,
    encoder_hidden_states: torch.Tensor | None = None,
):
    """`masking_utils.create_bidirectional_mask` of the newest release, on the installed one."""
    kwargs = {_BIDIRECTIONAL_EMBEDS: inputs_embeds}
    if encoder_hidden_states is not None:
        kwargs["encoder_hidden_states"] = encoder_hidden_states
    return masking_utils.create_bidirectional_mask(config=config, attention_mask=attention_mask, **kwargs)


def get_attention_interface(attn_implementation: str | None, default):
    """`ALL_ATTENTION_FUNCTIONS.get_interface` of the newest release (5.0 and 5.1 have only the mapping)."""
    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        return ALL_ATTENTION_FUNCTIONS.get_interface(attn_implementation, default)
    if attn_implementation in (None, "eager"):
        return default
    return ALL_ATTENTION_FUNCTIONS[attn_implementation]


__all__ = [
    "OutputRecorder",
    "capture_outputs",
    "create_bidirectional_mask",
    "create_causal_mask",
    "get_attention_interface",
    "merge_with_config_defaults",
]
