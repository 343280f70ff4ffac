"""`python -m training.train` in a checkout, `accelerate launch -m hf_vaswani_training.train` installed: the same as
`vaswani-train`, whose command line is read in recipe/options.py and whose run is recipe/train.py. This small door
keeps the command's module out of `__main__`."""

import sys

from .cli import train

if __name__ == "__main__":
    sys.exit(train())
