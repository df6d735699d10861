"""Processes: process groups, the launcher and its supervisor, the per-rank epoch
loop, torchrun from Python, checkpoints, TensorBoard logs.

Imports only :mod:`companion.core`.
"""

# Every module's public names, re-exported: ``from companion.runtime import ...``.
from . import agree, checkpoint, epochs, group, launcher, supervise, tblog, torchrun
from .agree import *  # noqa: F401,F403
from .checkpoint import *  # noqa: F401,F403
from .epochs import *  # noqa: F401,F403
from .group import *  # noqa: F401,F403
from .launcher import *  # noqa: F401,F403
from .supervise import *  # noqa: F401,F403
from .tblog import *  # noqa: F401,F403
from .torchrun import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *group.__all__,
            *supervise.__all__,
            *launcher.__all__,
            *epochs.__all__,
            *torchrun.__all__,
            *checkpoint.__all__,
            *tblog.__all__,
            *agree.__all__,
        ]
    )
)
