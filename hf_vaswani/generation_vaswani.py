"""Decoding for the Transformer of "Attention Is All You Need" (Vaswani et al., 2017): `VaswaniGenerationMixin`.

The paper decodes with beam search (beam 4), the GNMT length penalty (alpha 0.6) and a maximum output length of
input length + 50 (§6.1). Hugging Face's `GenerationMixin` has no GNMT penalty and no per-row length limit; this
mixin adds both, and lets greedy and beam search stop computing rows that have finished. It imports only torch,
transformers and its sibling `compat_vaswani.py`, and `modeling_vaswani.py` imports it as a sibling
(`from .generation_vaswani import ...`), which is what makes `save_pretrained` copy it with the model's code.
"""

import copy
import functools
import inspect
from types import MappingProxyType

import torch
import transformers
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, logits_process
from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
    MaxTimeCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
)
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging

from .compat_vaswani import CACHE_NAME, output_cache

logger = logging.get_logger(__name__)

# §6.1: "we used beam search with a beam size of 4 and length penalty alpha = 0.6 [...] We set the maximum output
# length during inference to input length + 50, but terminate early when possible." The one definition of the
# paper's decoding: the model's default generation config and the training recipe both read it.
# early_stopping="never" is Hugging Face's form of "terminate early when possible": a source's search ends once no
# running beam can still beat its finished hypotheses under the length penalty. The paper's code (tensor2tensor's
# beam search, stop_early=True) ends it once the best running beam, scored at the maximum length, cannot beat the
# best finished hypothesis; the row-dropping loop ends sources by that rule (`_returned_hypotheses_can_change`).
PAPER_DECODING = MappingProxyType(
    {
        "num_beams": 4,
        "length_penalty": 0.6,
        "length_penalty_type": "gnmt",
        "max_length_offset": 50,
        "early_stopping": "never",
    }
)


def set_paper_decoding(generation_config: GenerationConfig, **overrides) -> GenerationConfig:
    """Write the paper's decoding (`PAPER_DECODING`, then `overrides`) into `generation_config`; returns it.

    Set attribute by attribute: `length_penalty_type` and `max_length_offset` are this model's entries, which
    `GenerationConfig.update` would not take. With `num_beams=1` (greedy) the beam-search-only entries
    (`length_penalty`, `early_stopping`) are left unset, as transformers refuses to save a greedy config holding them.
    """
    settings = {**PAPER_DECODING, **overrides}
    if settings["num_beams"] == 1:
        settings.update(length_penalty=None, early_stopping=None)
    for name, value in settings.items():
        setattr(generation_config, name, value)
    return generation_config


def gnmt_length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """The length penalty of Wu et al. (2016), used by the paper's beam search (§6.1, alpha = 0.6):

        score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha

    Hugging Face's `length_penalty` divides by |Y| ** alpha instead; `length_penalty_type="gnmt"` in the generation
    config selects this formula, with `length_penalty` as alpha.
    """
    return ((5.0 + length) / 6.0) ** float(alpha)


class _SourceLengthStoppingCriteria(StoppingCriteria):
    """Ends each row once it holds source length + offset generated tokens (§6.1: "input length + 50")."""

    def __init__(self, max_new_tokens_per_row: torch.Tensor, prompt_length: int = 1):
        self.max_new_tokens_per_row = max_new_tokens_per_row
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        # Beam search and num_return_sequences expand each source row into consecutive copies.
        copies = input_ids.shape[0] // self.max_new_tokens_per_row.shape[0]
        limits = self.max_new_tokens_per_row.to(input_ids.device).repeat_interleave(copies)
        return (input_ids.shape[1] - self.prompt_length) >= limits

    def select_sources(self, sources: torch.LongTensor) -> "_SourceLengthStoppingCriteria":
        """The criterion for the batch that keeps only `sources` (indices into this one's sources), in that order."""
        limits = self.max_new_tokens_per_row.to(sources.device)[sources]
        return _SourceLengthStoppingCriteria(limits, self.prompt_length)


