"""``python -m companion.ddp`` (under torchrun): see :mod:`companion.ddp.cli`."""

import sys

from .cli import main

sys.exit(main())
