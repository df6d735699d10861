"""Detectors for the common mistakes of data-parallel training scripts.

Used in: chapter 5.

Each mistake below runs without an error message and trains *something*, so
it goes unnoticed; each detector turns it into an exception that names the
mistake and the fix. They are plain functions of evidence gathered from the
ranks (parameter fingerprints, the sample indices each rank read per epoch,
a batch of model outputs, sample counts), so they can run inside the workers
or, on what the workers returned, in the notebook.

==============================  ==============================  ======================
mistake (where published)       evidence                        detector (``check_``)
==============================  ==============================  ======================
model not wrapped in DDP (DP    the ranks' model fingerprints   ``replicas_in_sync``
vs DDP page)
no DistributedSampler (K8s      indices each rank read          ``disjoint_shards``
tutorial)
no ``sampler.set_epoch``        a rank's indices, by epoch      ``order_changes``
softmax before the loss (K8s    model outputs on a batch        ``logits``
tutorial)
evaluation counted per rank     samples the evaluation counted  ``eval_count``
==============================  ==============================  ======================
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn

from ..core.checks import check_module
from ..runtime.group import check_group

__all__ = [
    "MistakeDetected",
    "ReplicasOutOfSync",
    "DuplicatedWork",
    "SameOrderEveryEpoch",
    "ProbabilitiesNotLogits",
    "EvaluationMiscount",
    "fingerprint",
    "track_buffers",
    "check_replicas_in_sync",
    "check_disjoint_shards",
    "check_order_changes",
    "check_logits",
    "check_eval_count",
    "RankTrace",
    "gather_traces",
    "diagnose",
]


class MistakeDetected(AssertionError):
    """A detector found a mistake; the message names it and the fix."""


class ReplicasOutOfSync(MistakeDetected):
    """The ranks' models differ: they are no longer replicas of one model."""


class DuplicatedWork(MistakeDetected):
    """Several ranks read the same samples in one epoch."""


class SameOrderEveryEpoch(MistakeDetected):
    """A rank read its samples in the same order in two epochs."""


class ProbabilitiesNotLogits(MistakeDetected):
    """The model outputs probabilities where the loss expects logits."""


class EvaluationMiscount(MistakeDetected):
    """An evaluation did not count every test sample exactly once."""


def fingerprint(net: nn.Module, buffers: dict[str, torch.Tensor] | None = None) -> str:
    """A short hash of every parameter and buffer of ``net``, bit for bit.

    Replicas kept in sync by DDP hold identical bits, hence equal
    fingerprints; one flipped bit changes it. A DDP wrapper and the module it
    wraps have the same fingerprint (the ``module.`` prefix is ignored).
    Buffers are hashed as given in ``buffers`` (names without ``module.``)
    where it has them, else as they are now: pass the snapshot of
    :func:`track_buffers` to hash the buffers as DDP last broadcast them.
    """
    state = {k.removeprefix("module."): v for k, v in check_module(net).state_dict().items()}
    state.update(buffers or {})
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def track_buffers(net: nn.Module) -> dict[str, torch.Tensor]:
    """A dict that holds ``net``'s buffers as of the start of its last training forward.

    A forward pre-hook on the module DDP wraps (``net.module``, or ``net``
    itself when it is not wrapped) copies the buffers whenever the module is
    called in training mode. DDP broadcasts rank 0's buffers *before* calling
    the module, so the copies are the broadcast values: equal on every rank,
    whereas the buffers themselves (BatchNorm's running statistics) then move
    with each rank's own batch. Evaluation (``eval()`` mode) leaves it alone.
    """
    module = getattr(check_module(net), "module", net)
    snapshot: dict[str, torch.Tensor] = {}

    def hook(mod: nn.Module, args) -> None:
        if mod.training:
            snapshot.update({n: b.detach().clone() for n, b in mod.named_buffers()})

    module.register_forward_pre_hook(hook)
    return snapshot


def check_replicas_in_sync(
    fingerprints: Sequence[str],
    when: str = "after training: each rank trained its own model",
    fix: str = "Wrap the model in DistributedDataParallel (not DataParallel, not nothing) "
    "so that every backward pass averages the gradients across ranks",
) -> None:
    """Raise :class:`ReplicasOutOfSync` unless every rank has rank 0's fingerprint.

    The fingerprints must cover what DDP keeps equal: the parameters, and the
    buffers as of DDP's last broadcast (``fingerprint(net, track_buffers(net))``
    taken before training). The buffers after the last forward pass differ
    legitimately between ranks for any model with running statistics. ``when``
    and ``fix`` finish the message (chapter 9 checks the start, before sharding).
    """
    if len(fingerprints) == 0:
        raise ValueError("fingerprints is empty: give one per rank")
    drifted = [r for r, f in enumerate(fingerprints) if f != fingerprints[0]]
    if drifted:
        raise ReplicasOutOfSync(f"the models of ranks {drifted} differ from rank 0's {when}. {fix}")


