"""Ranks with different numbers of batches: a step that every rank takes, and torch's ``Join``.

Used in: chapter 5.

DDP's all-reduce needs every rank. When the ranks hold different numbers of
batches (shards split by hand, a loader that filters or streams per rank; a
``DistributedSampler`` pads every rank to the same length, so it is not a
cause), the first rank to run out leaves the loop while the others wait in
their next all-reduce for a partner that never comes, until the process group's
timeout (under ``companion.runtime.launch``, whose finished ranks wait in a
barrier; a script whose finished rank exits fails sooner, with a lost connection).

:func:`train_joined` is the answer by hand, with chapter 3's tools: every rank
takes every step until all are done. One all-reduce per step carries, in one
flat vector, each parameter's gradient times this rank's sample count (zeros on
a rank that has run out), one flag per parameter (did it get a gradient here)
and the sample count. Dividing by the total count gives the gradient of the mean
loss over the samples really seen in that step; a parameter that no rank's
backward reached gets no gradient, as in one process; a step whose total count
is 0 ends the loop on every rank at once. Every rank steps its optimizer with
the same gradient, so replicas that start equal (the same seed, or rank 0's
weights broadcast) stay equal. :func:`one_process_joined` is the
same training in one process: step ``t`` on the ``t``-th batch of every rank
that still has one.

Torch's answer is ``torch.distributed.algorithms.Join`` around the loop of a
DDP model: a rank that has run out shadows the others' all-reduces with zeros
until every rank has joined, and at the end the last rank to join broadcasts
its parameters (not its optimizer state: a rank that joined early keeps the
momentum or Adam moments of its own last step). DDP still divides by a rank count, not by samples: with
``divide_by_initial_world_size=True`` (the default) a step's gradient is the
sum of the active ranks' mean gradients over the initial world size (smaller
than their mean once a rank has joined); with ``False``, over the number of
active ranks (their mean, each rank counted once whatever its batch size).
:func:`one_process_joined` computes both in one process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms import Join
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice, check_int, check_module
from ..core.training import set_seed

__all__ = [
    "uneven_shares",
    "train_joined",
    "train_uneven",
    "one_process_joined",
    "expected_params",
    "join_worker",
    "JOINS",
]

Batches = Sequence[tuple[torch.Tensor, torch.Tensor]]
#: how ``join_worker`` handles ranks that run out: by hand, torch's Join (each setting),
#: or not at all (the ranks with more batches wait until the timeout)
JOINS = ("by hand", "by the loop", "torch Join", "torch Join, divide by active ranks", "no join")
#: the optimizers the equivalence checks step with (chapter 9's checks take these too)
OPTIMIZERS = {
    "Adam": (torch.optim.Adam, {"lr": 1e-2}),
    "SGD momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
}


def uneven_shares(counts: Sequence[int], batch: int = 3, seed: int = 0) -> list[list[tuple]]:
    """Rank ``r``'s batches: ``counts[r]`` batches of ``batch + r`` float64 images each."""
    if len(counts) == 0:
        raise ValueError("counts must give each rank's number of batches, got []")
    g = torch.Generator().manual_seed(seed)
    return [
        [
            (
                torch.randn(batch + r, 1, 28, 28, generator=g, dtype=torch.float64),
                torch.randint(0, 10, (batch + r,), generator=g),
            )
            for _ in range(check_int(n, f"counts[{r}]", 0))
        ]
        for r, n in enumerate(counts)
    ]


def _flat_step(params: list[nn.Parameter], samples: int) -> int:
    """Sum ``samples * grad``, the flags and the counts over the ranks in one all-reduce;
    leave each parameter the gradient of the mean loss over every rank's samples (or
    none, if no rank's backward reached it). Returns the step's total sample count."""
    grads = [torch.zeros_like(p) if p.grad is None else p.grad * samples for p in params]
    flags = [float(p.grad is not None) for p in params]
    counts = grads[0].new_tensor([*flags, samples])
    flat = torch.cat([*(g.reshape(-1) for g in grads), counts])
    dist.all_reduce(flat)
    total, start = int(flat[-1]), 0
    for p, g, flag in zip(params, grads, flat[-1 - len(params) : -1]):
        p.grad = flat[start : start + g.numel()].view_as(p) / max(total, 1) if flag else None
        start += g.numel()
    return total


def _check_joined(net: nn.Module, name: str) -> None:
    check_module(net, "net")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{name} needs a process group: call it inside a worker started by "
            "companion.runtime.launch (or torchrun)"
        )


def _check_shares(shares) -> None:
    if not shares or not any(len(batches) for batches in shares):
        raise ValueError(
            "shares must hold each rank's list of (X, y) batches, at least one batch in all "
            "(uneven_shares builds them)"
        )


def train_joined(net: nn.Module, optimizer: torch.optim.Optimizer, batches: Batches) -> int:
    """Train on this rank's ``batches``, however many; a rank that has run out takes part
    in the others' steps with zeros. Returns the steps every rank took."""
    _check_joined(net, "train_joined")
    params = [p for p in net.parameters() if p.requires_grad]
    steps, mine = 0, iter(batches)
    while True:
        optimizer.zero_grad(set_to_none=True)
        batch, samples = next(mine, None), 0
        if batch is not None:
            X, y = batch
            F.cross_entropy(net(X), y).backward()
            samples = len(y)
        if _flat_step(params, samples) == 0:  # nobody had a batch: every rank stops here
            return steps
        optimizer.step()
        steps += 1