# What greedy and beam search may hold while they drop finished rows: logits processors and stopping criteria that look at
# each row alone (a row's result depends only on its own tokens and the step), and the generate() inputs it compacts.
_ROW_WISE_LOGITS_PROCESSORS = (
    logits_process.MinLengthLogitsProcessor,
    logits_process.MinNewTokensLengthLogitsProcessor,
    logits_process.RepetitionPenaltyLogitsProcessor,
    logits_process.NoRepeatNGramLogitsProcessor,
    logits_process.SequenceBiasLogitsProcessor,  # NoBadWordsLogitsProcessor too
    logits_process.ForcedBOSTokenLogitsProcessor,
    logits_process.ForcedEOSTokenLogitsProcessor,
    logits_process.SuppressTokensLogitsProcessor,
    logits_process.SuppressTokensAtBeginLogitsProcessor,
    logits_process.InfNanRemoveLogitsProcessor,
    logits_process.ExponentialDecayLengthPenalty,
    logits_process.LogitNormalization,
)
_ROW_WISE_STOPPING_CRITERIA = (EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria, StopStringCriteria)
# The generate() inputs with one row per sequence, which `_select_model_kwargs_rows` compacts (besides the cache).
_PER_ROW_MASKS = ("attention_mask", "decoder_attention_mask")
_PER_ROW_INPUTS = (*_PER_ROW_MASKS, "encoder_outputs")
_ROW_DROPPING_MODEL_KWARGS = {
    "attention_mask",
    "decoder_attention_mask",
    "encoder_outputs",
    CACHE_NAME,  # generate()'s key for the cache: `cache` from transformers 5.24, `past_key_values` before
    "use_cache",
}

# The private GenerationMixin members that the row-dropping loops call (greedy: the first four; beam search: all),
# with the parameters they pass by name, as in transformers 5.18-5.23. Any private member can change in any release
# (5.0-5.2 had no `next_sequence_length`, 5.2-5.17 another `_get_top_k_continuations`): where one of them takes other
# parameters, that search runs the stock loop instead, which gives the same tokens without dropping finished rows.
_GREEDY_CALLS = {
    "_prefill": ("input_ids", "generation_config", "model_kwargs"),
    "_update_model_kwargs_for_generation": ("outputs", "model_kwargs", "is_encoder_decoder"),
    "prepare_inputs_for_generation": ("input_ids", "next_sequence_length"),
    "_valid_auto_compile_criteria": ("model_kwargs", "generation_config"),
}
_BEAM_SEARCH_CALLS = {
    **_GREEDY_CALLS,
    "_get_top_k_continuations": (
        "accumulated_log_probs",
        "running_sequences",
        "running_beam_indices",
        "cur_len",
        "decoder_prompt_len",
        "do_sample",
        "beams_to_keep",
        "num_beams",
        "batch_size",
    ),
    "_get_running_beams_for_next_iteration": (
        "topk_log_probs",
        "topk_running_sequences",
        "topk_running_beam_indices",
        "next_token_hits_stopping_criteria",
        "num_beams",
    ),
    "_update_finished_beams": (
        "sequences",
        "topk_running_sequences",
        "beam_scores",
        "topk_log_probs",
        "beam_indices",
        "topk_running_beam_indices",
        "is_early_stop_heuristic_unsatisfied",
        "is_sent_finished",
        "next_token_hits_stopping_criteria",
        "top_num_beam_mask",
        "num_beams",
        "cur_len",
        "decoder_prompt_len",
        "length_penalty",
        "early_stopping",
    ),
    "_check_early_stop_heuristic": (
        "is_early_stop_heuristic_unsatisfied",
        "running_beam_scores",
        "beam_scores",
        "is_sent_finished",
        "cur_len",
        "max_length",
        "decoder_prompt_len",
        "early_stopping",
        "length_penalty",
    ),
    "_beam_search_has_unfinished_sequences": (
        "is_early_stop_heuristic_unsatisfied",
        "is_sent_finished",
        "next_token_hits_stopping_criteria",
        "early_stopping",
    ),
}
# The two scoring hooks through which the stock beam search gets the GNMT length penalty (see their overrides):
# the parameters the overrides read (the others pass through). Unchanged from 5.0 to 5.23.
_GNMT_HOOK_CALLS = {
    "_update_finished_beams": ("topk_log_probs", "cur_len", "decoder_prompt_len", "length_penalty"),
    "_check_early_stop_heuristic": (
        "running_beam_scores",
        "cur_len",
        "max_length",
        "decoder_prompt_len",
        "early_stopping",
        "length_penalty",
    ),
}


def _signature_mismatch(calls: dict[str, tuple[str, ...]], complete: bool = True) -> str | None:
    """How the installed GenerationMixin differs from what `calls` passes (member: parameter names), or None.

    A member matches when it names every parameter passed (not merely absorbed by **kwargs) and, when the call is
    `complete` (it passes all it means to), requires no other.
    """
    for name, passed in calls.items():
        member = getattr(GenerationMixin, name, None)
        if member is None:
            return f"GenerationMixin.{name} does not exist"
        parameters = inspect.signature(member).parameters
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        named = {key for key, parameter in parameters.items() if parameter.kind not in variadic}
        missing = [key for key in passed if key not in named]
        required = [
            key
            for key, parameter in parameters.items()
            if complete
            and key != "self"
            and key not in passed
            and parameter.kind not in variadic
            and parameter.default is inspect.Parameter.empty
        ]
        if missing or required:
            wants = ", ".join([*(f"no {key}" for key in missing), *(f"also {key}" for key in required)])
            return f"GenerationMixin.{name} takes other parameters ({wants})"
    return None


