"""`python -m training.translate` in a checkout (`-m hf_vaswani_training.translate` installed): the same as
`vaswani-translate`, whose code is in serving/translate.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import translate

if __name__ == "__main__":
    sys.exit(translate())
