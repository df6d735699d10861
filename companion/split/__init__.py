"""Chapter 2: a minibatch split across devices by hand, in one process.

:mod:`.naive` does one thing at a time; :mod:`.fused` computes the same step
with fewer operations; :mod:`.training` runs either for whole epochs.
"""

# Every module's public names, re-exported: ``from companion.split import ...``.
from . import fused, naive, training
from .fused import *  # noqa: F401,F403
from .naive import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *naive.__all__,
            *fused.__all__,
            *training.__all__,
        ]
    )
)
