"""companion: the tested code of *Data-parallel training in PyTorch, from scratch*.

Each module holds one topic and names the chapter that uses it:

==================  ==========================================================
``devices``         real or virtual devices, backend choice, hardware labels
``profiles``        the ``ci`` / ``cpu`` / ``gpu`` sizes of every chapter
``data``            Fashion-MNIST, the offline MNIST sample, two iterators
``models``          LeNet, the small-image ResNet-18, the DDP seed's ConvNet
``train``           one-device training, evaluation, honest timing
``results``         per-epoch records, summary table, ``plot_scaling``
``show``            the package's own source, rendered in a notebook
``split``           ch. 2: a batch split by hand across devices, in one process
``split_fast``      ch. 2: the same step with fewer, fused operations
``dataparallel``    ch. 4: ``nn.DataParallel``'s forward pass rebuilt in four steps
``dataparallel_train``  ch. 4: concise training with ``nn.DataParallel``
``dataparallel_pitfalls``  ch. 4: helpers for its pitfalls (devices, saving, loss)
``bench``           benchmarks: ``python -m companion.bench --help``
==================  ==========================================================
"""

from .devices import (
    backend_for,
    describe_devices,
    gpu_count,
    hardware_label,
    try_devices,
)
from .profiles import PROFILES, Profile, describe_setup, get_profile
from .results import Record, load_records, plot_scaling, save_records, summarize
from .show import show

__version__ = "0.1.0"

__all__ = [
    "backend_for",
    "describe_devices",
    "gpu_count",
    "hardware_label",
    "try_devices",
    "PROFILES",
    "Profile",
    "describe_setup",
    "get_profile",
    "Record",
    "load_records",
    "plot_scaling",
    "save_records",
    "summarize",
    "show",
]
