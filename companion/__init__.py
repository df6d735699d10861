"""companion: the tested code of *Data-parallel training in PyTorch, from scratch*.

Each module holds one topic and names the chapter that uses it:

* ``devices``: real or virtual devices, backend choice, hardware labels (all)
* ``profiles``: the ``ci`` / ``cpu`` / ``gpu`` sizes of every chapter (all)
* ``data``: Fashion-MNIST, the offline MNIST sample, two iterators (all)
* ``models``: LeNet, the small-image ResNet-18, the DDP seed's ConvNet (all)
* ``train``: one-device training, evaluation, honest timing (1)
* ``results``: per-epoch records, summary table, ``plot_scaling`` (all)
* ``show``: the package's own source, rendered in a notebook (all)
* ``split``, ``split_fast``: a batch split by hand, in one process (2)
* ``launch``, ``supervise``: one launcher for worker processes (3, 5)
* ``tour``: point-to-point and collectives, run live (3)
* ``allreduce``: hand-written all-reduces over send/recv (3)
* ``costmodel``: the alpha-beta model of all-reduce time (3)
* ``partition``: ``DataPartitioner`` and ``average_gradients`` training (3)
* ``dataparallel``, ``dataparallel_train``, ``dataparallel_pitfalls``:
  ``nn.DataParallel`` rebuilt, used, and its pitfalls (4)
* ``ddp``, ``ddp_cli``, ``torchrun``: DistributedDataParallel training, from
  ``launch`` or ``torchrun`` (5)
* ``sampling``, ``detectors``, ``mistakes``: sampler shares, distributed
  evaluation, and detectors for the common DDP mistakes (5)
* ``checkpoint``, ``tblog``: atomic checkpoints, TensorBoard logs (5)
* ``bench``: benchmarks, ``python -m companion.bench --help``
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
