"""companion: the tested code of *Data-parallel training in PyTorch, from scratch*.

The folders read like the table of contents; each module names the chapter
that uses it. Lower floors never import higher ones (``tests/test_layout.py``):

* ``core`` (every chapter): ``devices``, ``profiles``, ``data`` (data sets),
  ``loaders``, ``batches``, ``models``, ``training`` (one device),
  ``results``, ``files`` (atomic writes), ``listing`` (``show``)
* ``runtime`` (processes): ``group`` (backend, device, joining a group),
  ``launcher`` and ``supervise`` (worker processes from a notebook),
  ``torchrun`` (torchrun from Python), ``checkpoint``, ``tblog``
* ``split`` (chapter 2): ``naive``, ``fused``, ``training``
* ``collectives`` (chapter 3): ``tour``, ``allreduce``, ``costmodel``,
  ``partition``
* ``dataparallel`` (chapter 4): ``rebuild``, ``training``, ``pitfalls``
* ``ddp`` (chapter 5): ``config``, ``training``, ``cli``
  (``python -m companion.ddp``), ``sampling``, ``detectors``, ``mistakes``
* ``internals`` (chapter 6): ``naive``, ``hooks``, ``buckets``, ``care``,
  ``training``, ``sweep``, ``timeline`` (DDP rebuilt step by step)
* ``study`` (chapter 7): the scaling study, ``python -m companion.study``
* ``elastic`` (chapter 8): ``snapshot``, ``sampler``, ``trainer``, ``cli``
  (``python -m companion.elastic``), ``agents``, ``launchers``, ``published_job``
* ``sharding`` (chapter 9): ZeRO-1, 2 and 3 by hand, torch's ZeRO and FSDP2,
  the byte ledger, memory formulas, sharded checkpoints
* ``slowlinks`` (chapter 10): compression hooks, PowerSGD, local SGD, DiLoCo
* ``troubleshoot`` (appendix A): bounded demonstrations of what goes wrong
* ``commands``: the command lines' one table of every chapter's methods

The benchmarks that measure this code and the pictures drawn from its recorded
runs are tools, not taught code: they live beside it in ``companion_tools``
(``python -m companion_tools.bench --help``; ``companion_tools.pictures``).

Every subpackage re-exports its public names: ``from companion.split import
split_batch``.
"""

from .core.devices import describe_devices, gpu_count, hardware_label, try_devices
from .core.listing import show
from .core.profiles import PROFILES, Profile, describe_setup, get_profile
from .core.results import Record, load_records, plot_scaling, save_records, summarize
from .runtime.group import backend_for

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
