"""``python -m companion.elastic`` (under torchrun): see :mod:`companion.elastic.cli`."""

from ..runtime.torchrun import leave_now
from .cli import main

leave_now(main())  # a clean return only: errors and --help exit as usual
