"""Chapter 4: ``nn.DataParallel``, rebuilt from its four steps, used, and its pitfalls."""

# Every module's public names, re-exported: ``from companion.dataparallel import ...``.
from . import pitfalls, rebuild, training
from .pitfalls import *  # noqa: F401,F403
from .rebuild import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            *rebuild.__all__,
            *training.__all__,
            *pitfalls.__all__,
        ]
    )
)
