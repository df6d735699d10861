"""``python -m companion.elastic`` (under torchrun): see :mod:`companion.elastic.cli`.

The command line trains DDP or, with ``--sharded``, chapter 9's methods
(``companion.commands``).
"""

from ..commands import ELASTIC_METHODS
from ..runtime.torchrun import leave_now
from .cli import main

leave_now(main(catalog=ELASTIC_METHODS))  # a clean return only: errors and --help exit as usual
