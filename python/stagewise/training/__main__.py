"""`python -m stagewise.training <job> [ARGS...]`: runs one training job (see the package docstring)."""

from __future__ import annotations

import importlib
import sys

from . import JOBS, __doc__ as PACKAGE_DOC


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m stagewise.training {{{','.join(JOBS)}}} [ARGS...]\n\n{PACKAGE_DOC}")
        return 0 if argv else 2
    job, rest = argv[0], argv[1:]
    if job not in JOBS:
        print(
            f"python -m stagewise.training: unknown job {job!r}; the jobs are {', '.join(JOBS)}",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f".{JOBS[job]}", __package__)
    module.main(rest, prog=f"python -m stagewise.training {job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
