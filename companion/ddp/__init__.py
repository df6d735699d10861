"""Chapter 5: DistributedDataParallel, from a notebook or torchrun.

``torchrun --standalone --nproc-per-node=2 -m companion.ddp --help`` runs
:mod:`.cli`; :mod:`.loop` the per-rank setup and epoch loop that later chapters extend, :mod:`.training` the trainer, :mod:`.sampling` who reads
which sample, :mod:`.detectors` and :mod:`.mistakes` the common mistakes,
:mod:`.unused` parameters that ``forward`` never uses, :mod:`.join` ranks with
different numbers of batches.
"""

# Every module's public names, re-exported: ``from companion.ddp import ...``.
from . import cli, config, detectors, join, loop, mistakes, sampling, syncbn, training, unused
from .cli import *  # noqa: F401,F403
from .config import *  # noqa: F401,F403
from .detectors import *  # noqa: F401,F403
from .join import *  # noqa: F401,F403
from .loop import *  # noqa: F401,F403
from .mistakes import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403
from .syncbn import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .unused import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *config.__all__,
            *unused.__all__,
            *loop.__all__,
            *training.__all__,
            *cli.__all__,
            *sampling.__all__,
            *detectors.__all__,
            *join.__all__,
            *mistakes.__all__,
            *syncbn.__all__,
        ]
    )
)
