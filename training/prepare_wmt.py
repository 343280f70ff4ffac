"""`python -m training.prepare_wmt` in a checkout (`-m hf_vaswani_training.prepare_wmt` installed): the same as
`vaswani-prepare-wmt`, whose code is in data/prepare_wmt.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import prepare_wmt

if __name__ == "__main__":
    sys.exit(prepare_wmt())
