"""Chapter 8: fault tolerance and many nodes.

``torchrun --max-restarts=3 --nproc-per-node=2 -m companion.elastic --snapshot
FILE`` runs :mod:`.cli`; :mod:`.snapshot` is what a restart needs,
:mod:`.sampler` where it resumes in an epoch, :mod:`.rendezvous`
how a restarted worker rejoins, :mod:`.trainer` the training
loop (:mod:`.steplog`, its instruments), :mod:`.agents` runs several torchrun agents from Python,
:mod:`.launchers` and :mod:`.kubernetes` check the launch files shipped in
``launch/`` (``LAUNCH_DIR``),
and :mod:`.published_job`
the mistakes of a published torchrun job.
"""

# Every module's public names, re-exported: ``from companion.elastic import ...``.
from . import (
    agents,
    cli,
    kubernetes,
    launchers,
    published_job,
    rendezvous,
    sampler,
    snapshot,
    steplog,
    trainer,
)
from .agents import *  # noqa: F401,F403
from .cli import *  # noqa: F401,F403
from .kubernetes import *  # noqa: F401,F403
from .launchers import *  # noqa: F401,F403
from .published_job import *  # noqa: F401,F403
from .rendezvous import *  # noqa: F401,F403
from .sampler import *  # noqa: F401,F403
from .snapshot import *  # noqa: F401,F403
from .steplog import *  # noqa: F401,F403
from .trainer import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *snapshot.__all__,
            *sampler.__all__,
            *rendezvous.__all__,
            *agents.__all__,
            *trainer.__all__,
            *steplog.__all__,
            *cli.__all__,
            *launchers.__all__,
            *kubernetes.__all__,
            *published_job.__all__,
        ]
    )
)
