"""FSDP2's silent pitfalls, each with a detector, and the fix for loading a full state dict.

Used in: chapter 9.

Chapter 5's detectors (:mod:`companion.ddp.detectors`) catch the mistakes of a
DDP script. Sharding adds its own, and four of them are what readers of
FSDP2 report most. Three run without an error:

==================================  ===============================  ========================
mistake                             evidence                         detector (``check_``)
==================================  ===============================  ========================
raw ``fully_shard`` on ranks        each rank's fingerprint of the   ``same_start``
seeded apart                        model, before sharding
the loss divided by the world       the gradient norm through the    ``gradient_scale``
size (FSDP and DDP average)         wrapper and in one process
gradients reduced in bf16           the bits of the reduced          ``reduce_dtype``
(``reduce_dtype`` left out)         gradients
==================================  ===============================  ========================

* DDP broadcasts rank 0's weights when it wraps a model; ``fully_shard`` does
  not. Each rank keeps its shard of *its own* initialisation, so the model is
  a patchwork of the ranks' draws: the ranks agree on it (they hold one copy
  between them), it trains, and it is not the model any seed builds. Under
  HSDP the replicas differ outright. The package's :func:`~.library.fsdp2`
  broadcasts first; ``check_same_start`` catches a script that does not.
* Both wrappers already average the gradients over the ranks, so dividing the
  loss by the world size divides every gradient by it once more.
* ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)`` alone reduce-scatters
  the gradients in bf16 (8 significant bits), then hands them back as fp32.
  The sum of two bf16 numbers seldom fits in bf16, so when every reduced value
  does, the reduction ran in bf16 (this needs two ranks or more, each on data
  of its own).

The fourth raises at once: ``load_state_dict`` of a whole (unsharded) state
dict into a sharded model fails with "mixed torch.Tensor and DTensor".
:func:`load_full_state_dict` is the fix: rank 0 alone reads the file and
torch's ``set_model_state_dict`` sends each rank its shards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn import functional as F

from ..core.checks import check_int, check_module, check_positive
from ..core.training import set_seed
from ..ddp.detectors import MistakeDetected, check_replicas_in_sync, fingerprint
from ..internals.tied_frozen_unused import TiedFrozenUnused
from ..runtime.group import check_group, rank_device
from .ledger import count_bytes
from .library import fsdp2

__all__ = [
    "GradientsMisscaled",
    "ReducedInLowPrecision",
    "check_same_start",
    "check_gradient_scale",
    "check_reduce_dtype",
    "load_full_state_dict",
    "pitfalls_worker",
]


class GradientsMisscaled(MistakeDetected):
    """The gradients differ from one process's by a factor of the world size."""


class ReducedInLowPrecision(MistakeDetected):
    """The gradients were averaged in a 16-bit type."""


def check_same_start(net: nn.Module) -> None:
    """Raise :class:`~companion.ddp.detectors.ReplicasOutOfSync` on every rank unless every
    rank built the same model (chapter 5's check, before training). Call it on every rank,
    before ``fully_shard``."""
    check_module(net)
    _, world_size = check_group("check_same_start")
    prints: list = [None] * world_size
    dist.all_gather_object(prints, fingerprint(net))
    check_replicas_in_sync(
        prints,
        when="before sharding: fully_shard (and HSDP) keep what each rank holds and "
        "broadcast nothing, so the sharded model would be a patchwork of the ranks' "
        "initialisations",
        fix="Seed every rank alike (torch.manual_seed(seed) before building the model) or "
        "broadcast rank 0's parameters and buffers first, as companion.sharding.fsdp2 does",
    )


def check_gradient_scale(
    norm: float, one_process_norm: float, world_size: int, rtol: float = 1e-6
) -> None:
    """Raise :class:`GradientsMisscaled` unless ``norm`` (the gradient's norm through the
    wrapper, every rank on the same batch) equals one process's norm on that batch."""
    check_int(world_size, "world_size")
    check_positive(one_process_norm, "one_process_norm", "the one-process gradient is not 0")
    ratio = norm / one_process_norm
    if math.isclose(ratio, 1.0, rel_tol=rtol):
        return
    if math.isclose(ratio, 1 / world_size, rel_tol=rtol):
        raise GradientsMisscaled(
            f"the gradient is 1/{world_size} of one process's: the loss was divided by the "
            f"world size, and DDP and FSDP already average over the ranks. Use the mean "
            f"loss of the rank's batch as in one process"
        )
    if math.isclose(ratio, world_size, rel_tol=rtol):
        raise GradientsMisscaled(
            f"the gradient is {world_size} times one process's: the ranks' gradients were "
            f"summed, not averaged (e.g. set_gradient_divide_factor(1.0)); divide by the "
            f"world size"
        )
    raise GradientsMisscaled(
        f"the gradient's norm is {ratio:.6g} times one process's on the same batch: the loss "
        f"or the reduction differs from one process's; compare them term by term"
    )


