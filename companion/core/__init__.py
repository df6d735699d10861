"""Used by every chapter: devices, profiles, data, models, precision and TF32, one-device
training and gradient clipping, freed memory kept for reuse (glibc), results, the noise rule
and speed targets, listings, whole lines."""

# compat first: it refuses a torch older than the book's floor, with a clear message.
from . import compat  # noqa: I001

# Every module's public names, re-exported: ``from companion.core import ...``.
from . import (
    allocator,
    batches,
    checks,
    clip,
    data,
    devices,
    figures,
    files,
    lines,
    listing,
    loaders,
    lr,
    models,
    noise,
    precision,
    profiles,
    results,
    tf32,
    training,
)
from .allocator import *  # noqa: F401,F403
from .batches import *  # noqa: F401,F403
from .compat import *  # noqa: F401,F403
from .checks import *  # noqa: F401,F403
from .clip import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .devices import *  # noqa: F401,F403
from .figures import *  # noqa: F401,F403
from .files import *  # noqa: F401,F403
from .lines import *  # noqa: F401,F403
from .listing import *  # noqa: F401,F403
from .loaders import *  # noqa: F401,F403
from .lr import *  # noqa: F401,F403
from .models import *  # noqa: F401,F403
from .noise import *  # noqa: F401,F403
from .precision import *  # noqa: F401,F403
from .profiles import *  # noqa: F401,F403
from .results import *  # noqa: F401,F403
from .tf32 import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *checks.__all__,
            *compat.__all__,
            *allocator.__all__,
            *devices.__all__,
            *tf32.__all__,
            *precision.__all__,
            *profiles.__all__,
            *data.__all__,
            *loaders.__all__,
            *batches.__all__,
            *models.__all__,
            *training.__all__,
            *clip.__all__,
            *lr.__all__,
            *results.__all__,
            *noise.__all__,
            *figures.__all__,
            *files.__all__,
            *lines.__all__,
            *listing.__all__,
        ]
    )
)