_GREEDY_MISMATCH = _signature_mismatch(_GREEDY_CALLS)
_BEAM_SEARCH_MISMATCH = _signature_mismatch(_BEAM_SEARCH_CALLS)
_GNMT_HOOK_MISMATCH = _signature_mismatch(_GNMT_HOOK_CALLS, complete=False)


@functools.cache
def _log_loop(search: str, loop: str) -> None:
    """Once per process and loop: which loop a search runs (for version checks; see README)."""
    logger.debug(f"hf-vaswani generation: {search}: {loop} (transformers {transformers.__version__})")


class VaswaniGenerationConfig(GenerationConfig):
    """A `GenerationConfig` that tells the values it was given from global defaults that stock tools fill into it.

    `Seq2SeqTrainer.prediction_step` (transformers 5.23) runs `model.generation_config.update(**global_defaults,
    defaults_only=True)` after each generate(): max_length=20, top_k=50 and twenty more land in the model's own
    config, every later generate() warns that `max_new_tokens` (from `max_length_offset`) and `max_length` are both
    set, and `save_pretrained` writes them all to generation_config.json. Here such a fill is remembered: the values
    are there for whoever asked (the Trainer pads predictions to `max_length`), `to_dict()` (what is saved) leaves
    them out, and `VaswaniGenerationMixin.generate` unsets them first. Setting a value explicitly makes it kept.
    """

    def update(self, defaults_only: bool = False, allow_custom_entries: bool = False, **kwargs) -> dict:
        unset = {key for key in kwargs if defaults_only and hasattr(self, key) and getattr(self, key) is None}
        unused = super().update(defaults_only=defaults_only, allow_custom_entries=allow_custom_entries, **kwargs)
        if unset:
            self.__dict__.setdefault("_filled_defaults", set()).update(unset - unused.keys())
        return unused

    def __setattr__(self, name, value):
        filled = self.__dict__.get("_filled_defaults")
        if filled:
            filled.discard(name)
        super().__setattr__(name, value)

    def unset_filled_defaults(self) -> None:
        """Set the values that `update(..., defaults_only=True)` filled in back to None (unset)."""
        for key in self.__dict__.pop("_filled_defaults", ()):
            self.__dict__[key] = None

    def to_dict(self) -> dict:
        output = super().to_dict()
        for key in output.pop("_filled_defaults", ()):
            output.pop(key, None)
        return output


# The release's own default max_length (None on recent 5.x, 20 on older ones): a config holding it set no limit.
_DEFAULT_MAX_LENGTH = GenerationConfig().max_length


def _has_length_limit(config: GenerationConfig, kwargs: dict) -> bool:
    """Whether the caller set an output length: as generate() keywords, or in the generation config used."""
    if kwargs.get("max_new_tokens") is not None or kwargs.get("max_length") is not None:
        return True
    max_length = getattr(config, "max_length", None)
    return getattr(config, "max_new_tokens", None) is not None or max_length not in (None, _DEFAULT_MAX_LENGTH)