def check_reduce_dtype(
    grads: Sequence[torch.Tensor], world_size: int, dtype: torch.dtype = torch.bfloat16
) -> None:
    """Raise :class:`ReducedInLowPrecision` if every value of the ``grads`` reduced over
    ``world_size`` ranks (two or more, each on its own data) is a ``dtype`` number."""
    check_int(world_size, "world_size")
    if world_size < 2:
        raise ValueError(
            "world_size must be at least 2: one rank reduces nothing, and its gradients "
            "computed in bf16 are bf16 numbers whatever the reduce dtype"
        )
    if len(grads) == 0 or not all(torch.is_tensor(g) for g in grads):
        raise TypeError("grads must be a non-empty sequence of tensors: the reduced gradients")
    flat = torch.cat([g.detach().reshape(-1).float().cpu() for g in grads])
    nonzero = flat[flat != 0]
    if nonzero.numel() < 64:
        raise ValueError(f"grads hold {nonzero.numel()} nonzero values; the test needs at least 64")
    if torch.equal(nonzero.to(dtype).float(), nonzero):
        raise ReducedInLowPrecision(
            f"every one of the {nonzero.numel():,} gradient values is a {dtype} number: the "
            f"ranks' gradients were averaged in {dtype}, whose sums lose their low bits. "
            f"Pass MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype=torch.float32)"
        )


def load_full_state_dict(model: nn.Module, state_dict: dict) -> None:
    """Load a whole, unsharded ``state_dict`` (read on rank 0; the other ranks may pass
    ``{}``) into a model sharded by ``fully_shard``: each rank receives its shards."""
    check_module(model, "model")
    if not isinstance(state_dict, dict):
        raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
    rank, _ = check_group("load_full_state_dict")
    if rank == 0 and not state_dict:
        raise ValueError("rank 0 passed an empty state_dict: rank 0 reads the file and sends it")
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, state_dict, options=options)


def _images(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    return X.to(device), y.to(device)


def _whole(model: nn.Module) -> torch.Tensor:
    ps = [p.full_tensor() if isinstance(p, DTensor) else p for p in model.parameters()]
    return torch.cat([p.detach().reshape(-1).cpu() for p in ps])


def _raised(check, *args) -> str | None:
    try:
        check(*args)
    except MistakeDetected as err:
        return f"{type(err).__name__}: {err}"
    return None


def _plain_load(model: nn.Module, state_dict: dict) -> str:
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as err:
        last = str(err).rsplit("exception occurred : ", 1)[-1].strip(" ('\",).\n")
        return f"{type(err).__name__}: ... {last}"
    return "no error"


def _grad_norm(model: nn.Module) -> float:
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def pitfalls_worker(rank: int, world_size: int, n: int = 32) -> dict:
    """Worker: each pitfall made on the chapter's :class:`TiedFrozenUnused` model.

    Returns its evidence, the detectors' verdicts on it, and a full state dict
    loaded both ways."""
    check_int(n, "n", world_size, "each rank needs a sample")
    device, out = rank_device(), {}
    mesh = init_device_mesh(device.type, (world_size,))
    X, y = _images(n, device)  # the same on every rank

    set_seed(0)
    whole = _whole(TiedFrozenUnused())  # what one process builds with seed 0
    set_seed(rank)  # the mistake: a seed per rank (or none at all)
    net = TiedFrozenUnused().to(device)
    out["apart: caught"] = _raised(check_same_start, net)
    fully_shard(net, mesh=mesh)  # raw fully_shard: no broadcast
    out["apart: the model one process builds"] = torch.equal(_whole(net), whole)

    for divided in (False, True):  # every rank on the same batch: the average is one process's
        set_seed(0)
        model, _ = fsdp2(TiedFrozenUnused().double().to(device), torch.optim.SGD, lr=0.1)
        loss = F.cross_entropy(model(X.double()), y)
        (loss / world_size if divided else loss).backward()
        out["norm", divided] = _grad_norm(model)
    set_seed(0)
    one = TiedFrozenUnused().double()
    F.cross_entropy(one(X.double().cpu()), y.cpu()).backward()
    out["norm", "one process"] = _grad_norm(one)

    X_r, y_r = X.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    for reduce_dtype in (None, torch.float32):  # each rank on its own share
        set_seed(0)
        net = TiedFrozenUnused().to(device)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
        fully_shard(net, mesh=mesh, mp_policy=policy)
        with count_bytes() as ledger:
            F.cross_entropy(net(X_r), y_r).backward()
        out["dtypes", str(reduce_dtype)] = ledger.dtypes_by_kind()
        grads = [p.grad.full_tensor() for p in net.parameters() if p.grad is not None]
        out["reduce", str(reduce_dtype)] = (
            _raised(check_reduce_dtype, grads, world_size) if world_size > 1 else "1 rank"
        )

    set_seed(0)
    source = TiedFrozenUnused().state_dict()  # a whole checkpoint, e.g. pretrained weights
    set_seed(1)
    model, _ = fsdp2(TiedFrozenUnused().to(device), torch.optim.SGD, lr=0.1)
    out["load_state_dict"] = _plain_load(model, source)  # the mistake
    load_full_state_dict(model, source if rank == 0 else {})
    out["load_full_state_dict: equal"] = torch.equal(_whole(model), whole)
    return out
