"""Chapter 4's backward pass drawn from a run: a reduce onto the first device.

Used in: chapter 4.

:func:`record_backward` runs one forward and backward of
:class:`~companion.dataparallel.rebuild.DataParallelByHand`'s four steps and follows
one parameter's gradient from each replica, on its own device, into ``net``'s one
``.grad`` on the first device; :func:`plot_backward` draws it. torch's
``nn.DataParallel`` does the same sum with ``Broadcast.backward``, a
``ReduceAddCoalesced`` onto ``device_ids[0]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from companion.core.devices import Device, as_devices
from companion.dataparallel.rebuild import gather, parallel_apply, replicate, scatter

from .dataparallel import _box
from .style import figure, rank_color

__all__ = ["BackwardTrace", "record_backward", "plot_backward"]


class BackwardTrace(NamedTuple):
    """One backward pass through ``DataParallelByHand``'s replicas, as :func:`record_backward`
    saw it, for one parameter of ``net``."""

    parameter: str  # the parameter followed, by name
    replicas: list[tuple[str, float]]  # each replica's gradient of it: device, norm
    grad: tuple[str, float]  # net's .grad after backward: device, norm
    summed: float  # largest |net's .grad - the replicas' gradients added on devices[0]|


def record_backward(
    net: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    devices: Sequence[Device],
    param: str | None = None,
) -> BackwardTrace:
    """One forward and backward of ``DataParallelByHand(net, devices)`` with the mean
    cross-entropy over ``(X, y)``, noting each replica's gradient of ``param`` (default:
    ``net``'s first parameter) on its own device, and what lands in ``net``'s ``.grad``.

    The replicas' tensors are not leaves (:func:`~companion.dataparallel.rebuild.replicate`):
    a hook on each sees that replica's gradient before autograd copies it to ``devices[0]``
    and adds it into the one ``.grad`` there. Leaves ``net``'s gradients set.
    """
    devices = as_devices(devices)
    names = [name for name, _ in net.named_parameters()]
    name = names[0] if param is None else param
    if name not in names:
        raise ValueError(f"the model has no parameter {name!r}; choose from {names[:6]}")
    chunks = scatter((X,), devices)
    used = devices[: len(chunks)]
    replicas = replicate(net, used)
    owner, _, attr = name.rpartition(".")
    grads: list = [None] * len(replicas)
    for i, r in enumerate(replicas):
        tensor = getattr(r.get_submodule(owner), attr)
        tensor.register_hook(lambda g, i=i: grads.__setitem__(i, g.detach().clone()))
    y_hat = gather(parallel_apply(replicas, chunks, used), devices[0])
    net.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(y_hat, y.to(y_hat.device)).backward()
    grad = net.get_parameter(name).grad
    added = sum(g.to(grad.device) for g in grads)
    return BackwardTrace(
        parameter=name,
        replicas=[(str(g.device), g.norm().item()) for g in grads],
        grad=(str(grad.device), grad.norm().item()),
        summed=(grad - added).abs().max().item(),
    )


def plot_backward(trace: BackwardTrace, title: str | None = None):
    """Each replica's gradient on its device, and the arrows of the reduce that adds them
    into the one ``.grad`` on the first device. Returns the figure."""
    k = len(trace.replicas)
    fig, ax = figure(8.0, 1.0 * k + 1.4)
    for i, (where, norm) in enumerate(trace.replicas):
        _box(ax, 0, i, 0.8, f"replica {i}'s gradient\non {where}\nnorm {norm:.4f}", rank_color(i))
        ax.annotate(
            "",
            xy=(1.55, (k - 1) / 2),
            xytext=(0.45, i),
            arrowprops=dict(arrowstyle="->", color=rank_color(i)),
        )
    where, norm = trace.grad
    _box(
        ax,
        2,
        (k - 1) / 2,
        min(k - 0.3, 1.6),
        f"net's .grad, on {where} only\nnorm {norm:.4f}\n= the replicas' sum\n"
        f"(largest difference {trace.summed:.1e})",
        "grey",
    )
    ax.text(1, k - 0.35, "copied to the first device and added there", ha="center", fontsize=8)
    ax.set_xlim(-0.5, 2.5)
    ax.set_ylim(k - 0.2, -0.6)
    ax.set_xticks([0, 2], ["backward in each replica", "one reduce, onto the first device"])
    ax.xaxis.tick_top()
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    fig.suptitle(title or f"backward of one call: {trace.parameter}'s gradient", fontsize=10)
    fig.tight_layout()
    return fig
