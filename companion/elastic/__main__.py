"""``python -m companion.elastic`` (under torchrun): see :mod:`companion.elastic.cli`."""

import sys

from .cli import main

sys.exit(main())
