"""Profiles: one switch that sizes every chapter for the machine it runs on.

Used in: every chapter (chapter 1 introduces it).

========  ==============================  ==================================  ======
profile   data                            model                               epochs
========  ==============================  ==================================  ======
``ci``    offline MNIST sample (5,000)    LeNet                               3
``cpu``   Fashion-MNIST (offline sample   LeNet                               5
          when there is no network)
``gpu``   Fashion-MNIST                   ResNet-18 (small-image) and LeNet   10
========  ==============================  ==================================  ======

The profile comes from ``BOOK_PROFILE`` when it is set, else from the
hardware: ``gpu`` when CUDA is available, ``cpu`` otherwise. CI and the
committed notebook outputs use ``BOOK_PROFILE=ci``. ``BOOK_DATA`` replaces
the profile's data set, e.g. ``BOOK_DATA=synthetic`` to time the GPU path
offline (``make gpu-check``). ``BOOK_PRECISION`` replaces the profile's
precision, e.g. ``BOOK_PRECISION=fp16`` to run the GPU path as the ``gpu``
profile runs it on Colab's T4 (no bf16 there) on a newer GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .devices import gpu_count, hardware_label

__all__ = ["Profile", "PROFILES", "DATASETS", "get_profile", "describe_setup"]


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

    @property
    def model(self) -> str:
        """The main model of the profile (the first of ``models``)."""
        return self.models[0]


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
        epochs=5,
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
        device_counts=(1,),  # replaced by 1 .. all GPUs in get_profile
        precision="auto",  # bf16 (or fp16 on older GPUs): chapter 1's fast baseline
        channels_last=True,
        notes="one or more CUDA GPUs",
    ),
}


def get_profile(name: str | Profile | None = None) -> Profile:
    """The profile ``name``, else ``$BOOK_PROFILE``, else one fit for the hardware.

    For ``gpu`` the device counts are ``1 .. number of GPUs``. An unknown name
    raises ``ValueError`` listing the valid ones; a :class:`Profile` is
    returned as it is, so every function can take either.
    """
    if isinstance(name, Profile):
        return name
    if isinstance(name, str) and not name.strip():
        raise ValueError(
            f"profile name {name!r} is empty: pass one of {', '.join(sorted(PROFILES))}, "
            f"or None to let $BOOK_PROFILE or the hardware choose"
        )
    chosen = name if name is not None else os.environ.get("BOOK_PROFILE", "").strip()
    if not chosen:
        chosen = "gpu" if gpu_count() > 0 else "cpu"
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
    if key == "gpu":
        gpus = max(1, gpu_count())
        profile = replace(profile, device_counts=tuple(range(1, gpus + 1)))
    return profile


_FALLBACK = {"cpu": " (the offline sample without a network: see the 'data:' line)"}


def describe_setup(profile: Profile | None = None) -> str:
    """The notice printed atop every chapter: profile, hardware, and what they mean."""
    profile = get_profile(profile)
    gpus = gpu_count()
    if gpus >= 2:
        meaning = f"{gpus} GPUs: multi-device cells run on real, distinct GPUs"
    elif gpus == 1:
        meaning = (
            "one GPU: 'several devices' are virtual (the GPU repeated), and several "
            "processes share\nthe CPU (gloo; nccl needs a GPU per process): same "
            "results, no speed-up"
        )
    else:
        meaning = (
            "no GPU: 'several devices' are virtual CPU devices or CPU processes: "
            "same results, no speed-up"
        )
    return (
        f"profile '{profile.name}' ({profile.notes})\nhardware: {hardware_label()}\n"
        f"{meaning}\n"
        f"data set {profile.dataset}{_FALLBACK.get(profile.name, '')}\n"
        f"model {' + '.join(profile.models)}, "
        f"{profile.epochs} epochs, batch {profile.batch_size}, lr {profile.lr}, "
        f"device counts {list(profile.device_counts)}, math {profile.precision}"
        f"{', channels_last' if profile.channels_last else ''}"
    )
