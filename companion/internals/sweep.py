"""Which bucket size? Chapter 3's alpha-beta model, run over the buckets of a real model.

Used in: chapter 6.

Small buckets start communicating early but pay the latency ``alpha`` many
times; one big bucket pays it once but cannot start before backward ends.
:func:`predict_step` plays a step out with the cost model: backward finishes
the gradients at a steady rate, in reverse order, over ``backward_s``
seconds; a bucket is ready when its last gradient is; the all-reduces run
one after another, each costing ``messages * alpha + volume * nbytes * beta``
(:func:`~companion.collectives.costmodel.predict`). The step's backward and
communication end when both the compute and the last all-reduce are done.
:func:`best_bucket_cap` is the cap with the smallest predicted time.

The benchmark model is :func:`mlp`: a deep stack of square linear layers
(about 17 MB of float32 gradients by default) whose gradients are ready at
about the steady rate the model assumes.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ..collectives.costmodel import predict
from ..core.checks import check_int, check_positive
from ..core.models import MODELS, get_model
from .buckets import assign_buckets

__all__ = [
    "mlp",
    "get_bench_model",
    "bucket_sizes",
    "predict_step",
    "best_bucket_cap",
    "plot_sweep",
]


def mlp(width: int = 512, depth: int = 16, num_classes: int = 10) -> nn.Sequential:
    """``depth`` linear layers of ``width`` units with ReLU, on 28x28 images."""
    check_int(width, "width")
    check_int(depth, "depth")
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(28 * 28, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, num_classes))


def get_bench_model(name: str) -> nn.Module:
    """``"mlp"`` (:func:`mlp`) or a model of :data:`~companion.core.models.MODELS`."""
    if name == "mlp":
        return mlp()
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose mlp or one of {', '.join(MODELS)}")
    return get_model(name)


def bucket_sizes(net: nn.Module, bucket_cap_mb: float) -> list[int]:
    """Bytes of each bucket that ``BucketedDDP(net, bucket_cap_mb)`` would build, in order."""
    params = [p for p in net.parameters() if p.requires_grad]
    return [
        sum(params[i].numel() * params[i].element_size() for i in group)
        for group in assign_buckets(params, bucket_cap_mb)
    ]


def _check_predict(sizes: Sequence[int], backward_s: float) -> int:
    check_positive(backward_s, "backward_s", "give the measured seconds of backward")
    if sum(sizes) <= 0:
        raise ValueError("the buckets hold no bytes: give bucket_sizes of a model")
    return sum(sizes)


def predict_step(
    sizes: Sequence[int], backward_s: float, alpha: float, beta: float, world_size: int
) -> float:
    """Seconds from the start of backward until compute and every all-reduce are done."""
    total, produced, free = _check_predict(sizes, backward_s), 0, 0.0
    for nbytes in sizes:
        produced += nbytes
        ready = backward_s * produced / total  # gradients come at a steady rate
        free = max(ready, free) + predict("dist.all_reduce", world_size, nbytes, alpha, beta)
    return max(backward_s, free)


def best_bucket_cap(
    net: nn.Module,
    caps: Sequence[float],
    backward_s: float,
    alpha: float,
    beta: float,
    world_size: int,
) -> tuple[float, dict[float, float]]:
    """The cap (MiB) with the smallest :func:`predict_step`, and every cap's prediction."""
    if not caps:
        raise ValueError("give at least one bucket cap in MiB")
    predicted = {
        cap: predict_step(bucket_sizes(net, cap), backward_s, alpha, beta, world_size)
        for cap in caps
    }
    return min(predicted, key=predicted.get), predicted


def _check_sweep(caps: Sequence[float], measured: dict, predicted: Sequence[float]) -> None:
    lengths = {"predicted": len(predicted), **{k: len(v) for k, v in dict(measured).items()}}
    if not caps or any(n != len(caps) for n in lengths.values()):
        raise ValueError(
            f"give one time per bucket cap: {len(caps)} caps, but lengths {lengths}; "
            f"pass the caps and the times measured for them"
        )


def plot_sweep(
    caps: Sequence[float],
    measured: dict[str, Sequence[float]],
    predicted: Sequence[float],
    title: str = "",
):
    """Step time (ms) against bucket cap: measured lines per variant, the model dashed."""
    _check_sweep(caps, measured, predicted)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, seconds in measured.items():
        ax.plot(caps, [s * 1e3 for s in seconds], "o-", label=f"{name} (measured)")
    ax.plot(caps, [s * 1e3 for s in predicted], "k--", label="alpha-beta model")
    best = caps[min(range(len(caps)), key=lambda i: predicted[i])]
    ax.axvline(best, color="k", lw=0.8, alpha=0.5)
    ax.set(xscale="log", xlabel="bucket cap (MiB)", ylabel="ms per step")
    ax.set_title(title or f"bucket-size sweep (model's best: {best:g} MiB)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
