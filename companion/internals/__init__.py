"""Chapter 6: DDP's internals rebuilt, step by step, and measured against torch's DDP.

:mod:`.naive` (all-reduce after backward, ``no_sync``), :mod:`.hooks` (one
gradient hook and async all-reduce per parameter), :mod:`.buckets` (buckets,
parameters that need care), :mod:`.tied_frozen_unused` (a model with tied, frozen and
unused parameters), :mod:`.training` (steps and epochs with any of
them), :mod:`.sweep` (bucket sizes and the alpha-beta model),
:mod:`.timeline` (when each all-reduce ran), :mod:`.lifetime` (hooks that live as long
as their wrapper), :mod:`.dropin` (each pattern torch's DDP allows, under each wrapper) and
:mod:`.compiled` (``torch.compile`` with DDP and with the wrappers).
"""

# Every module's public names, re-exported: ``from companion.internals import ...``.
from . import (
    buckets,
    compiled,
    dropin,
    dropin_cases,
    hooks,
    lifetime,
    naive,
    sweep,
    tied_frozen_unused,
    timeline,
    training,
)
from .buckets import *  # noqa: F401,F403
from .compiled import *  # noqa: F401,F403
from .dropin import *  # noqa: F401,F403
from .dropin_cases import *  # noqa: F401,F403
from .hooks import *  # noqa: F401,F403
from .lifetime import *  # noqa: F401,F403
from .naive import *  # noqa: F401,F403
from .sweep import *  # noqa: F401,F403
from .tied_frozen_unused import *  # noqa: F401,F403
from .timeline import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *naive.__all__,
            *hooks.__all__,
            *buckets.__all__,
            *tied_frozen_unused.__all__,
            *training.__all__,
            *sweep.__all__,
            *timeline.__all__,
            *lifetime.__all__,
            *dropin.__all__,
            *dropin_cases.__all__,
            *compiled.__all__,
        ]
    )
)