class VaswaniGenerationMixin(GenerationMixin):
    """`GenerationMixin` with the paper's decoding (§6.1): beam search with the GNMT length penalty and a maximum
    length of input length + 50, and greedy/beam loops that drop finished rows. Not in Marian.
    """

    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, stopping_criteria=None, **kwargs):
        """`GenerationMixin.generate` plus two generation-config entries for the paper's decoding (§6.1):

        - `length_penalty_type="gnmt"`: beam hypotheses are ranked by log P / ((5 + |Y|) / 6) ** length_penalty
          (Wu et al., 2016) instead of Hugging Face's log P / |Y| ** length_penalty.
        - `max_length_offset=k`: each output is at most (its source length in tokens) + k tokens long, and the
          batch stops at the longest source + k, unless `max_length`/`max_new_tokens` are set (as keywords
          or in the generation config used), which then bound the batch as usual.
        Both can be set in `generation_config.json` or passed as keyword arguments.
        """
        if type(self.generation_config) is GenerationConfig:
            # In place, so that whoever holds the object still holds the model's config (see VaswaniGenerationConfig).
            self.generation_config.__class__ = VaswaniGenerationConfig
        if isinstance(self.generation_config, VaswaniGenerationConfig):
            self.generation_config.unset_filled_defaults()
        config = generation_config if generation_config is not None else self.generation_config
        offset = kwargs.pop("max_length_offset", getattr(config, "max_length_offset", None))
        if offset is not None:
            source_lengths = self._source_lengths(inputs, kwargs)
            if source_lengths is not None:
                row_limits = source_lengths + int(offset)
                if not _has_length_limit(config, kwargs):
                    if generation_config is None:
                        kwargs["max_new_tokens"] = int(row_limits.max())
                    else:  # on a copy: the caller's object stays as given, and no kwargs join a passed config
                        generation_config = copy.deepcopy(generation_config)
                        generation_config.max_new_tokens = int(row_limits.max())
                criteria = StoppingCriteriaList([_SourceLengthStoppingCriteria(row_limits)])
                if stopping_criteria is not None:
                    criteria.extend(stopping_criteria)
                stopping_criteria = criteria
        return super().generate(inputs, generation_config, stopping_criteria=stopping_criteria, **kwargs)

    def _source_lengths(self, inputs: torch.Tensor | None, kwargs: dict) -> torch.Tensor | None:
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is not None:
            return attention_mask.sum(-1)
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is None:
            return None
        if self.config.pad_token_id is None:
            return torch.full(input_ids.shape[:1], input_ids.shape[1], device=input_ids.device)
        return (input_ids != self.config.pad_token_id).sum(-1)

    def _sample(
        self,
        input_ids: torch.LongTensor,
        logits_processor,
        stopping_criteria: StoppingCriteriaList,
        generation_config,
        synced_gpus: bool = False,
        streamer=None,
        **model_kwargs,
    ):
        """Greedy decoding that stops computing a row once it has finished. Not in Marian.

        The stock loop (`GenerationMixin._sample`) runs the decoder on every row of the batch until the last row
        ends, and pads the finished ones; on Multi30K batches of 64 only about a quarter of those decoder rows
        produce a token (benchmarks/README.md). Here, each step that finishes rows removes them from the batch:
        the caches, the encoder output and the masks keep only the rows still running, and the output is written
        into a padded (batch, length) tensor exactly as the stock loop returns it. Same tokens, less work.

        Used for greedy search when every logits processor and stopping criterion looks at each row alone and
        nothing per step is returned (scores, attentions, a streamer, the cache); otherwise, and with
        `drop_finished_rows=False`, the stock loop runs.
        """
        if not self._can_drop_finished_rows(
            logits_processor, stopping_criteria, generation_config, synced_gpus, streamer, model_kwargs
        ):
            search = "sampling" if generation_config.do_sample else "greedy"
            _log_loop(search, self._stock_loop_reason(_GREEDY_MISMATCH if search == "greedy" else None))
            return super()._sample(
                input_ids,
                logits_processor,
                stopping_criteria,
                generation_config,
                synced_gpus=synced_gpus,
                streamer=streamer,
                **model_kwargs,
            )

        _log_loop("greedy", "row-dropping loop")
        batch_size, prompt_length = input_ids.shape
        max_length = stopping_criteria.max_length
        pad_token_id = int(generation_config._pad_token_tensor)
        sequences = input_ids.new_full((batch_size, max_length), pad_token_id)  # every row; cut to length at the end
        sequences[:, :prompt_length] = input_ids
        rows = torch.arange(batch_size, device=input_ids.device)  # the rows of `sequences` still running
        criteria = stopping_criteria  # greedy search has one row per source (no num_return_sequences)

        outputs = self._prefill(input_ids, generation_config, model_kwargs)
        cur_len = prompt_length
        while True:
            model_kwargs = self._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=True)
            # No copy (the stock loop copies): nothing else holds `outputs`, and the processors return new tensors.
            next_token_logits = outputs.logits[:, -1].to(dtype=torch.float32, device=input_ids.device)
            del outputs
            # max(...).indices is argmax (both documented to return the first of tied maxima), faster on the CPU
            next_tokens = logits_processor(input_ids, next_token_logits).max(dim=-1).indices
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)  # (running rows, cur_len + 1)
            sequences[rows, cur_len] = next_tokens
            cur_len += 1

            finished = criteria(input_ids, None)
            num_finished = int(finished.sum())  # the one host-device synchronisation of a step, as in the stock loop
            if num_finished == finished.shape[0]:
                break
            if num_finished > 0:
                keep = (~finished).nonzero().squeeze(1)
                rows, input_ids = rows[keep], input_ids[keep]
                model_kwargs = self._select_model_kwargs_rows(model_kwargs, keep)
                criteria = self._select_stopping_criteria(criteria, keep)

            model_inputs = self.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
            outputs = self(**model_inputs, return_dict=True)
        return sequences[:, :cur_len]

    def _can_drop_finished_rows(
        self, logits_processor, stopping_criteria, generation_config, synced_gpus, streamer, model_kwargs
    ) -> bool:
        cache = model_kwargs.get(CACHE_NAME)
        return (
            (_BEAM_SEARCH_MISMATCH if generation_config.num_beams > 1 else _GREEDY_MISMATCH) is None
            and getattr(generation_config, "drop_finished_rows", True)
            and not generation_config.do_sample
            and not generation_config.return_dict_in_generate
            and not generation_config.is_assistant
            and not getattr(generation_config, "low_memory", False)  # the stock beam search rejects it
            and generation_config._pad_token_tensor is not None
            and not synced_gpus
            and streamer is None
            and model_kwargs.get("use_cache", True)
            and set(model_kwargs) <= _ROW_DROPPING_MODEL_KWARGS
            and isinstance(model_kwargs.get("encoder_outputs"), BaseModelOutput)
            and isinstance(cache, EncoderDecoderCache)
            and isinstance(cache.self_attention_cache, DynamicCache)
            and isinstance(cache.cross_attention_cache, DynamicCache)
            and not self._valid_auto_compile_criteria(model_kwargs, generation_config)
            and stopping_criteria.max_length is not None
            # Without an EOS criterion the stock loop keeps extending rows that other criteria finished.
            and any(isinstance(criterion, EosTokenCriteria) for criterion in stopping_criteria)
            and all(
                isinstance(criterion, (*_ROW_WISE_STOPPING_CRITERIA, _SourceLengthStoppingCriteria))
                for criterion in stopping_criteria
            )
            and all(isinstance(processor, _ROW_WISE_LOGITS_PROCESSORS) for processor in logits_processor)
        )

    @staticmethod
    def _stock_loop_reason(mismatch: str | None) -> str:
        if mismatch is not None:
            return f"stock loop, as {mismatch}"
        return "stock loop"

    @staticmethod
    def _select_stopping_criteria(stopping_criteria: StoppingCriteriaList, sources: torch.LongTensor):
        """The criteria for the batch that keeps only `sources`: the per-source length limits follow them."""
        return StoppingCriteriaList(
            criterion.select_sources(sources) if isinstance(criterion, _SourceLengthStoppingCriteria) else criterion
            for criterion in stopping_criteria
        )

    @staticmethod
    def _select_model_kwargs_rows(model_kwargs: dict, rows: torch.LongTensor) -> dict:
        """generate()'s per-row inputs, keeping only `rows` (in that order)."""
        selected = dict(model_kwargs)
        for key in _PER_ROW_MASKS:
            if selected.get(key) is not None:
                selected[key] = selected[key][rows]
        encoder_outputs = selected["encoder_outputs"]
        selected["encoder_outputs"] = type(encoder_outputs)(
            **{
                name: tuple(tensor[rows] for tensor in value) if isinstance(value, tuple) else value[rows]
                for name, value in encoder_outputs.items()
            }
        )
        selected[CACHE_NAME].batch_select_indices(rows)
        return selected

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's hook for keeping the cache rows of the surviving hypotheses (`GenerationMixin._beam_search`).

        Only the self-attention cache moves. The encoder-decoder keys and values of the beams of one source are
        copies of the same rows (generate() expands the encoder output per beam) and `beam_idx` only permutes
        beams within a source, so the stock reorder of that cache copies every row onto an identical one, each
        step: about a tenth of beam search's time on the CPU (benchmarks/README.md). Not in Marian.
        """
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache

    # Read by the two scoring hooks below: True while a beam search with length_penalty_type="gnmt" runs.
    _gnmt_length_penalty = False

    def _beam_search(
        self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, **model_kwargs
    ):
        """Beam search as `GenerationMixin._beam_search`, with the GNMT length penalty when asked for, and without
        computing the beams of sources whose search is over. Not in Marian.

        A source's search is over once the stock early-stopping test says none of its running beams can beat its
        finished hypotheses (or, with `early_stopping=True`, once it has `num_beams` of them): from then on the
        stock loop still runs its beams through the decoder each step but discards what they produce. Here its
        rows leave the batch (caches, encoder output, masks and the beam state are compacted) and its finished
        hypotheses are kept aside. Same outputs as the stock loop; under the same conditions as in `_sample`
        (plain beam search, nothing returned per step); otherwise, and with `drop_finished_rows=False`, the stock
        loop runs.
        """
        length_penalty_type = getattr(generation_config, "length_penalty_type", None)
        if length_penalty_type not in (None, "gnmt"):
            raise ValueError(
                f'generation config: length_penalty_type={length_penalty_type!r} is not known: use "gnmt" '
                "(log P / ((5 + |Y|) / 6) ** length_penalty) or None (Hugging Face's log P / |Y| ** length_penalty)"
            )
        if length_penalty_type == "gnmt" and _GNMT_HOOK_MISMATCH is not None:
            # Not Hugging Face's penalty in its place: that would rank hypotheses differently, silently.
            raise NotImplementedError(
                f"length_penalty_type='gnmt' needs transformers' beam-search scoring hooks as in 5.0-5.23, but in "
                f"transformers {transformers.__version__} {_GNMT_HOOK_MISMATCH}: install a supported release, or "
                "pass length_penalty_type=None for Hugging Face's length penalty"
            )
        self._gnmt_length_penalty = length_penalty_type == "gnmt"
        try:
            if self._can_drop_finished_rows(
                logits_processor, stopping_criteria, generation_config, synced_gpus, None, model_kwargs
            ):
                _log_loop("beam search", "row-dropping loop")
                return self._beam_search_dropping_finished_rows(
                    input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs
                )
            _log_loop("beam search", self._stock_loop_reason(_BEAM_SEARCH_MISMATCH))
            return super()._beam_search(
                input_ids,
                logits_processor,
                stopping_criteria,
                generation_config,
                synced_gpus=synced_gpus,
                **model_kwargs,
            )
        finally:
            del self._gnmt_length_penalty  # back to the class default

    def _beam_search_dropping_finished_rows(
        self, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs
    ):
        """`_beam_search` for the sources still searching only (see there)."""
        num_beams = generation_config.num_beams
        num_return_sequences = generation_config.num_return_sequences
        early_stopping = generation_config.early_stopping
        length_penalty = generation_config.length_penalty
        max_length = generation_config.max_length
        pad_token_id = generation_config._pad_token_tensor
        eos_token_id = generation_config._eos_token_tensor
        device = input_ids.device
        num_rows, prompt_length = input_ids.shape
        num_sources = num_rows // num_beams
        # As the stock loop: 2 candidates per beam (more with several EOS ids), the first num_beams of them may finish.
        beams_to_keep = max(2, 1 + eos_token_id.shape[0]) * num_beams
        top_num_beam_mask = torch.arange(beams_to_keep, device=device) < num_beams
        fill_value = pad_token_id if pad_token_id else eos_token_id[0]

        # The beam state of the sources still searching, (sources, beams, ...), in the stock loop's layout.
        running_sequences = torch.full((num_sources, num_beams, max_length), int(fill_value), device=device)
        running_sequences[:, :, :prompt_length] = input_ids.view(num_sources, num_beams, prompt_length)
        sequences = running_sequences.clone()
        running_beam_scores = torch.zeros((num_sources, num_beams), device=device)
        running_beam_scores[:, 1:] = -1.0e9
        beam_scores = torch.full((num_sources, num_beams), -1.0e9, device=device)
        is_sent_finished = torch.zeros((num_sources, num_beams), dtype=torch.bool, device=device)
        is_searching = torch.ones((num_sources, 1), dtype=torch.bool, device=device)
        running_beam_indices = torch.full(
            (num_sources, num_beams, max_length - prompt_length), -1, dtype=torch.int32, device=device
        )
        beam_indices = running_beam_indices.clone()
        sources = torch.arange(num_sources, device=device)  # which source each row of the state belongs to
        criteria = stopping_criteria
        # The returned hypotheses of every source and their generated lengths, filled in as sources finish.
        results = torch.full((num_sources, num_return_sequences, max_length), int(fill_value), device=device)
        result_lengths = torch.zeros((num_sources, num_return_sequences), dtype=torch.long, device=device)

        def set_aside(done: torch.Tensor) -> None:
            results[sources[done]] = sequences[done, :num_return_sequences]
            result_lengths[sources[done]] = (beam_indices[done, :num_return_sequences] != -1).sum(-1).long()

        # The first step on one beam per source: the beams of a source are still the same sequence (only the first
        # can be continued, the others score -1e9), so the decoder runs on the first and its cache (the encoder-decoder
        # keys and values included) and logits are copied to the others. The stock loop computes all num_beams.
        expanded_kwargs = model_kwargs
        first_beams = torch.arange(0, num_rows, num_beams, device=device)
        model_kwargs = self._select_model_kwargs_rows(model_kwargs, first_beams)
        outputs = self._prefill(input_ids[first_beams], generation_config, model_kwargs)
        output_cache(outputs).batch_repeat_interleave(num_beams)
        outputs.logits = outputs.logits.repeat_interleave(num_beams, dim=0)
        model_kwargs = {
            **model_kwargs,
            **{key: expanded_kwargs[key] for key in _PER_ROW_INPUTS if key in expanded_kwargs},
        }
        flat_running_sequences = input_ids
        cur_len = prompt_length
        while True:
            model_kwargs = self._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=True)
            # A view, not the stock loop's copy, and the beam scores added in place: two fewer (rows, vocab) buffers
            # a step; the same values.
            logits = outputs.logits[:, -1, :].to(dtype=torch.float32, device=device)
            del outputs
            log_probs = logits_processor(flat_running_sequences, nn.functional.log_softmax(logits, dim=-1))
            batch_size = sources.shape[0]
            # contiguous(): a processor may return a strided tensor (RepetitionPenaltyLogitsProcessor).
            log_probs = log_probs.contiguous().view(batch_size, num_beams, -1).add_(running_beam_scores[:, :, None])
            topk_log_probs, topk_running_sequences, topk_running_beam_indices = self._get_top_k_continuations(
                accumulated_log_probs=log_probs.view(batch_size, -1),
                running_sequences=running_sequences,
                running_beam_indices=running_beam_indices,
                cur_len=cur_len,
                decoder_prompt_len=prompt_length,
                do_sample=False,
                beams_to_keep=beams_to_keep,
                num_beams=num_beams,
                batch_size=batch_size,
            )
            hits_stopping_criteria = criteria(topk_running_sequences[:, :, : cur_len + 1].flatten(0, 1), None)
            hits_stopping_criteria = hits_stopping_criteria.view(batch_size, beams_to_keep)
            running_sequences, running_beam_scores, running_beam_indices = self._get_running_beams_for_next_iteration(
                topk_log_probs=topk_log_probs,
                topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=hits_stopping_criteria,
                num_beams=num_beams,
            )
            sequences, beam_scores, beam_indices, is_sent_finished = self._update_finished_beams(
                sequences=sequences,
                topk_running_sequences=topk_running_sequences,
                beam_scores=beam_scores,
                topk_log_probs=topk_log_probs,
                beam_indices=beam_indices,
                topk_running_beam_indices=topk_running_beam_indices,
                is_early_stop_heuristic_unsatisfied=is_searching,
                is_sent_finished=is_sent_finished,
                next_token_hits_stopping_criteria=hits_stopping_criteria,
                top_num_beam_mask=top_num_beam_mask,
                num_beams=num_beams,
                cur_len=cur_len,
                decoder_prompt_len=prompt_length,
                length_penalty=length_penalty,
                early_stopping=early_stopping,
            )
            beam_idx = running_beam_indices[..., cur_len - prompt_length].flatten()
            model_kwargs[CACHE_NAME] = self._reorder_cache(model_kwargs[CACHE_NAME], beam_idx)
            cur_len += 1
            is_searching = self._check_early_stop_heuristic(
                is_early_stop_heuristic_unsatisfied=is_searching,
                running_beam_scores=running_beam_scores,
                beam_scores=beam_scores,
                is_sent_finished=is_sent_finished,
                cur_len=cur_len,
                max_length=max_length,
                decoder_prompt_len=prompt_length,
                early_stopping=early_stopping,
                length_penalty=length_penalty,
            )
            if early_stopping == "never":
                is_searching &= self._returned_hypotheses_can_change(
                    running_beam_scores,
                    beam_scores,
                    is_sent_finished,
                    criteria,
                    generation_config,
                    cur_len,
                    prompt_length,
                )
            if not self._beam_search_has_unfinished_sequences(
                is_searching, is_sent_finished, hits_stopping_criteria, early_stopping
            ):
                break
            # The sources whose later candidates the stock loop would discard (see _update_finished_beams).
            done = ~is_searching[:, 0]
            if early_stopping is True:
                done |= is_sent_finished.all(-1)
            if bool(done.any()):
                set_aside(done)
                keep = (~done).nonzero().squeeze(1)
                rows = (keep[:, None] * num_beams + torch.arange(num_beams, device=device)).flatten()
                model_kwargs = self._select_model_kwargs_rows(model_kwargs, rows)
                criteria = self._select_stopping_criteria(criteria, keep)
                sources, is_searching, is_sent_finished = sources[keep], is_searching[keep], is_sent_finished[keep]
                running_sequences, running_beam_scores = running_sequences[keep], running_beam_scores[keep]
                running_beam_indices, sequences = running_beam_indices[keep], sequences[keep]
                beam_scores, beam_indices = beam_scores[keep], beam_indices[keep]

            flat_running_sequences = running_sequences[:, :, :cur_len].flatten(0, 1)
            model_inputs = self.prepare_inputs_for_generation(
                flat_running_sequences, next_sequence_length=1, **model_kwargs
            )
            outputs = self(**model_inputs, return_dict=True)

        set_aside(torch.ones_like(sources, dtype=torch.bool))
        return results.flatten(0, 1)[:, : prompt_length + int(result_lengths.max())]

    def _returned_hypotheses_can_change(
        self,
        running_beam_scores,
        beam_scores,
        is_sent_finished,
        stopping_criteria,
        generation_config,
        cur_len: int,
        prompt_length: int,
    ) -> torch.Tensor:
        """(sources, 1): False where no running beam can still change what the search returns. Not in Marian.

        With `early_stopping="never"` the stock test ends a source once its best running beam, scored at the most
        favourable length, cannot beat the WORST of its `num_beams` finished hypotheses. That bound is exact (a
        beam's log-probability only falls as it grows), but only the best `num_return_sequences` hypotheses are
        returned: once the bound cannot beat the last of those, later hypotheses can only land behind them, so the
        returned sequences are already the stock loop's. The most favourable length is also the source's own: its
        per-row limit (`max_length_offset`, §6.1) where there is one, not the batch's longest. On Multi30K this
        ends the paper's beam search much sooner (benchmarks/README.md), with the same output.
        """
        length_penalty = generation_config.length_penalty
        num_returned = generation_config.num_return_sequences
        if length_penalty > 0.0:
            # Longer is better under a positive penalty: the longest length this source's hypotheses can reach.
            longest = torch.full_like(running_beam_scores[:, 0], generation_config.max_length)
            for criterion in stopping_criteria:
                if isinstance(criterion, _SourceLengthStoppingCriteria):
                    limits = criterion.max_new_tokens_per_row.to(longest) + criterion.prompt_length
                    longest = torch.minimum(longest, limits)
            best_length = longest - prompt_length
        else:
            best_length = torch.full_like(running_beam_scores[:, 0], cur_len - prompt_length)
        if self._gnmt_length_penalty:
            bound = running_beam_scores[:, 0] / gnmt_length_penalty(best_length, length_penalty)
        else:
            bound = running_beam_scores[:, 0] / best_length**length_penalty
        # Finished hypotheses are kept sorted, best first (GenerationMixin._update_finished_beams).
        last_returned = beam_scores[:, num_returned - 1]
        return ~(is_sent_finished[:, num_returned - 1] & (bound <= last_returned))[:, None]

    def _update_finished_beams(self, *, topk_log_probs, cur_len, decoder_prompt_len, length_penalty, **kwargs):
        if self._gnmt_length_penalty:
            # Normalise here and let the stock code divide by |Y| ** 0 = 1.
            topk_log_probs = topk_log_probs / gnmt_length_penalty(cur_len + 1 - decoder_prompt_len, length_penalty)
            length_penalty = 0.0
        return super()._update_finished_beams(
            topk_log_probs=topk_log_probs,
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            **kwargs,
        )

    def _check_early_stop_heuristic(
        self, *, running_beam_scores, cur_len, max_length, decoder_prompt_len, early_stopping, length_penalty, **kwargs
    ):
        if self._gnmt_length_penalty:
            # The same bound as the stock heuristic, with the GNMT denominator at the length it assumes.
            if early_stopping == "never" and length_penalty > 0.0:
                best_length = max_length - decoder_prompt_len
            else:
                best_length = cur_len - decoder_prompt_len
            running_beam_scores = running_beam_scores / gnmt_length_penalty(best_length, length_penalty)
            length_penalty = 0.0
        return GenerationMixin._check_early_stop_heuristic(
            running_beam_scores=running_beam_scores,
            cur_len=cur_len,
            max_length=max_length,
            decoder_prompt_len=decoder_prompt_len,
            early_stopping=early_stopping,
            length_penalty=length_penalty,
            **kwargs,
        )


__all__ = [
    "PAPER_DECODING",
    "VaswaniGenerationConfig",
    "VaswaniGenerationMixin",
    "gnmt_length_penalty",
    "set_paper_decoding",
]
