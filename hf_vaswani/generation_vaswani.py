"""Decoding for the Transformer of "Attention Is All You Need" (Vaswani et al., 2017): `VaswaniGenerationMixin`.

The paper decodes with beam search (beam 4), the GNMT length penalty (alpha 0.6) and a maximum output length of
input length + 50 (§6.1). Hugging Face's `GenerationMixin` has no GNMT penalty and no per-row length limit; this
mixin adds both, and the paper's stop rule (`best_possible_score`). Greedy and beam search run on the loops of
`row_dropping_vaswani.py`, which stop computing rows that have finished, wherever those give the stock loop's tokens;
they get the length penalty through this mixin's scoring hooks, the source length limit as a stopping criterion and
the stop rule as an argument. It imports only torch, transformers and its sibling `row_dropping_vaswani.py`, and
`modeling_vaswani.py` imports it as a sibling (`from .generation_vaswani import ...`), which is what makes
`save_pretrained` copy both with the model's code.
"""

import copy
import functools
from types import MappingProxyType

import torch
import transformers
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin
from transformers.generation.stopping_criteria import StoppingCriteriaList
from transformers.utils import logging

from .row_dropping_vaswani import (
    PerSourceStoppingCriteria,
    beam_search_dropping_finished_rows,
    can_drop_finished_rows,
    greedy_search_dropping_finished_rows,
    signature_mismatch,
    stock_loop_reason,
)

logger = logging.get_logger(__name__)

# §6.1: "we used beam search with a beam size of 4 and length penalty alpha = 0.6 [...] We set the maximum output
# length during inference to input length + 50, but terminate early when possible." The one definition of the
# paper's decoding: the model's default generation config and the training recipe both read it.
# early_stopping="never" is Hugging Face's form of "terminate early when possible": a source's search ends once no
# running beam can still beat its finished hypotheses under the length penalty. The paper's code (tensor2tensor's
# beam search, stop_early=True) ends it once the best running beam, scored at the maximum length, cannot beat the
# best finished hypothesis; the row-dropping loop ends sources by that rule (`returned_hypotheses_can_change`).
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


class _SourceLengthStoppingCriteria(PerSourceStoppingCriteria):
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


def best_possible_score(
    running_scores: torch.Tensor,
    *,
    generated_length: int | torch.Tensor,
    longest_length: int | torch.Tensor,
    length_penalty: float,
    gnmt: bool,
) -> torch.Tensor:
    """The stop rule's bound (§6.1, "terminate early when possible"), for both loops: the best score a running beam
    can still reach. Its log-probability only falls as it grows, so that is its score now over the length penalty at
    the most favourable length: the longest it can reach (`longest_length` generated tokens) under a positive
    penalty, its current one (`generated_length`) otherwise. `gnmt`: the GNMT penalty, else Hugging Face's |Y| ** alpha.
    """
    best_length = longest_length if length_penalty > 0.0 else generated_length
    if gnmt:
        return running_scores / gnmt_length_penalty(best_length, length_penalty)
    return running_scores / best_length**length_penalty


def returned_hypotheses_can_change(
    running_beam_scores: torch.Tensor,
    beam_scores: torch.Tensor,
    is_sent_finished: torch.Tensor,
    stopping_criteria: StoppingCriteriaList,
    cur_len: int,
    prompt_length: int,
    *,
    generation_config: GenerationConfig,
    gnmt: bool,
) -> torch.Tensor:
    """(sources, 1): False where no running beam can still change what the search returns: the paper's stop rule
    for `early_stopping="never"`, the row-dropping beam search's `stop_rule`. Not in Marian.

    With `early_stopping="never"` the stock test ends a source once its best running beam, scored at the most
    favourable length, cannot beat the WORST of its `num_beams` finished hypotheses. That bound is exact (a
    beam's log-probability only falls as it grows), but only the best `num_return_sequences` hypotheses are
    returned: once the bound cannot beat the last of those, later hypotheses can only land behind them, so the
    returned sequences are already the stock loop's. The most favourable length is also the source's own: its
    per-row limit (`max_length_offset`, §6.1) where there is one, not the batch's longest. On Multi30K this
    ends the paper's beam search much sooner (benchmarks/README.md), with the same output.
    """
    # The longest length this source's hypotheses can reach: the batch's, or the source's own limit.
    longest = torch.full_like(running_beam_scores[:, 0], generation_config.max_length)
    for criterion in stopping_criteria:
        if isinstance(criterion, _SourceLengthStoppingCriteria):
            limits = criterion.max_new_tokens_per_row.to(longest) + criterion.prompt_length
            longest = torch.minimum(longest, limits)
    bound = best_possible_score(
        running_beam_scores[:, 0],
        generated_length=torch.full_like(running_beam_scores[:, 0], cur_len - prompt_length),
        longest_length=longest - prompt_length,
        length_penalty=generation_config.length_penalty,
        gnmt=gnmt,
    )
    # Finished hypotheses are kept sorted, best first (GenerationMixin._update_finished_beams).
    num_returned = generation_config.num_return_sequences
    last_returned = beam_scores[:, num_returned - 1]
    return ~(is_sent_finished[:, num_returned - 1] & (bound <= last_returned))[:, None]


