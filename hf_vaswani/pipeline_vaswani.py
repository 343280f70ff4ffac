"""A `translation` pipeline that travels with the model: transformers 5.23 removed its own.

`transformers.pipeline("translation", ...)` raises KeyError since 5.23 (the translation, text2text-generation and
summarization tasks were removed). A model folder can still bring a pipeline of its own: `config.json` lists it under
`custom_pipelines` and this file is saved next to the model's code, so that

    pipeline("translation", model=folder_or_repo, trust_remote_code=True)(["Ein Hund läuft ."])

works where hf_vaswani is not installed. `VaswaniTranslationPipeline(model=model, tokenizer=tokenizer).save_pretrained(
folder)` (or `.push_to_hub(repo)`) writes both; `hf_vaswani_training` does it for every model it trains.

Decoding is the model's own `generate()` with its generation config (the paper's: beam 4, GNMT length penalty 0.6,
source length + 50, §6.1); generation keyword arguments (`num_beams=1`, `do_sample=True`, `max_new_tokens=...`)
override it per call or per pipeline. Batched calls (`batch_size=...`) give the same text as
`tokenizer.batch_decode(model.generate(**tokenizer(batch, padding=True)), skip_special_tokens=True)`.

Like `modeling_vaswani.py`, this file imports only torch, transformers and the standard library, which is what lets it
load as remote code.
"""

from typing import Any

import torch
from transformers import Pipeline
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Keyword arguments the pipeline handles itself; every other one goes to `generate()`.
_PREPROCESS_PARAMS = ("truncation",)
_POSTPROCESS_PARAMS = ("clean_up_tokenization_spaces", "return_tensors", "return_text")


