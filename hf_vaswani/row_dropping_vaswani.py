"""Greedy and beam search that stop computing finished rows: the speed-up beneath `generation_vaswani.py`. Not in Marian.

The stock loops (`GenerationMixin._sample`, `GenerationMixin._beam_search`) run every row of the batch through the
decoder until the last one ends; on Multi30K batches of 64 only about a quarter of the greedy decoder rows produce a
token (benchmarks/README.md). The loops here take a finished row (greedy) or a source whose search is over (beam
search) out of the batch: the caches, the encoder output, the masks and the beam state keep only the rows still
running, and the output is written exactly as the stock loop returns it. Same tokens, less work. They run only where
that holds (`can_drop_finished_rows`: the guard tables below); everywhere else the caller runs the stock loop.

On a GPU a batch of a new size is a new shape, for which kernels are chosen (and cuDNN attention builds plans) anew;
dropping rows one by one makes nearly every decoder step a new size. With `row_buckets` (the generation config's
`row_buckets`: "auto", the default, on CUDA tensors only; True; False) the batch shrinks only to powers of two: finished
rows stay in it, computed but ignored, until the running ones fit the next smaller power of two, so one generate()
call sees at most 1 + log2(batch) sizes. Same tokens either way (rows do not interact).

Nothing here is the paper's: the caller brings its decoding in. The length penalty reaches beam search through the
model's scoring hooks (`_update_finished_beams`, `_check_early_stop_heuristic`), which the loop calls as the stock loop
does; a per-source length limit is a `PerSourceStoppingCriteria`; a stop rule of its own is `stop_rule`. It imports
only torch, transformers and its sibling `compat_vaswani.py`; `generation_vaswani.py` imports it as a sibling
(`from .row_dropping_vaswani import ...`), which is what makes `save_pretrained` copy it with the model's code.
"""

import inspect
from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
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

from .compat_vaswani import CACHE_NAME, output_cache


