"""Profiles: one switch that sizes every chapter for the machine it runs on.

Used in: every chapter (chapter 1 introduces it).

=============  ==============================  ================================  ======
profile        data                            model                             epochs
=============  ==============================  ================================  ======
``ci``         offline MNIST sample (5,000)    LeNet                             3
``cpu``        Fashion-MNIST (offline sample   LeNet                             5
               when there is no network)
``gpu``        Fashion-MNIST                   ResNet-18 (small-image), LeNet    10
               (LeNet: processes on the CPU)
``rehearsal``  as ``ci``, in fp16              LeNet with BatchNorm, LeNet       2
               (LeNet: processes on the CPU)
=============  ==============================  ================================  ======

The profile comes from ``BOOK_PROFILE`` when it is set, else from the
hardware: ``gpu`` when CUDA is available, ``cpu`` otherwise. CI and the
committed notebook outputs use ``BOOK_PROFILE=ci``.

Device counts follow the GPUs (a number :func:`get_profile` takes, so that
every count of GPUs can be tried without them): under ``gpu``, ``1 .. all
GPUs`` on two or more, and ``(1, 2)`` on one GPU, whose second device is
*virtual* (:meth:`Profile.virtual`). Processes compute on a GPU each only
when every count has a GPU per process; otherwise (one GPU) every process
run of the profile uses gloo on the CPU with the profile's last model, for
at most the ``cpu`` profile's epochs (:attr:`Profile.processes`):
nccl refuses two ranks on one GPU, and gloo handles only ``broadcast`` and
``all_reduce`` for CUDA tensors (torch's backend table), not the
send/receive of chapter 3 or the gathers of chapter 9. ``rehearsal`` is
what CI runs for the commonest reader, Colab with one GPU (a T4): the
``gpu`` profile's one-GPU device counts and process plan, fp16 with a loss
scaler as on a T4, at the ``ci`` profile's sizes, on the CPU, with two models as
``gpu`` has (LeNet with BatchNorm in the chapter's own cells, LeNet in the processes), so
that a cell giving a process run the chapter's model instead of ``processes.model`` fails.

``BOOK_DATA`` replaces the profile's data set, e.g. ``BOOK_DATA=synthetic`` to time the GPU path
offline (``make gpu-check``). ``BOOK_PRECISION`` replaces the profile's
precision, e.g. ``BOOK_PRECISION=fp16`` to run the GPU path as the ``gpu``
profile runs it on Colab's T4 (no bf16 there) on a newer GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .devices import gpu_count, hardware_label

__all__ = [
    "Profile",
    "ProcessPlan",
    "PROFILES",
    "DATASETS",
    "get_profile",
    "gpu_device_counts",
    "describe_setup",
]


@dataclass(frozen=True)
class Profile:
    """Sizes and settings for one kind of machine."""

    name: str
    dataset: str  # "mnist-sample", "fashion-mnist" or "synthetic"
    models: tuple[str, ...]
    epochs: int
    batch_size: int
    lr: float
    device_counts: tuple[int, ...]
    notes: str = field(default="", compare=False)
    precision: str = "fp32"  # "auto": the fast baseline's (chapter 1)
    channels_last: bool = False
    # Chapter 7's study trains every method x device count x seed: it takes a
    # random (training, test) subset of this size, or all of the data with None.
    study_samples: tuple[int, int] | None = None
    gpus: int = 0  # the GPUs the profile was made for (get_profile fills it in)

    @property
    def model(self) -> str:
        """The main model of the profile (the first of ``models``)."""
        return self.models[0]

    def virtual(self, n: int) -> bool:
        """Whether ``n`` devices are virtual here: more than the GPUs (one device is real)."""
        return n > max(1, self.gpus)

    @property
    def processes(self) -> ProcessPlan:
        """How every process run of the profile trains (:class:`ProcessPlan`): on a GPU
        each when every count has one, else all on the CPU alike, with the last model."""
        if max(self.device_counts) <= self.gpus:
            return ProcessPlan(None, "cuda:0", self.models[0], self.epochs, self.precision)
        # a GPU's precision is not the CPU's: there "auto" is fp32 (autocast rarely pays)
        precision = "fp32" if self.gpus else self.precision
        return ProcessPlan("gloo", "cpu", self.models[-1], min(self.epochs, CPU_EPOCHS), precision)


class ProcessPlan(NamedTuple):
    """One plan for every run of a comparison of processes (chapters 3, 5-10)."""

    backend: str | None  # None: the package's rule (nccl, a GPU per process); or "gloo"
    device: str  # where rank 0 computes, and so the one-device run compared with them
    model: str
    epochs: int  # on the CPU at most the cpu profile's, so a one-GPU chapter ends
    precision: str  # fp32 where a GPU's processes fall back to the CPU


CPU_EPOCHS = 5  # the cpu profile's

DATASETS = ("fashion-mnist", "mnist-sample", "synthetic")
PRECISION_CHOICES = ("auto", "fp32", "bf16", "fp16")  # what BOOK_PRECISION may say

PROFILES: dict[str, Profile] = {
    "ci": Profile(
        "ci",
        "mnist-sample",
        ("lenet",),
        epochs=3,
        batch_size=64,
        lr=0.1,
        device_counts=(1, 2),
        study_samples=(1200, 400),
        notes="CI, nbval and committed outputs: offline data, minutes on 2 CPU cores",
    ),
    "cpu": Profile(
        "cpu",
        "fashion-mnist",
        ("lenet",),
        epochs=CPU_EPOCHS,
        batch_size=128,
        lr=0.1,
        device_counts=(1, 2, 4),
        study_samples=(2400, 800),  # 45 trainings + 27 for the lr rules: minutes, not hours
        notes="a laptop or Colab without a GPU",
    ),
    "gpu": Profile(
        "gpu",
        "fashion-mnist",
        ("resnet18", "lenet"),
        epochs=10,
        batch_size=256,
        lr=0.1,
        device_counts=(1, 2),  # replaced by gpu_device_counts in get_profile
        precision="auto",  # bf16 (or fp16 on older GPUs): chapter 1's fast baseline
        channels_last=True,
        notes="one or more CUDA GPUs",
    ),
    "rehearsal": Profile(
        "rehearsal",
        "mnist-sample",
        ("lenet-bn", "lenet"),  # two models, BatchNorm first, as gpu's ResNet-18 and LeNet
        epochs=2,
        batch_size=64,
        lr=0.1,
        device_counts=(1, 2),  # replaced by gpu_device_counts in get_profile
        precision="fp16",  # a T4's: no bf16, so autocast with a loss scaler
        channels_last=True,  # as the gpu profile
        study_samples=(1200, 400),
        notes="CI: the gpu profile as one GPU (a T4) runs it, at ci sizes, on the CPU",
    ),
}
# The profiles whose device counts follow the GPUs, and the GPUs each assumes
# without being told: the rehearsal stands for one GPU whatever the machine has.
_FOLLOW_GPUS = {"gpu": None, "rehearsal": 1}


def _check_gpus(gpus: int) -> None:
    if type(gpus) is not int or gpus < 0:
        raise ValueError(
            f"gpus must be a count of GPUs (an integer >= 0), got {gpus!r}: e.g. 1 for "
            f"Colab's T4, or None for the GPUs torch sees"
        )


def gpu_device_counts(gpus: int) -> tuple[int, ...]:
    """``1 .. gpus`` on two or more GPUs; ``(1, 2)`` on one or none (2 is virtual)."""
    _check_gpus(gpus)
    return tuple(range(1, gpus + 1)) if gpus >= 2 else (1, 2)


def get_profile(name: str | Profile | None = None, *, gpus: int | None = None) -> Profile:
    """The profile ``name``, else ``$BOOK_PROFILE``, else one fit for the hardware.

    ``gpus`` (default: the GPUs torch sees) sizes it: for ``gpu`` the device
    counts are :func:`gpu_device_counts`. An unknown name raises
    ``ValueError`` listing the valid ones; a :class:`Profile` is returned as
    it is, so every function can take either.
    """
    if isinstance(name, Profile):
        return name
    if gpus is not None:
        _check_gpus(gpus)
    if isinstance(name, str) and not name.strip():
        raise ValueError(
            f"profile name {name!r} is empty: pass one of {', '.join(sorted(PROFILES))}, "
            f"or None to let $BOOK_PROFILE or the hardware choose"
        )
    seen = gpu_count() if gpus is None else gpus  # torch is asked once
    chosen = name if name is not None else os.environ.get("BOOK_PROFILE", "").strip()
    if not chosen:
        chosen = "gpu" if seen > 0 else "cpu"
    key = chosen.lower() if isinstance(chosen, str) else chosen
    if key not in PROFILES:
        valid = ", ".join(sorted(PROFILES))
        raise ValueError(
            f"unknown profile {chosen!r}; valid profiles are: {valid} "
            f"(set BOOK_PROFILE to one of them, or unset it to let the hardware choose)"
        )
    profile = PROFILES[key]
    # the environment's replacements: (variable, field, what it names, choices, a hint)
    for variable, name, kind, choices, hint in (
        ("BOOK_DATA", "dataset", "a data set", DATASETS, "synthetic works offline"),
        (
            "BOOK_PRECISION",
            "precision",
            "a precision",
            PRECISION_CHOICES,
            "fp16: as the gpu profile runs on a T4",
        ),
    ):
        if value := os.environ.get(variable, "").strip():
            if value not in choices:
                raise ValueError(
                    f"{variable}={value!r} is not {kind}; use one of "
                    f"{', '.join(choices)} ({hint}), or unset it"
                )
            profile = replace(profile, **{name: value})
    if gpus is None:
        gpus = _FOLLOW_GPUS.get(key) or seen
    profile = replace(profile, gpus=gpus)
    if key in _FOLLOW_GPUS:
        profile = replace(profile, device_counts=gpu_device_counts(gpus))
    return profile


_FALLBACK = {"cpu": " (the offline sample without a network: see the 'data:' line)"}


def describe_setup(profile: Profile | None = None) -> str:
    """The notice printed atop every chapter: profile, hardware, and what they mean."""
    profile = get_profile(profile)
    gpus, present = profile.gpus, gpu_count()
    if gpus >= 2:
        meaning = f"{gpus} GPUs: multi-device cells run on real, distinct GPUs"
    elif gpus == 1:
        meaning = (
            "one GPU: 'several devices' are virtual (the GPU named again), and every "
            "process run\ncomputes on the CPU (gloo; nccl needs a GPU per process): "
            "same results, no speed-up"
        )
    else:
        meaning = (
            "no GPU: 'several devices' are virtual CPU devices or CPU processes: "
            "same results, no speed-up"
        )
    if present != gpus:
        meaning += (
            f"\n(the profile assumes {gpus} GPU{'s' if gpus != 1 else ''}; this machine "
            f"has {present}: tensors live on {'the CPU' if not present else 'its GPUs'})"
        )
    virtual = [n for n in profile.device_counts if profile.virtual(n)]
    return (
        f"profile '{profile.name}' ({profile.notes})\nhardware: {hardware_label()}\n"
        f"{meaning}\n"
        f"data set {profile.dataset}{_FALLBACK.get(profile.name, '')}\n"
        f"model {' + '.join(profile.models)}, "
        f"{profile.epochs} epochs, batch {profile.batch_size}, lr {profile.lr}, "
        f"device counts {list(profile.device_counts)}"
        f"{f' (virtual: {virtual})' if virtual else ''}, math {profile.precision}"
        f"{', channels_last' if profile.channels_last else ''}"
    )
