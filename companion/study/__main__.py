"""``python -m companion.study``: see :mod:`companion.study.cli`. Used in: chapter 7."""

from .cli import main

if __name__ == "__main__":
    main()