def train_uneven(
    model: nn.Module, optimizer: Any, batches: Batches, empty: tuple[torch.Tensor, torch.Tensor]
) -> int:
    """The same join for a model that averages its gradients over the world size (torch's
    DDP, chapter 6's wrappers without ``weigh_by_samples``, chapter 9's stages): a
    one-number all-reduce agrees on the step's sample count (0: every rank stops); a rank
    that has run out runs ``empty``, a batch of no samples (the model must accept one:
    ``x.flatten(1)``, not ``x.view(x.size(0), -1)``), so that it makes the same
    collectives with zero gradients; each loss is weighed by the world size over that
    count, so the averaged gradient is the mean over the samples seen."""
    _check_joined(model, "train_uneven")
    steps, mine, n = 0, iter(batches), dist.get_world_size()
    while True:
        X, y = next(mine, None) or empty
        total = torch.tensor([float(len(y))], dtype=torch.float64, device=X.device)  # nccl
        dist.all_reduce(total)
        if total.item() == 0:
            return steps
        optimizer.zero_grad(set_to_none=True)
        (F.cross_entropy(model(X), y, reduction="sum") * n / total.item()).backward()
        optimizer.step()
        steps += 1


def one_process_joined(
    net: nn.Module, optimizer: torch.optim.Optimizer, shares, how: str = "by hand"
) -> None:
    """One process: step ``t`` on the ``t``-th batches of the ranks that have one. By hand,
    the mean loss over all their samples; as DDP under torch's ``Join``, each active rank's
    mean gradient, summed and divided by the world size (``"torch Join"``) or by the
    number of active ranks."""
    _check_shares(shares)
    for t in range(max(len(batches) for batches in shares)):
        here = [batches[t] for batches in shares if t < len(batches)]
        optimizer.zero_grad(set_to_none=True)
        if how in ("by hand", "by the loop"):  # one batch of everybody's samples
            here = [(torch.cat([X for X, _ in here]), torch.cat([y for _, y in here]))]
        for X, y in here:
            F.cross_entropy(net(X), y).backward()  # adds each one's mean gradient
        divide = len(shares) if how == "torch Join" else len(here)
        for p in net.parameters():
            if p.grad is not None:
                p.grad /= divide
        optimizer.step()


def _model_and_optimizer(make_model: Callable[[], nn.Module], optimizer: str):
    set_seed(0)  # the same model on every rank and in one process
    net = make_model().double()
    cls, options = OPTIMIZERS[optimizer]
    return net, cls([p for p in net.parameters() if p.requires_grad], **options)


def expected_params(
    shares, make_model: Callable[[], nn.Module], how: str = "by hand", optimizer: str = "Adam"
) -> torch.Tensor:
    """What :func:`join_worker` must return for ``how``, from :func:`one_process_joined`:
    the flat parameters of ``make_model()`` (seeded, float64) after its steps."""
    _check_worker(how, optimizer)
    if how == "no join":
        raise ValueError("a run with no join has no result: it hangs; pick another how")
    net, opt = _model_and_optimizer(make_model, optimizer)
    one_process_joined(net, opt, shares, how)
    return torch.cat([p.detach().reshape(-1) for p in net.parameters() if p.requires_grad])


def _check_worker(how: str, optimizer: str) -> None:
    check_choice(how, "how", JOINS)
    check_choice(optimizer, "optimizer", OPTIMIZERS)


def join_worker(
    rank: int,
    world_size: int,
    shares,
    make_model: Callable[[], nn.Module],
    how: str = "by hand",
    optimizer: str = "Adam",
    wrapper: Callable[[nn.Module], nn.Module] = DDP,
) -> dict[str, Any]:
    """Worker: train ``make_model()`` (seeded, float64) on ``shares[rank]`` as ``how`` says;
    ``{"params": the trainable parameters, flat, "steps": steps taken}``. The ways through
    torch's DDP need a model whose forward uses every parameter. ``"by the loop"`` runs
    :func:`train_uneven` around ``wrapper(net)``: torch's DDP, or another wrapper that
    averages over the world size (chapter 6's)."""
    _check_worker(how, optimizer)
    if not callable(wrapper):
        raise TypeError(
            f"wrapper must wrap a model (DDP, or a class of chapter 6), got {wrapper!r}"
        )
    net, opt = _model_and_optimizer(make_model, optimizer)
    if how == "by hand":
        steps = train_joined(net, opt, shares[rank])
    elif how == "by the loop":  # torch's DDP, no Join: train_uneven's loop
        X, y = next(b for batches in shares for b in batches)
        steps = train_uneven(wrapper(net), opt, shares[rank], (X[:0], y[:0]))
    else:
        model, steps = DDP(net), 0
        joining = how != "no join"  # Join(enable=False) does nothing: the loop is bare
        divide = how == "torch Join"
        with Join([model], enable=joining, divide_by_initial_world_size=divide):
            for X, y in shares[rank]:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(X), y).backward()
                opt.step()
                steps += 1
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters() if p.requires_grad])
    return {"params": flat, "steps": steps}