# The two scoring hooks through which beam search, stock or row-dropping loop, gets the GNMT length penalty (see their
# overrides): the parameters the overrides read (the others pass through). Unchanged from 5.0 to 5.23.
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
_GNMT_HOOK_MISMATCH = signature_mismatch(_GNMT_HOOK_CALLS, complete=False)


@functools.cache
def _log_loop(search: str, loop: str) -> None:
    """Once per process and loop: which loop a search runs (for version checks; see docs/using.md)."""
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
        """Greedy decoding that stops computing a row once it has finished
        (`row_dropping_vaswani.greedy_search_dropping_finished_rows`). Not in Marian.

        The stock loop (`GenerationMixin._sample`) runs the decoder on every row of the batch until the last row
        ends, and pads the finished ones; here each step that finishes rows removes them from the batch. Same tokens,
        less work. Used for greedy search when every logits processor and stopping criterion looks at each row alone
        and nothing per step is returned (scores, attentions, a streamer, the cache); otherwise, and with
        `drop_finished_rows=False`, the stock loop runs.
        """
        if can_drop_finished_rows(
            self, logits_processor, stopping_criteria, generation_config, synced_gpus, streamer, model_kwargs
        ):
            _log_loop("greedy", "row-dropping loop")
            return greedy_search_dropping_finished_rows(
                self, input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs
            )
        search = "sampling" if generation_config.do_sample else "greedy"
        _log_loop(search, stock_loop_reason(search))
        return super()._sample(
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            synced_gpus=synced_gpus,
            streamer=streamer,
            **model_kwargs,
        )

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
        rows leave the batch (`row_dropping_vaswani.beam_search_dropping_finished_rows`), and with
        `early_stopping="never"` the paper's stop rule (`returned_hypotheses_can_change`) ends it sooner. Same outputs
        as the stock loop; under the same conditions as in `_sample` (plain beam search, nothing returned per step);
        otherwise, and with `drop_finished_rows=False`, the stock loop runs, with the GNMT penalty and the source
        length limit but without the stop rule.
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
            if can_drop_finished_rows(
                self, logits_processor, stopping_criteria, generation_config, synced_gpus, None, model_kwargs
            ):
                _log_loop("beam search", "row-dropping loop")
                stop_rule = None
                if generation_config.early_stopping == "never":
                    stop_rule = functools.partial(
                        returned_hypotheses_can_change,
                        generation_config=generation_config,
                        gnmt=self._gnmt_length_penalty,
                    )
                return beam_search_dropping_finished_rows(
                    self,
                    input_ids,
                    logits_processor,
                    stopping_criteria,
                    generation_config,
                    model_kwargs,
                    stop_rule=stop_rule,
                )
            _log_loop("beam search", stock_loop_reason("beam search"))
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
            # The stock heuristic's bound with the GNMT denominator; the stock code then divides by |Y| ** 0 = 1. The
            # longest length it assumes is the batch's with "never", the current one otherwise.
            longest_length = max_length if early_stopping == "never" else cur_len
            running_beam_scores = best_possible_score(
                running_beam_scores,
                generated_length=cur_len - decoder_prompt_len,
                longest_length=longest_length - decoder_prompt_len,
                length_penalty=length_penalty,
                gnmt=True,
            )
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
    "best_possible_score",
    "gnmt_length_penalty",
    "returned_hypotheses_can_change",
    "set_paper_decoding",
]
