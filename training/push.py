"""`python -m training.push` in a checkout (`-m hf_vaswani_training.push` installed): the same as
`vaswani-push`, whose code is in serving/push.py. This small door keeps the command's module out of `__main__`."""

import sys

from .cli import push

if __name__ == "__main__":
    sys.exit(push())
