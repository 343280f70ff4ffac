"""Named architectures, as config files (fairseq's named architectures): `base` and `big` of the paper's Table 3,
`small` (d 256, 3+3 layers, 4 heads, ffn 1024), `toy` (d 96, 3+3, 4 heads, ffn 384) and `tiny` (for tests).

    config = hf_vaswani.preset_config("base", vocab_size=32000)
    config = hf_vaswani.preset_config("small", tokenizer=tokenizer)   # vocabulary size and special ids from it

The model code (configuration/modeling files, which `save_pretrained` copies for `trust_remote_code`) never
imports this package: a preset is where a config comes from, not part of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..configuration_vaswani import VaswaniConfig

PRESETS_DIR = Path(__file__).resolve().parent


def preset_names() -> list[str]:
    """The names of the shipped presets, sorted."""
    return sorted(path.stem for path in PRESETS_DIR.glob("*.json"))


def load_preset(preset: str) -> dict[str, Any]:
    """The config values of `preset`: a shipped preset's name, or a path to a config JSON.

    An unknown name is a ValueError that lists the shipped presets.
    """
    path = Path(preset) if preset.endswith(".json") else PRESETS_DIR / f"{preset}.json"
    if not path.is_file():
        raise ValueError(
            f"preset {preset}: no file {path}; presets are {', '.join(preset_names())} or a path to a config JSON"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def preset_config(preset: str, tokenizer: Any = None, **overrides: Any) -> VaswaniConfig:
    """A `VaswaniConfig` with the architecture of `preset` (a name or a config JSON path).

    With a `tokenizer`, the vocabulary size and the pad/BOS/EOS ids come from it (BOS is also the decoder start,
    as in fairseq); `overrides` are applied last.
    """
    values = load_preset(preset)
    if tokenizer is not None:
        values.update(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
        )
    values.update(overrides)
    return VaswaniConfig.from_dict(values)
