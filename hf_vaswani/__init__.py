"""hf-vaswani: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a Hugging Face model.

Importing the package registers the classes with the Auto factories and marks them for `save_pretrained` to copy
their code and write `auto_map`, so saved folders load with `trust_remote_code=True` where this package is absent.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .configuration_vaswani import VaswaniConfig
from .generation_vaswani import PAPER_DECODING, VaswaniGenerationMixin, gnmt_length_penalty, set_paper_decoding
from .modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniModel,
    VaswaniPreTrainedModel,
    sinusoidal_position_encoding,
)
from .pipeline_vaswani import VaswaniTranslationPipeline
from .presets import load_preset, preset_config, preset_names

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig, exist_ok=True)
AutoModel.register(VaswaniConfig, VaswaniModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VaswaniConfig, VaswaniForConditionalGeneration, exist_ok=True)

VaswaniConfig.register_for_auto_class()
VaswaniModel.register_for_auto_class("AutoModel")
VaswaniForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
# transformers 5.23 has no translation task; registered, the pipeline's save_pretrained writes `custom_pipelines` into
# config.json and copies its code, so `pipeline("translation", model=folder, trust_remote_code=True)` finds it.
if "translation" not in PIPELINE_REGISTRY.get_supported_tasks():
    PIPELINE_REGISTRY.register_pipeline("translation", VaswaniTranslationPipeline, pt_model=AutoModelForSeq2SeqLM)
else:  # before 5.23: leave transformers' own in place, and mark ours as register_pipeline would for saving
    VaswaniTranslationPipeline._registered_impl = {
        "translation": {"impl": VaswaniTranslationPipeline, "pt": (AutoModelForSeq2SeqLM,)}
    }

__version__ = "0.1.0"

__all__ = [
    "PAPER_DECODING",
    "VaswaniConfig",
    "VaswaniForConditionalGeneration",
    "VaswaniGenerationMixin",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "VaswaniTranslationPipeline",
    "gnmt_length_penalty",
    "load_preset",
    "preset_config",
    "preset_names",
    "set_paper_decoding",
    "sinusoidal_position_encoding",
]
