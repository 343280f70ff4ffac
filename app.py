"""The attention explorer as a Hugging Face Space (Gradio SDK): `python app.py` serves it, unchanged, both on a
Space and on a machine with a checkout of this repository.

The model is the environment variable VASWANI_MODEL: a Hub repository id written by `vaswani-push` (on a Space, set
it under Settings -> Variables) or a folder; without it, `outputs/toy`, the folder `vaswani-train toy` writes. A
model that does not load shows its error in the page. A Space serves everyone, so visitors may not load other models
unless VASWANI_ALLOW_LOAD lists what they may load (space-separated Hub ids, folders, or patterns such as
`your-name/*`; the served model stays loaded whatever they load). docs/space/ holds the Space's README (its card,
with the SDK settings) and requirements; docs/serving.md says how to upload them.
"""

import os
import sys
from pathlib import Path

try:
    from hf_vaswani_training.serving.explore import LoadPolicy, build_app, launch_options
except ImportError:  # a Space holds a copy of the repository, not the installed package
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from training.serving.explore import LoadPolicy, build_app, launch_options

MODEL = os.environ.get("VASWANI_MODEL", "outputs/toy")

ALLOW_LOAD = LoadPolicy(tuple(os.environ.get("VASWANI_ALLOW_LOAD", "").split()))

demo = build_app(MODEL, allow_load=ALLOW_LOAD)

if __name__ == "__main__":
    # A Space sets GRADIO_SERVER_NAME=0.0.0.0 and the port; locally this serves http://127.0.0.1:7860.
    demo.launch(**launch_options())
