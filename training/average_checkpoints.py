"""`python -m training.average_checkpoints` in a checkout (`-m hf_vaswani_training.average_checkpoints` installed): the same as
`vaswani-average`, whose code is in recipe/average_checkpoints.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import average

if __name__ == "__main__":
    sys.exit(average())