class VaswaniTranslationPipeline(Pipeline):
    """Translate sentences with an encoder-decoder model and its tokenizer (the `translation` task of transformers 4.x).

    Call it with a string or a list of strings. A string gives `[{"translation_text": ...}]` (one dict per returned
    sequence); a list gives one such result per input, flattened to one dict per input when each has a single
    sequence, as transformers 4.x's `TranslationPipeline` did.

    Args (at construction or per call):
        truncation: cut sources longer than the model takes (the smaller of the tokenizer's `model_max_length` and
            the config's `max_position_embeddings`, in tokens, `</s>` included) and warn; default True. With False,
            a longer source runs as it is (the sinusoidal positions extrapolate; the model warns once).
        return_text: put the decoded text under `translation_text` (default True).
        return_tensors: put the generated token ids under `translation_token_ids` (default False).
        clean_up_tokenization_spaces: passed to `tokenizer.decode` (default: the tokenizer's own setting).
        anything else: a `generate()` argument (`num_beams`, `do_sample`, `max_new_tokens`, `length_penalty_type`,
            `max_length_offset`, a `generation_config`, ...).
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    # Not `True`: generate() arguments then stay ordinary forward parameters, passed to generate() as given, where
    # Pipeline's own generation handling would add its defaults and differs across transformers 5.x releases.
    _pipeline_calls_generate = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.model.config.is_encoder_decoder:
            raise ValueError(
                f"The translation pipeline needs an encoder-decoder model; {type(self.model).__name__} is not one."
            )

    def _sanitize_parameters(self, **kwargs):
        preprocess_params = {key: kwargs.pop(key) for key in _PREPROCESS_PARAMS if key in kwargs}
        postprocess_params = {key: kwargs.pop(key) for key in _POSTPROCESS_PARAMS if key in kwargs}
        if postprocess_params.get("return_text") is False and not postprocess_params.get("return_tensors"):
            raise ValueError("return_text=False needs return_tensors=True, or the pipeline would return nothing")
        # The rest are generate() arguments (at construction, they apply to every call).
        return preprocess_params, kwargs, postprocess_params

    def __call__(self, inputs: str | list[str], **kwargs: Any) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """Translate `inputs` (a sentence or a list of sentences); see the class docstring for the options."""
        if not isinstance(inputs, list):  # a string, or a dataset or generator the pipeline streams
            return super().__call__(inputs, **kwargs)
        if not all(isinstance(text, str) for text in inputs):
            raise TypeError("The translation pipeline takes a string or a list of strings")
        results = super().__call__(inputs, **kwargs)
        if all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results

    def max_source_length(self) -> int:
        """The longest source, in tokens, that the pipeline passes to the model without cutting it."""
        limits = [self.tokenizer.model_max_length, getattr(self.model.config, "max_position_embeddings", None)]
        return min(int(limit) for limit in limits if limit is not None)

    def preprocess(self, text: str, truncation: bool = True) -> dict[str, torch.Tensor]:
        text = text if text.strip() else ""  # a blank line is an empty source (see _forward), not whitespace pieces
        encoded = self.tokenizer(text, return_tensors="pt")
        limit = self.max_source_length()
        length = encoded["input_ids"].shape[-1]
        if truncation and length > limit:
            logger.warning(
                f"A source of {length} tokens is longer than the {limit} this model takes; translating its first "
                f"{limit} tokens. Split long texts into sentences, or pass truncation=False to translate it whole."
            )
            encoded = self.tokenizer(text, return_tensors="pt", truncation=True, max_length=limit)
        # Only what the model reads: a collated batch must hold the same keys as `tokenizer(batch, padding=True)`.
        return {key: encoded[key] for key in ("input_ids", "attention_mask")}

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs) -> dict[str, torch.Tensor]:
        # An empty source (only padding, BOS, EOS: what "" or a blank line encodes to) translates to an empty text,
        # its ids [decoder start, EOS]: generate() would otherwise invent a sentence from the EOS alone.
        input_ids = model_inputs["input_ids"]
        nothing = [self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, self.tokenizer.bos_token_id]
        content = ~torch.isin(input_ids, torch.tensor([i for i in nothing if i is not None], device=input_ids.device))
        if model_inputs.get("attention_mask") is not None:
            content &= model_inputs["attention_mask"].bool()
        empty = ~content.any(dim=-1)  # (batch,)
        if empty.all():
            config = generate_kwargs.get("generation_config") or self.model.generation_config
            n = generate_kwargs.get("num_return_sequences") or config.num_return_sequences or 1
            output_ids = self._empty_output(config).to(input_ids.device).repeat(input_ids.shape[0] * n, 1)
        else:
            output_ids = self.model.generate(**model_inputs, **generate_kwargs)
            if not isinstance(output_ids, torch.Tensor):  # return_dict_in_generate=True
                output_ids = output_ids.sequences
            if empty.any():
                config = generate_kwargs.get("generation_config") or self.model.generation_config
                rows = empty.repeat_interleave(output_ids.shape[0] // input_ids.shape[0])
                output_ids[rows] = self._empty_output(config, output_ids.shape[-1]).to(output_ids.device)
        batch_size = model_inputs["input_ids"].shape[0]
        # (batch, num_return_sequences, length): the pipeline's un-batching then keeps each source's sequences together.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def _empty_output(self, generation_config, length: int = 2) -> torch.Tensor:
        """The ids of an empty translation, [decoder start, EOS], padded to `length`: (1, length)."""
        config = self.model.config
        start = generation_config.decoder_start_token_id
        start = config.decoder_start_token_id if start is None else start
        eos = generation_config.eos_token_id if generation_config.eos_token_id is not None else config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else eos
        return torch.tensor([[start, eos] + [pad] * (length - 2)], dtype=torch.long)

    def postprocess(
        self,
        model_outputs: dict[str, torch.Tensor],
        return_text: bool = True,
        return_tensors: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[dict[str, Any]]:
        results = []
        for output_ids in model_outputs["output_ids"][0]:
            result = {}
            if return_tensors:
                result["translation_token_ids"] = output_ids
            if return_text:
                result["translation_text"] = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            results.append(result)
        return results
