"""Troubleshooting: small, bounded demonstrations of what goes wrong in distributed runs.

Used in: the troubleshooting appendix. Workers for
:func:`~companion.runtime.launcher.launch` (and, in ``crash``, a ``torchrun``
entry point) that reproduce one problem each, within seconds:
``environment`` (variables for one run, a worker's stderr), ``hangs``
(mismatched collectives, timeouts, ``TORCH_DISTRIBUTED_DEBUG``),
``network`` (ports in use, ``GLOO_SOCKET_IFNAME``), ``threads``
(oversubscription), ``visibility`` (``CUDA_VISIBLE_DEVICES``) and ``crash``
(a rank that dies).
"""

from . import crash, environment, hangs, network, threads, visibility
from .crash import *  # noqa: F401,F403
from .environment import *  # noqa: F401,F403
from .hangs import *  # noqa: F401,F403
from .network import *  # noqa: F401,F403
from .threads import *  # noqa: F401,F403
from .visibility import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *environment.__all__,
            *hangs.__all__,
            *network.__all__,
            *threads.__all__,
            *visibility.__all__,
            *crash.__all__,
        ]
    )
)
