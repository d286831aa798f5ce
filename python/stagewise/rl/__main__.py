"""`python -m stagewise.rl ...` (what `stagewise learn ...` runs): see `--help`."""

import sys

from .cli import parse
from .runner import LearnError, learn
from .envs import ServeError


def main(argv=None) -> int:
    import torch

    torch.set_num_threads(1)  # the servers take the other cores; more torch threads only contend (lab notes)
    args = parse(argv)
    try:
        learn(args)
    except (LearnError, ServeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: `python -m stagewise.rl --resume {args['out']}` continues from the last checkpoint",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
