"""Chapter 7: the scaling study, every method at every device count, done right."""

from . import (
    analysis,
    breakeven,
    cli,
    confounds,
    driver,
    methods,
    plots,
    projection,
    schedule,
)
from .analysis import *
from .breakeven import *
from .cli import *
from .confounds import *
from .driver import *
from .methods import *
from .plots import *
from .projection import *
from .schedule import *

__all__ = list(
    dict.fromkeys(
        [
            *schedule.__all__,
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
