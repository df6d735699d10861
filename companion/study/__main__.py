"""``python -m companion.study``: see :mod:`companion.study.cli`. Used in: chapter 7.

The command line runs every chapter's methods (``companion.commands``).
"""

from ..commands import STUDY_METHODS
from .cli import main

if __name__ == "__main__":
    main(catalog=STUDY_METHODS)