class PerSourceStoppingCriteria(StoppingCriteria):
    """A stopping criterion that holds one setting per source and looks at each row alone, such as a per-source
    length limit. The row-dropping loops accept it and keep it in step with the batch through `select_sources`."""

    def select_sources(self, sources: torch.LongTensor) -> "PerSourceStoppingCriteria":
        """The criterion for the batch that keeps only `sources` (indices into this one's sources), in that order."""
        raise NotImplementedError


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
_ROW_WISE_STOPPING_CRITERIA = (
    EosTokenCriteria,
    MaxLengthCriteria,
    MaxTimeCriteria,
    StopStringCriteria,
    PerSourceStoppingCriteria,
)
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
GREEDY_CALLS = {
    "_prefill": ("input_ids", "generation_config", "model_kwargs"),
    "_update_model_kwargs_for_generation": ("outputs", "model_kwargs", "is_encoder_decoder"),
    "prepare_inputs_for_generation": ("input_ids", "next_sequence_length"),
    "_valid_auto_compile_criteria": ("model_kwargs", "generation_config"),
}
BEAM_SEARCH_CALLS = {
    **GREEDY_CALLS,
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


def signature_mismatch(calls: dict[str, tuple[str, ...]], complete: bool = True) -> str | None:
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


GREEDY_MISMATCH = signature_mismatch(GREEDY_CALLS)
BEAM_SEARCH_MISMATCH = signature_mismatch(BEAM_SEARCH_CALLS)


def can_drop_finished_rows(
    model: GenerationMixin,
    logits_processor,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool,
    streamer,
    model_kwargs: dict,
) -> bool:
    """Whether `greedy_search_dropping_finished_rows` (num_beams 1) or `beam_search_dropping_finished_rows` gives
    what the stock loop would: plain search with every logits processor and stopping criterion looking at each row
    alone, nothing per step returned (scores, attentions, a streamer, the cache), the private members as in
    `GREEDY_CALLS`/`BEAM_SEARCH_CALLS`, and `drop_finished_rows` not set to False in the generation config."""
    cache = model_kwargs.get(CACHE_NAME)
    return (
        (BEAM_SEARCH_MISMATCH if generation_config.num_beams > 1 else GREEDY_MISMATCH) is None
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
        and not model._valid_auto_compile_criteria(model_kwargs, generation_config)
        and stopping_criteria.max_length is not None
        # Without an EOS criterion the stock loop keeps extending rows that other criteria finished.
        and any(isinstance(criterion, EosTokenCriteria) for criterion in stopping_criteria)
        and all(isinstance(criterion, _ROW_WISE_STOPPING_CRITERIA) for criterion in stopping_criteria)
        and all(isinstance(processor, _ROW_WISE_LOGITS_PROCESSORS) for processor in logits_processor)
    )


def uses_row_buckets(generation_config: GenerationConfig, device: torch.device) -> bool:
    """Whether the loops shrink the batch in powers of two (`row_buckets`): "auto" (or unset) on CUDA only."""
    setting = getattr(generation_config, "row_buckets", "auto")
    if setting in ("auto", None):
        return device.type == "cuda"
    if not isinstance(setting, bool):
        raise ValueError(f'generation config: row_buckets={setting!r} must be "auto", True or False')
    return setting


def row_bucket(running: int, current: int) -> int:
    """The batch size to shrink to: the smallest power of two >= `running`, at most `current`."""
    bucket = 1
    while bucket < running:
        bucket *= 2
    return min(bucket, current)


def _keep_running(running: torch.Tensor, size: int) -> torch.LongTensor:
    """Indices of `size` rows: every running one (in order), then finished ones to fill the bucket."""
    return torch.argsort((~running).to(torch.int8), stable=True)[:size]


def stock_loop_reason(search: str) -> str:
    """Why `search` ("greedy", "sampling" or "beam search") runs the stock loop, for the log."""
    mismatch = {"greedy": GREEDY_MISMATCH, "beam search": BEAM_SEARCH_MISMATCH}.get(search)
    if mismatch is not None:
        return f"stock loop, as {mismatch}"
    return "stock loop"


def greedy_search_dropping_finished_rows(
    model: GenerationMixin,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    model_kwargs: dict,
) -> torch.LongTensor:
    """`GenerationMixin._sample` for greedy search, where `can_drop_finished_rows`: each step that finishes rows
    removes them from the batch, and the output is a padded (batch, length) tensor as the stock loop returns it."""
    batch_size, prompt_length = input_ids.shape
    max_length = stopping_criteria.max_length
    pad_token_id = int(generation_config._pad_token_tensor)
    sequences = input_ids.new_full((batch_size, max_length), pad_token_id)  # every row; cut to length at the end
    sequences[:, :prompt_length] = input_ids
    rows = torch.arange(batch_size, device=input_ids.device)  # the rows of `sequences` in the batch
    running = torch.ones(batch_size, dtype=torch.bool, device=input_ids.device)  # False: finished, kept as filler
    bucketed = uses_row_buckets(generation_config, input_ids.device)
    criteria = stopping_criteria  # greedy search has one row per source (no num_return_sequences)

    outputs = model._prefill(input_ids, generation_config, model_kwargs)
    cur_len = prompt_length
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=True)
        # No copy (the stock loop copies): nothing else holds `outputs`, and the processors return new tensors.
        next_token_logits = outputs.logits[:, -1].to(dtype=torch.float32, device=input_ids.device)
        del outputs
        # max(...).indices is argmax (both documented to return the first of tied maxima), faster on the CPU
        next_tokens = logits_processor(input_ids, next_token_logits).max(dim=-1).indices
        if bucketed:  # a finished row kept as filler writes padding, as the stock loop does
            next_tokens = next_tokens.masked_fill(~running, pad_token_id)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)  # (rows, cur_len + 1)
        sequences[rows, cur_len] = next_tokens
        cur_len += 1

        finished = criteria(input_ids, None) | ~running
        num_finished = int(finished.sum())  # the one host-device synchronisation of a step, as in the stock loop
        if num_finished == finished.shape[0]:
            break
        if num_finished > 0:
            running = ~finished
            size = finished.shape[0] - num_finished
            if bucketed:
                size = row_bucket(size, finished.shape[0])
            if size < finished.shape[0]:
                keep = _keep_running(running, size)
                rows, input_ids, running = rows[keep], input_ids[keep], running[keep]
                model_kwargs = _select_model_kwargs_rows(model_kwargs, keep)
                criteria = _select_stopping_criteria(criteria, keep)

        model_inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
        outputs = model(**model_inputs, return_dict=True)
    return sequences[:, :cur_len]


