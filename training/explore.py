"""`python -m training.explore` in a checkout (`-m hf_vaswani_training.explore` installed): the same as
`vaswani-explore`, whose code is in serving/explore.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import explore

if __name__ == "__main__":
    sys.exit(explore())