def check_disjoint_shards(indices_by_rank: Sequence[torch.Tensor], n: int) -> None:
    """Raise :class:`DuplicatedWork` if the ranks' indices of one epoch overlap.

    ``indices_by_rank[r]`` holds the indices of the ``n`` samples that rank
    ``r`` read in one epoch. ``DistributedSampler`` repeats up to
    ``world_size - 1`` samples to give every rank the same count (padding);
    those are allowed, anything more is duplicated work.
    """
    world_size = len(indices_by_rank)
    if world_size == 0:
        raise ValueError("indices_by_rank is empty: give one tensor per rank")
    read = torch.cat([torch.as_tensor(i).flatten() for i in indices_by_rank])
    repeats = len(read) - len(torch.unique(read))
    padding = -n % world_size
    if repeats > padding:
        raise DuplicatedWork(_duplicated(world_size, len(read), n, repeats))


def _duplicated(world_size: int, read: int, n: int, repeats: int) -> str:
    return (
        f"in one epoch {world_size} ranks read {read} samples from a data "
        f"set of {n}, {repeats} of them a sample that had been read already: "
        f"every rank reads (most of) the whole data set and the ranks repeat "
        f"each other's work. Give the loader a DistributedSampler (one disjoint "
        f"share per rank)"
    )


def check_order_changes(orders: Sequence[torch.Tensor]) -> None:
    """Raise :class:`SameOrderEveryEpoch` if one rank's epochs repeat an order.

    ``orders[e]`` is the sequence of indices the rank read in epoch ``e + 1``.
    """
    for e in range(1, len(orders)):
        if torch.equal(torch.as_tensor(orders[e]), torch.as_tensor(orders[e - 1])):
            raise SameOrderEveryEpoch(_same_order(e))


def _same_order(e: int) -> str:
    return (
        f"epochs {e} and {e + 1} read the same samples in the same order: "
        f"DistributedSampler shuffles with seed + epoch, so call "
        f"sampler.set_epoch(epoch) at the start of every epoch"
    )


def check_logits(outputs: torch.Tensor, tol: float = 1e-4) -> None:
    """Raise :class:`ProbabilitiesNotLogits` if ``outputs`` look like softmax rows.

    ``CrossEntropyLoss`` applies ``log_softmax`` itself and wants raw scores
    (logits); rows that are non-negative and sum to 1 mean a softmax ran first.
    """
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"outputs must be a tensor of model outputs, got {type(outputs).__name__}")
    outputs = outputs.detach().float()
    sums = outputs.sum(dim=-1)
    if outputs.min() >= 0 and torch.allclose(sums, torch.ones_like(sums), atol=tol):
        raise ProbabilitiesNotLogits(
            "the model outputs probabilities (non-negative rows summing to 1), but "
            "CrossEntropyLoss applies log_softmax itself: return the logits and "
            "drop the final softmax (apply it only when you need probabilities)"
        )


def check_eval_count(counted: int, n: int) -> None:
    """Raise :class:`EvaluationMiscount` unless an evaluation counted ``n`` samples."""
    if counted != n:
        how = "some twice" if counted > n else "only part of them"
        raise EvaluationMiscount(
            f"the evaluation counted {counted} samples for a test set of {n} "
            f"({how}): give each rank a disjoint share without padding, and sum "
            f"[correct, samples] over the ranks with all_reduce before dividing"
        )


class RankTrace(NamedTuple):
    """What one rank reports to the detectors after training."""

    fingerprint: str  # of its model, see fingerprint()
    orders: list[torch.Tensor]  # per epoch, the sample indices it read, in order


def gather_traces(
    net: nn.Module,
    orders: list[torch.Tensor],
    buffers: dict[str, torch.Tensor] | None = None,
) -> list[RankTrace]:
    """Collect every rank's :class:`RankTrace` on every rank (a collective).

    The fingerprint covers the parameters and, with ``buffers`` (the snapshot
    of :func:`track_buffers`), the buffers as DDP last broadcast them; without
    it, the buffers as they are now (right only for models without running
    statistics: see :func:`check_replicas_in_sync`).
    """
    traces: list = [None] * check_group("gather_traces")[1]
    dist.all_gather_object(traces, RankTrace(fingerprint(net, buffers), orders))
    return traces


def diagnose(traces: Sequence[RankTrace], n: int) -> list[str]:
    """Run the three training detectors on the ranks' traces; the problems found.

    An empty list means: replicas identical, disjoint shares of the ``n``
    training samples in every epoch, and a new order every epoch (which needs
    at least two epochs to check).
    """
    if len(traces) == 0:
        raise ValueError("traces is empty: give one RankTrace per rank (see gather_traces)")
    checks = [lambda: check_replicas_in_sync([t.fingerprint for t in traces])]
    for epoch in range(min(len(t.orders) for t in traces)):
        checks.append(lambda e=epoch: check_disjoint_shards([t.orders[e] for t in traces], n))
    checks += [lambda t=t: check_order_changes(t.orders) for t in traces]
    problems = []
    for check in checks:
        try:
            check()
        except MistakeDetected as err:
            problem = f"{type(err).__name__}: {err}"
            if problem not in problems:
                problems.append(problem)
    return problems
