"""`python -m training.export` in a checkout (`-m hf_vaswani_training.export` installed): the same as
`vaswani-export`, whose code is in serving/export.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import export

if __name__ == "__main__":
    sys.exit(export())
