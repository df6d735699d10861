"""Chapter 3: processes and collectives by hand.

:mod:`.tour` (point-to-point and collectives, live), :mod:`.allreduce` (naive,
ring, pipelined ring, recursive doubling), :mod:`.costmodel` (alpha-beta),
:mod:`.partition` (``DataPartitioner`` and ``average_gradients`` training),
:mod:`.reference` (one process on the workers' global minibatches),
:mod:`.uneven` (uneven local batches: weigh the ranks by their samples),
:mod:`.verify` (``check_allreduce``), :mod:`.trace` (opt-in records of the
all-reduces' steps, for chapter 3's pictures).
"""

# Every module's public names, re-exported: ``from companion.collectives import ...``.
from . import allreduce, costmodel, partition, reference, tour, trace, uneven, verify
from .allreduce import *  # noqa: F401,F403
from .costmodel import *  # noqa: F401,F403
from .partition import *  # noqa: F401,F403
from .reference import *  # noqa: F401,F403
from .tour import *  # noqa: F401,F403
from .trace import *  # noqa: F401,F403
from .uneven import *  # noqa: F401,F403
from .verify import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *tour.__all__,
            *allreduce.__all__,
            *costmodel.__all__,
            *partition.__all__,
            *reference.__all__,
            *uneven.__all__,
            *verify.__all__,
            *trace.__all__,
        ]
    )
)
