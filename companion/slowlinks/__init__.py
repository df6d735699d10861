"""Chapter 10: data parallelism over slow links: send less, or less often.

:mod:`.hooks` (DDP communication hooks by hand: the mean, fp16 and bf16),
:mod:`.powersgd` (low-rank gradients with error feedback), :mod:`.averaging`
(local SGD and DiLoCo: replicas that meet every H steps), :mod:`.network`
(link presets that price chapter 9's byte ledger), :mod:`.training` (one call
for every method, trained through chapter 5's loop, and the study's
table of them), :mod:`.verify` (the
exact claims, as workers).
"""

# Every module's public names, re-exported: ``from companion.slowlinks import ...``.
from . import averaging, hooks, network, powersgd, streaming, training, verify
from .averaging import *  # noqa: F401,F403
from .hooks import *  # noqa: F401,F403
from .network import *  # noqa: F401,F403
from .powersgd import *  # noqa: F401,F403
from .streaming import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .verify import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *hooks.__all__,
            *powersgd.__all__,
            *averaging.__all__,
            *network.__all__,
            *streaming.__all__,
            *training.__all__,
            *verify.__all__,
        ]
    )
)
