"""Chapter 9: sharded data parallelism: ZeRO-1, 2 and 3 by hand, then torch's versions.

:mod:`.flat` (flat, padded shards; the units), :mod:`.zero1` (optimizer state
sharded), :mod:`.zero2` (gradients too, reduce-scattered per bucket),
:mod:`.zero3` (parameters too, gathered per unit, cast at gather for mixed
precision; :mod:`.freed`, their stand-ins between steps), :mod:`.library`
(``ZeroRedundancyOptimizer``, FSDP2), :mod:`.pitfalls` (FSDP2's silent
mistakes, caught), :mod:`.accumulate` (FSDP2's accumulation setters, measured),
:mod:`.hybrid` (HSDP: shard within a node, replicate
across), :mod:`.clip` (clipping by the global norm of sharded gradients),
:mod:`.scaler` (fp16's loss scaler, one found-inf flag for all ranks),
:mod:`.activations` (activation checkpointing: memory saved, time paid),
:mod:`.training` (one call for every method, and the study's
table of them), :mod:`.ledger` (bytes per
collective), :mod:`.memory` (state per rank, formulas, the calculator, saved
weights), :mod:`.measure` (one measured step), :mod:`.checkpoint`
(``torch.distributed.checkpoint``, N ranks to M; :mod:`.snapshot`, chapter 8's
snapshots of a sharded model; :mod:`.flat_state`, the
hand-written stages' flat shards as DTensors), :mod:`.timeline` (ZeRO-3's
gathers, waits and reduce-scatters, drawn), :mod:`.verify` (every method
against one process, float64).
"""

# Every module's public names, re-exported: ``from companion.sharding import ...``.
from . import (
    accumulate,
    activations,
    checkpoint,
    clip,
    flat,
    flat_state,
    freed,
    hybrid,
    ledger,
    library,
    measure,
    memory,
    pitfalls,
    scaler,
    snapshot,
    timeline,
    training,
    verify,
    zero1,
    zero2,
    zero3,
)
from .accumulate import *  # noqa: F401,F403
from .activations import *  # noqa: F401,F403
from .checkpoint import *  # noqa: F401,F403
from .clip import *  # noqa: F401,F403
from .flat import *  # noqa: F401,F403
from .flat_state import *  # noqa: F401,F403
from .freed import *  # noqa: F401,F403
from .hybrid import *  # noqa: F401,F403
from .ledger import *  # noqa: F401,F403
from .library import *  # noqa: F401,F403
from .measure import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .pitfalls import *  # noqa: F401,F403
from .scaler import *  # noqa: F401,F403
from .snapshot import *  # noqa: F401,F403
from .timeline import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .verify import *  # noqa: F401,F403
from .zero1 import *  # noqa: F401,F403
from .zero2 import *  # noqa: F401,F403
from .zero3 import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *flat.__all__,
            *zero1.__all__,
            *zero2.__all__,
            *zero3.__all__,
            *freed.__all__,
            *clip.__all__,
            *scaler.__all__,
            *snapshot.__all__,
            *library.__all__,
            *hybrid.__all__,
            *pitfalls.__all__,
            *accumulate.__all__,
            *activations.__all__,
            *training.__all__,
            *ledger.__all__,
            *memory.__all__,
            *measure.__all__,
            *checkpoint.__all__,
            *flat_state.__all__,
            *timeline.__all__,
            *verify.__all__,
        ]
    )
)
