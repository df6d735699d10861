"""Pictures drawn from real runs: chapters 2 to 5 show how their mechanisms move data.

Each module records a trace of the package's own code (opt-in, off by
default) and draws it with matplotlib: :mod:`.split` (chapter 2),
:mod:`.ring` and :mod:`.shards` (chapter 3), :mod:`.dataparallel` and
:mod:`.backward` (chapter 4), :mod:`.sampler` (chapter 5); :mod:`.style` holds what they share.
"""

# Every module's public names, re-exported: ``from companion_tools.pictures import ...``.
from . import backward, dataparallel, ring, sampler, shards, split, style
from .backward import *  # noqa: F401,F403
from .dataparallel import *  # noqa: F401,F403
from .ring import *  # noqa: F401,F403
from .sampler import *  # noqa: F401,F403
from .shards import *  # noqa: F401,F403
from .split import *  # noqa: F401,F403
from .style import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *style.__all__,
            *ring.__all__,
            *shards.__all__,
            *split.__all__,
            *dataparallel.__all__,
            *backward.__all__,
            *sampler.__all__,
        ]
    )
)
