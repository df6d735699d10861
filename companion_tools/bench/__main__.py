"""Run a benchmark: ``python -m companion_tools.bench NAME [options]`` (see ``--help``)."""

from __future__ import annotations

import importlib
import sys
import textwrap

from . import HELP_WIDTH, available


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = available()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m companion_tools.bench NAME [options]\n\nbenchmarks:")
        for name in names:
            doc = (
                (importlib.import_module(f"{__package__}.{name}").__doc__ or "")
                .strip()
                .splitlines()
            )
            head, indent = f"  {name:<12} ", " " * 15
            print(
                textwrap.fill(
                    doc[0] if doc else "", HELP_WIDTH, initial_indent=head, subsequent_indent=indent
                )
            )
        return 0
    if argv[0] not in names:
        print(
            f"unknown benchmark {argv[0]!r}; available: {', '.join(names)}",
            file=sys.stderr,
        )
        return 2
    return importlib.import_module(f"{__package__}.{argv[0]}").main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
