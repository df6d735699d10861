"""Chapter 7: the scaling study, every method at every device count, done right."""

from ..core.lr import LR_RULES, lr_schedule, scaled_lr, warmup_lr  # noqa: F401 (chapter 7's rules)
from . import (
    analysis,
    breakeven,
    cli,
    confounds,
    driver,
    methods,
    plots,
    projection,
)
from .analysis import *  # noqa: F401,F403
from .breakeven import *  # noqa: F401,F403
from .cli import *  # noqa: F401,F403
from .confounds import *  # noqa: F401,F403
from .driver import *  # noqa: F401,F403
from .methods import *  # noqa: F401,F403
from .plots import *  # noqa: F401,F403
from .projection import *  # noqa: F401,F403

__all__ = list(
    dict.fromkeys(
        [
            "LR_RULES",
            "lr_schedule",
            "scaled_lr",
            "warmup_lr",
            *methods.__all__,
            *driver.__all__,
            *analysis.__all__,
            *plots.__all__,
            *breakeven.__all__,
            *projection.__all__,
            *confounds.__all__,
            *cli.__all__,
        ]
    )
)
