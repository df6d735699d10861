"""The methods of chapters 1-6, behind one signature: train one run from scratch.

Used in: chapter 7.

Every runner takes a :class:`RunSpec` (data, model, device count, global
batch, learning rate, epochs, seed, precision) and returns the run's
:class:`~companion.core.results.Record` list, one per epoch. Each run builds
a freshly initialised model from ``seed``: no run inherits a model, its
BatchNorm statistics or its optimizer from the one before (seed 002's
``train(net, ...)`` does). :data:`METHODS` is a plain table, one
:class:`Method` per name. A later chapter declares a table of its own next
to its code (``STUDY_METHODS`` in chapter 9's ``companion.sharding.training``
and chapter 10's ``companion.slowlinks.training``); only the command line joins them
(``companion.commands``), so this chapter never imports a later one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

from ..collectives.partition import train_worker
from ..core.batches import rank_batch_size
from ..core.checks import check_choice, check_int
from ..core.data import Data
from ..core.devices import try_devices
from ..core.loaders import load_iters
from ..core.lr import LR_RULES, lr_schedule
from ..core.models import MODELS, get_model
from ..core.precision import PRECISIONS
from ..core.profiles import get_profile
from ..core.results import Record
from ..core.training import check_lr, set_seed
from ..core.training import train as train_one_device
from ..dataparallel.training import train as train_dataparallel
from ..ddp.training import ddp_worker
from ..internals.training import internals_worker
from ..runtime.launcher import launch
from ..split.training import train as train_split

__all__ = [
    "RunSpec",
    "Method",
    "METHODS",
    "run_method",
    "run_reference",
    "run_split",
    "run_allreduce",
    "run_dataparallel",
    "run_ddp",
    "run_internals",
    "run_processes",
    "per_process",
]


@dataclass(frozen=True)
class RunSpec:
    """One training run: ``n_devices`` devices share a global batch of ``global_batch``."""

    data: Data
    model: str
    n_devices: int
    global_batch: int
    lr: float  # the rate actually used (already scaled, if the study scales it)
    epochs: int
    seed: int = 0
    profile: str = "ci"
    base_lr: float | None = None  # the warm-up starts here (lr_rule "warmup")
    lr_rule: str = "none"
    warmup_epochs: int = 1
    timeout: float = 1800.0  # for runs in worker processes
    # one precision for every method of a comparison (fp32 in the default layout unless
    # asked): a method that cannot compute in it refuses instead of running another
    precision: str = "fp32"

    def __post_init__(self):
        check_choice(self.model, "model", MODELS)
        check_int(self.n_devices, "n_devices")
        rank_batch_size(self.global_batch, self.n_devices)  # raises unless it splits
        if self.global_batch > len(self.data.train):  # one short batch, reported as this one
            raise ValueError(
                f"global_batch {self.global_batch} is more than the {len(self.data.train)} "
                f"training samples: give more samples (--samples) or a smaller batch"
            )
        check_lr(self.lr)
        check_int(self.epochs, "epochs")
        check_int(self.seed, "seed", 0)
        check_choice(self.lr_rule, "lr_rule", LR_RULES)
        check_choice(self.precision, "precision", PRECISIONS)


class Method(NamedTuple):
    """A method of a study table: its runner, its chapter, and what it can do."""

    run: Callable[[RunSpec], list[Record]]
    chapter: int
    processes: bool  # one process per device (else one process, several devices)
    warmup: bool  # follows a per-step learning-rate schedule
    about: str = ""  # what the name stands for, in --help


def run_method(
    name: str, spec: RunSpec, catalog: Mapping[str, Method] | None = None
) -> list[Record]:
    """Train ``spec`` with method ``name`` of ``catalog`` (default :data:`METHODS`); its
    records carry ``name`` as method."""
    catalog = METHODS if catalog is None else catalog
    check_choice(name, "method", catalog)
    method = catalog[name]
    if spec.lr_rule == "warmup" and not method.warmup:
        able = [m for m, entry in catalog.items() if entry.warmup]
        raise ValueError(
            f"method {name!r} has no per-step learning-rate schedule, so no warm-up; "
            f"use lr_rule 'linear' or 'none' with it, or one of {able}"
        )
    return [replace(r, method=name) for r in method.run(spec)]


def _in_one_process(spec: RunSpec, train: Callable, count: int, **options) -> list[Record]:
    """``train(net, train_iter, test_iter, devices, ...)`` on a fresh seeded model and
    ``count`` devices of this process, with the iterators, lr and labels of ``spec``
    (``lr_schedule=True``: the spec's schedule)."""
    devices = try_devices(count, verbose=False)
    set_seed(spec.seed)
    net = get_model(spec.model).to(devices[0])
    train_iter, test_iter = load_iters(spec.data, spec.global_batch, devices[0], seed=spec.seed)
    if options.pop("lr_schedule", False):
        options["lr_schedule"] = _schedule(spec, len(train_iter))
    return train(
        net,
        train_iter,
        test_iter,
        devices,
        epochs=spec.epochs,
        lr=spec.lr,
        profile=spec.profile,
        model_name=spec.model,
        dataset=spec.data.name,
        precision=spec.precision,
        **options,
    )


def _schedule(spec: RunSpec, steps_per_epoch: int) -> Callable[[int], float]:
    base = spec.base_lr or spec.lr
    return lr_schedule(
        base, round(spec.lr / base), spec.lr_rule, steps_per_epoch, spec.warmup_epochs
    )


def run_reference(spec: RunSpec) -> list[Record]:
    """One device on the whole global batch: what every method must match."""

    def one_device(net, train_iter, test_iter, devices, **options) -> list[Record]:
        return train_one_device(net, train_iter, test_iter, device=devices[0], **options)

    return _in_one_process(
        spec,
        one_device,
        1,
        n_devices=spec.n_devices,  # labelled "reference" by run_method, as every method is
        channels_last=False,
        lr_schedule=True,
    )


def run_split(spec: RunSpec) -> list[Record]:
    """Chapter 2: one process splits each global batch over ``n_devices`` devices."""
    return _in_one_process(spec, train_split, spec.n_devices, lr_schedule=True)


def run_processes(worker: Callable, spec: RunSpec) -> list[Record]:
    """Rank 0's records of ``worker`` (chapters 3, 5, 6) on one process per device of ``spec``."""
    outcomes = launch(
        worker,
        spec.n_devices,
        spec.data,
        spec.profile,
        backend=get_profile(spec.profile).processes.backend,  # the CPU for all, on one GPU
        model=spec.model,
        global_batch=spec.global_batch,
        epochs=spec.epochs,
        lr=spec.lr,
        seed=spec.seed,
        precision=spec.precision,
        channels_last=False,
        timeout=spec.timeout,
    )
    return outcomes[0].records


def per_process(worker: Callable, chapter: int, about: str = "") -> Method:
    """A :class:`Method` that trains with ``worker`` on one process per device (a later
    chapter's table entry: ``per_process(partial(sharded_worker, method="ZeRO-3"), 9)``);
    ``about`` says what it is, in the study's ``--help``."""
    if not callable(worker):
        raise TypeError(f"worker must be a launch worker (a function of rank, ...), got {worker!r}")
    return Method(
        partial(run_processes, worker), chapter, processes=True, warmup=False, about=about
    )


def run_allreduce(spec: RunSpec) -> list[Record]:
    """Chapter 3: one process per device, gradients averaged by the hand-written ring."""
    return run_processes(train_worker, spec)


def run_dataparallel(spec: RunSpec) -> list[Record]:
    """Chapter 4: ``nn.DataParallel`` (or its rebuild without distinct GPUs)."""
    return _in_one_process(
        spec, train_dataparallel, spec.n_devices, verbose=False, channels_last=False
    )


def run_ddp(spec: RunSpec) -> list[Record]:
    """Chapter 5: ``DistributedDataParallel``, one process per device."""
    return run_processes(ddp_worker, spec)


def run_internals(spec: RunSpec) -> list[Record]:
    """Chapter 6: DDP rebuilt by hand (buckets, hooks, overlap), one process per device."""
    return run_processes(internals_worker, spec)


METHODS: dict[str, Method] = {  # name: Method(run, chapter, processes, warmup)
    "reference": Method(
        run_reference, 1, False, True, "one device, no communication: every speed-up's baseline"
    ),
    "split": Method(run_split, 2, False, True, "a batch split by hand over the devices"),
    "allreduce": Method(run_allreduce, 3, True, False, "processes, the hand-written ring"),
    "dataparallel": Method(run_dataparallel, 4, False, False, "nn.DataParallel, or its rebuild"),
    "ddp": Method(run_ddp, 5, True, False, "torch's DistributedDataParallel"),
    "internals": Method(run_internals, 6, True, False, "the rebuilt, bucketed DDP"),
}
