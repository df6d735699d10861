"""Parameters that need care: tied, frozen and unused ones, on a small model built for it.

Used in: chapter 6.

:class:`TiedFrozenUnused` is a small MLP with one of each: a weight shared
by two layers (tied), a frozen layer, a parameter that ``forward`` never
uses, and a buffer. :func:`care_worker` wraps it in each step of the chapter
and reports what happened: which parameters were communicated, in which
bucket, which gradients stayed ``None``, and the error an unused parameter
raises without ``find_unused_parameters``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_int
from ..core.training import set_seed
from ..ddp.unused import UnusedParameters
from .training import wrap

__all__ = ["TiedFrozenUnused", "care_worker"]


class TiedFrozenUnused(nn.Module):
    """An MLP whose ``head`` reuses ``body``'s weight, with a frozen layer, a buffer and
    (``unused=True``) a parameter ``unused`` that forward never touches."""

    def __init__(self, unused: bool = True, width: int = 16):
        check_int(width, "width")
        super().__init__()
        self.embed = nn.Linear(28 * 28, width)
        self.body = nn.Linear(width, width)
        self.frozen = nn.Linear(width, width).requires_grad_(False)
        self.head = nn.Linear(width, width, bias=False)
        self.head.weight = self.body.weight  # tied: one parameter, used twice
        self.out = nn.Linear(width, 10)
        if unused:
            self.unused = nn.Parameter(torch.ones(5))
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.embed(X.flatten(1)))
        h = F.relu(self.frozen(F.relu(self.body(h)))) * self.scale
        return self.out(F.relu(self.head(h)))


def care_worker(
    rank: int, world_size: int, X: torch.Tensor, y: torch.Tensor, bucket_cap_mb: float = 0.001
) -> dict:
    """Worker: one step of :class:`TiedFrozenUnused` under each wrapper, what it did, and
    what the next forward pass says (an unused parameter is named there)."""
    seen = {}
    for variant, options in (
        ("HookedDDP", {}),
        ("BucketedDDP", {}),
        ("BucketedDDP", {"find_unused_parameters": True}),
    ):
        set_seed(0)
        net = wrap(TiedFrozenUnused(), variant, bucket_cap_mb, **options)
        name = variant + (" (find_unused_parameters)" if options else "")
        F.cross_entropy(net(X), y).backward()  # finish() runs at its end, once complete
        seen[name] = {
            "buckets": [b.names for b in getattr(net, "buckets", [])],
            "no gradient": [n for n, p in net.module.named_parameters() if p.grad is None],
            "all-reduces": net.allreduces,
        }
        try:
            net(X)  # the next step: an incomplete last step is named here, as by torch
        except UnusedParameters as err:
            seen[name] = {"error": str(err)}
    return seen
