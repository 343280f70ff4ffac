"""The few transformers internals whose form changed across the 5.x releases this model supports.

Each name here is the newest release's, adapted once at import to the installed release (checked by feature, not by
version number), so that `modeling_vaswani.py` reads like a model written for the newest release. A sibling of the
modeling file (`from .compat_vaswani import ...`), so `save_pretrained` copies it with the model's code.
"""

import functools
import inspect
import warnings

import torch
from transformers import masking_utils
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

try:
    from transformers.utils.generic import merge_with_config_defaults
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # transformers 5.0 and 5.1: one decorator did both (config defaults, recorded outputs)
    from transformers.utils.generic import OutputRecorder
    from transformers.utils.generic import check_model_inputs as capture_outputs

    def merge_with_config_defaults(func):
        return func


# The KV cache's name in forward() arguments, model outputs and generate()'s model kwargs: `cache` from 5.24 on, which
# renamed it; `past_key_values` before. A model that takes only the old name loses its cache on 5.24 without an error
# (generate() passes `cache=`, which **kwargs swallows), so the model code uses the new name and takes both.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def accepts_past_key_values(forward):
    """`forward(..., cache=...)` that also takes the cache as `past_key_values=`: the name generate() passes before
    5.24, and the one code written for those releases uses. Where the installed release has renamed it, the old name
    warns as transformers' own models do (FutureWarning); before, it is the release's own name and stays quiet."""

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        if "past_key_values" in kwargs:
            past_key_values = kwargs.pop("past_key_values")
            if kwargs.get("cache") is not None and past_key_values is not None:
                raise ValueError("give the KV cache once: as cache= (past_key_values= is its name before 5.24)")
            if CACHE_NAME == "cache":
                warnings.warn(
                    "`past_key_values` is deprecated since transformers 5.24: pass the KV cache as `cache`",
                    FutureWarning,
                    stacklevel=2,
                )
            if past_key_values is not None:
                kwargs["cache"] = past_key_values
        return forward(*args, **kwargs)

    return wrapper


def cache_field(cache) -> dict:
    """The keyword under which the installed release's model outputs hold the cache: `Seq2SeqLMOutput(**cache_field(c))`."""
    return {CACHE_NAME: cache}


def output_cache(outputs):
    """The cache a model output holds, read under the installed release's name (no deprecation warning on 5.24)."""
    return getattr(outputs, CACHE_NAME)


_CAUSAL_PARAMETERS = inspect.signature(masking_utils.create_causal_mask).parameters
_BIDIRECTIONAL_PARAMETERS = inspect.signature(masking_utils.create_bidirectional_mask).parameters
# 5.0 and 5.1 spell the embeddings argument `input_embeds`.
_CAUSAL_EMBEDS = "inputs_embeds" if "inputs_embeds" in _CAUSAL_PARAMETERS else "input_embeds"
_BIDIRECTIONAL_EMBEDS = "inputs_embeds" if "inputs_embeds" in _BIDIRECTIONAL_PARAMETERS else "input_embeds"
# Releases before the cache knew its own positions need the positions of the new tokens (required up to 5.1).
_CAUSAL_NEEDS_POSITIONS = (
    "cache_position" in _CAUSAL_PARAMETERS and _CAUSAL_PARAMETERS["cache_position"].default is inspect.Parameter.empty
)


# 5.24 renamed its cache argument (see CACHE_NAME).
_CAUSAL_CACHE = "cache" if "cache" in _CAUSAL_PARAMETERS else "past_key_values"


def create_causal_mask(config, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None, cache):
    """`masking_utils.create_causal_mask` of the newest release, on the installed one."""
    kwargs = {_CAUSAL_EMBEDS: inputs_embeds, _CAUSAL_CACHE: cache}
    if _CAUSAL_NEEDS_POSITIONS:
        past_length = cache.get_seq_length() if cache is not None else 0
        kwargs["cache_position"] = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_length
    return masking_utils.create_causal_mask(config=config, attention_mask=attention_mask, **kwargs)


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
    "CACHE_NAME",
    "OutputRecorder",
    "accepts_past_key_values",
    "cache_field",
    "capture_outputs",
    "create_bidirectional_mask",
    "create_causal_mask",
    "get_attention_interface",
    "merge_with_config_defaults",
    "output_cache",
]
