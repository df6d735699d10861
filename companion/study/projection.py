"""Projections to many devices from the alpha-beta model, beside published figures.

Used in: chapter 7.

A *projection* is not a measurement: it takes a step's measured compute
time and chapter 3's fitted link (``alpha``, ``beta``) and predicts the step
at ``p`` devices as compute plus one ring all-reduce of the gradients
(:func:`~companion.collectives.costmodel.predict`), or, when DDP overlaps
the all-reduce with the backward pass, as the larger of the two. It assumes
the link stays the same at every ``p`` (one switch, no second tier of
network), which real clusters do not offer: read it as a lower bound on the
time. :data:`PUBLISHED` holds what others measured, with their sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..collectives.costmodel import predict
from ..core.checks import check_int, check_positive

__all__ = ["PUBLISHED", "Projection", "per_doubling", "plot_projection", "project"]


class Projection(NamedTuple):
    """A projected step at ``world_size`` devices (weak scaling: same per-device batch)."""

    world_size: int
    compute: float
    comm: float
    step: float
    efficiency: float  # compute / step: the fraction of ideal throughput per device


def project(
    world_sizes: Sequence[int],
    compute: float,
    nbytes: float,
    alpha: float,
    beta: float,
    overlap: bool = False,
    algorithm: str = "ring",
) -> list[Projection]:
    """The step at each world size: ``compute + allreduce`` (or their max with ``overlap``)."""
    check_positive(compute, "compute", "give a measured compute time per step, in seconds")
    out = []
    for p in world_sizes:
        check_int(p, "world_size")
        comm = predict(algorithm, p, nbytes, alpha, beta)
        step = max(compute, comm) if overlap else compute + comm
        out.append(Projection(p, compute, comm, step, compute / step))
    return out


PUBLISHED = {
    "ultrascale": {
        "source": "N. Tazi et al., The Ultra-Scale Playbook: Training LLMs on GPU "
        "Clusters (Hugging Face, 2025), figure 'dp_scaling' of the data-parallelism "
        "section",
        "url": "https://huggingface.co/spaces/nanotron/ultrascale-playbook",
        "what": "throughput in tokens/s per GPU against the data-parallel degree "
        "(an LLM trained with data parallelism)",
        "devices": (8, 16, 32, 64, 128, 256),
        "per_device": (40149.94, 37609.69, 35367.61, 31112.23, 26446.44, 15700.38),
    },
    "ddp-paper": {
        "source": "S. Li et al., PyTorch Distributed: Experiences on Accelerating Data "
        "Parallel Training, PVLDB 13(12), 2020 (arXiv:2006.15704)",
        "url": "https://arxiv.org/abs/2006.15704",
        "what": "the abstract: DDP, 'when configured appropriately', attains "
        "'near-linear scalability using 256 GPUs'; the per-GPU-count values of its "
        "figures are not reproduced here (we could not check them)",
    },
}


def per_doubling(devices: Sequence[int], per_device: Sequence[float]) -> list[tuple[int, float]]:
    """``(devices, relative drop)`` of per-device throughput at each doubling."""
    if len(devices) != len(per_device) or len(devices) < 2:
        raise ValueError("give matching devices and throughputs, at least two of each")
    return [
        (p1, 1 - t1 / t0)
        for (p0, t0), (p1, t1) in zip(zip(devices, per_device), zip(devices[1:], per_device[1:]))
        if p1 == 2 * p0
    ]


def plot_projection(projections: dict[str, list[Projection]], title: str = ""):
    """Per-device throughput relative to 8 devices: projections and the playbook's figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, proj in projections.items():
        at8 = next(q.efficiency for q in proj if q.world_size == 8)
        ax.plot(
            [q.world_size for q in proj],
            [q.efficiency / at8 for q in proj],
            marker="o",
            linestyle="--",
            label=f"PROJECTION: {label}",
        )
    pub = PUBLISHED["ultrascale"]
    ax.plot(
        pub["devices"],
        [t / pub["per_device"][0] for t in pub["per_device"]],
        marker="s",
        color="k",
        label="published: Ultra-Scale Playbook (LLM, tokens/s/GPU)",
    )
    ax.set_xscale("log", base=2)
    ax.set_xticks(pub["devices"], [str(p) for p in pub["devices"]])
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("devices")
    ax.set_ylabel("throughput per device\n(relative to 8 devices)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