def beam_search_dropping_finished_rows(
    model: GenerationMixin,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    model_kwargs: dict,
    stop_rule: Callable[..., torch.Tensor] | None = None,
) -> torch.LongTensor:
    """`GenerationMixin._beam_search` for the sources still searching only, where `can_drop_finished_rows`.

    A source's search is over once the stock early-stopping test says none of its running beams can beat its
    finished hypotheses (or, with `early_stopping=True`, once it has `num_beams` of them): from then on the stock
    loop still runs its beams through the decoder each step but discards what they produce. Here its rows leave the
    batch and its returned hypotheses are kept aside. `stop_rule`, where given, can end a source sooner: called each
    step with `running_beam_scores`, `beam_scores`, `is_sent_finished` (sources, beams), `stopping_criteria` (those of
    the sources still searching), `cur_len` and `prompt_length`, it returns (sources, 1), False where that source's
    search may end; it must not end one whose returned hypotheses could still change.
    """
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
    searching = torch.ones(num_sources, dtype=torch.bool, device=device)  # False: set aside, kept as filler
    bucketed = uses_row_buckets(generation_config, device)
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
    model_kwargs = _select_model_kwargs_rows(model_kwargs, first_beams)
    outputs = model._prefill(input_ids[first_beams], generation_config, model_kwargs)
    output_cache(outputs).batch_repeat_interleave(num_beams)
    outputs.logits = outputs.logits.repeat_interleave(num_beams, dim=0)
    model_kwargs = {
        **model_kwargs,
        **{key: expanded_kwargs[key] for key in _PER_ROW_INPUTS if key in expanded_kwargs},
    }
    flat_running_sequences = input_ids
    cur_len = prompt_length
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=True)
        # A view, not the stock loop's copy, and the beam scores added in place: two fewer (rows, vocab) buffers
        # a step; the same values.
        logits = outputs.logits[:, -1, :].to(dtype=torch.float32, device=device)
        del outputs
        log_probs = logits_processor(flat_running_sequences, nn.functional.log_softmax(logits, dim=-1))
        batch_size = sources.shape[0]
        # contiguous(): a processor may return a strided tensor (RepetitionPenaltyLogitsProcessor).
        log_probs = log_probs.contiguous().view(batch_size, num_beams, -1).add_(running_beam_scores[:, :, None])
        topk_log_probs, topk_running_sequences, topk_running_beam_indices = model._get_top_k_continuations(
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
        running_sequences, running_beam_scores, running_beam_indices = model._get_running_beams_for_next_iteration(
            topk_log_probs=topk_log_probs,
            topk_running_sequences=topk_running_sequences,
            topk_running_beam_indices=topk_running_beam_indices,
            next_token_hits_stopping_criteria=hits_stopping_criteria,
            num_beams=num_beams,
        )
        sequences, beam_scores, beam_indices, is_sent_finished = model._update_finished_beams(
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
        model_kwargs[CACHE_NAME] = model._reorder_cache(model_kwargs[CACHE_NAME], beam_idx)
        cur_len += 1
        is_searching = model._check_early_stop_heuristic(
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
        if stop_rule is not None:
            is_searching &= stop_rule(
                running_beam_scores=running_beam_scores,
                beam_scores=beam_scores,
                is_sent_finished=is_sent_finished,
                stopping_criteria=criteria,
                cur_len=cur_len,
                prompt_length=prompt_length,
            )
        # Sources set aside but kept as filler (row buckets) count as over: not searching, finished, stopped.
        filler = ~searching[:, None]
        if not model._beam_search_has_unfinished_sequences(
            is_searching & ~filler, is_sent_finished | filler, hits_stopping_criteria | filler, early_stopping
        ):
            break
        # The sources whose later candidates the stock loop would discard (see _update_finished_beams).
        done = ~is_searching[:, 0]
        if early_stopping is True:
            done |= is_sent_finished.all(-1)
        done &= searching
        if bool(done.any()):
            set_aside(done)
            searching &= ~done
            size = int(searching.sum())
            if bucketed:
                size = row_bucket(size, batch_size)
            if size < batch_size:
                keep = _keep_running(searching, size)
                rows = (keep[:, None] * num_beams + torch.arange(num_beams, device=device)).flatten()
                model_kwargs = _select_model_kwargs_rows(model_kwargs, rows)
                criteria = _select_stopping_criteria(criteria, keep)
                sources, is_searching, is_sent_finished = sources[keep], is_searching[keep], is_sent_finished[keep]
                running_sequences, running_beam_scores = running_sequences[keep], running_beam_scores[keep]
                running_beam_indices, sequences = running_beam_indices[keep], sequences[keep]
                beam_scores, beam_indices, searching = beam_scores[keep], beam_indices[keep], searching[keep]

        flat_running_sequences = running_sequences[:, :, :cur_len].flatten(0, 1)
        model_inputs = model.prepare_inputs_for_generation(
            flat_running_sequences, next_sequence_length=1, **model_kwargs
        )
        outputs = model(**model_inputs, return_dict=True)

    set_aside(searching)
    return results.flatten(0, 1)[:, : prompt_length + int(result_lengths.max())]


def _select_stopping_criteria(stopping_criteria: StoppingCriteriaList, sources: torch.LongTensor):
    """The criteria for the batch that keeps only `sources`: the per-source length limits follow them."""
    return StoppingCriteriaList(
        criterion.select_sources(sources) if isinstance(criterion, PerSourceStoppingCriteria) else criterion
        for criterion in stopping_criteria
    )


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


__all__ = [
    "BEAM_SEARCH_CALLS",
    "BEAM_SEARCH_MISMATCH",
    "GREEDY_CALLS",
    "GREEDY_MISMATCH",
    "PerSourceStoppingCriteria",
    "beam_search_dropping_finished_rows",
    "can_drop_finished_rows",
    "greedy_search_dropping_finished_rows",
    "row_bucket",
    "signature_mismatch",
    "stock_loop_reason",
    "uses_row_buckets",
]
