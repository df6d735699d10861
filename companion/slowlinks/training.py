"""Every method of the chapter behind one call, trained through chapter 5's loop.

Used in: chapter 10.

:func:`communicate_less` wraps a freshly built model (inside a process
group) in one of :data:`METHODS` and returns ``(model, optimizer)``, driven
by the ordinary loop: DDP with a communication hook (:mod:`~companion.slowlinks.hooks`,
:mod:`~companion.slowlinks.powersgd`), or the bare model with a periodic optimizer
(:mod:`~companion.slowlinks.averaging`). :func:`train_slowlinks` trains whole epochs with one of
them and writes every collective of the training steps into chapter 9's
byte ledger. The replicas of local SGD and DiLoCo differ between meetings,
so each epoch's test accuracy is that of their average (computed aside; the
training goes on from where each replica was).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice, check_int, check_positive
from ..core.data import Data
from ..core.precision import MathMode
from ..core.profiles import Profile, get_profile
from ..core.results import Record
from ..core.training import step_for
from ..ddp.config import DDPConfig
from ..ddp.loop import setup_rank
from ..internals.naive import trainable_parameters
from ..runtime.epochs import train_epochs
from ..runtime.group import check_group, ddp_device_ids
from ..sharding.ledger import Ledger, count_bytes
from ..study.methods import Method, per_process
from .averaging import DiLoCo, LocalSGD, _Periodic, average_parameters
from .hooks import HOOKS
from .powersgd import PowerSGDState, powersgd_hook
from .streaming import StreamingDiLoCo

__all__ = [
    "SlowMethod",
    "hooked",
    "powersgd_at",
    "local_sgd",
    "diloco",
    "streaming_diloco",
    "METHODS",
    "STUDY_METHODS",
    "communicate_less",
    "SlowResult",
    "train_slowlinks",
    "slowlinks_worker",
]


class SlowMethod(NamedTuple):
    """One way to train with less communication: a name, and how it builds the pair."""

    name: str
    prepare: Callable[..., tuple]  # (net, lr, momentum, find_unused, inner_lr) -> pair
    meets_in_step: bool = False  # averages inside optimizer.step(): local SGD, DiLoCo


def _params(net: nn.Module) -> list[nn.Parameter]:
    return [p for _, p in trainable_parameters(net)]


def _ddp(make_state, hook, net, lr, momentum, find_unused, inner_lr):
    """DDP with ``hook`` (its state made afresh), stepped by SGD."""
    ids = ddp_device_ids(next(net.parameters()).device)
    model = DDP(net, device_ids=ids, find_unused_parameters=find_unused)
    model.register_comm_hook(make_state(), hook)
    return model, torch.optim.SGD(_params(net), lr=lr, momentum=momentum)


def _no_state() -> None:
    return None  # the plain hooks keep nothing between steps


def _local(period, net, lr, momentum, find_unused, inner_lr):
    return net, LocalSGD(torch.optim.SGD(_params(net), lr=lr, momentum=momentum), period)


def _diloco(period, streaming, net, lr, momentum, find_unused, inner_lr):
    inner = torch.optim.AdamW(_params(net), lr=inner_lr)  # as in the paper
    if streaming is None:
        return net, DiLoCo(inner, period)
    return net, StreamingDiLoCo(inner, period, **streaming)


def _period(period: int) -> int:
    return check_int(period, "period", 1, "the steps between meetings: 1, 4, 16, ...")


def hooked(name: str) -> SlowMethod:
    """DDP with one of the first section's hooks: ``"mean"`` (named DDP), fp16, bf16."""
    check_choice(name, "hook", HOOKS)
    return SlowMethod("DDP" if name == "mean" else name, partial(_ddp, _no_state, HOOKS[name][0]))


def powersgd_at(rank: int) -> SlowMethod:
    """DDP with :func:`~.powersgd.powersgd_hook` at ``rank``."""
    state = partial(PowerSGDState, rank=check_int(rank, "rank", 1, "PowerSGD's rank: 1, 2, 4"))
    return SlowMethod(f"PowerSGD r{rank}", partial(_ddp, state, powersgd_hook))


def local_sgd(period: int) -> SlowMethod:
    """Local SGD: the replicas' parameters averaged every ``period`` steps."""
    return SlowMethod(f"local SGD H{period}", partial(_local, _period(period)), True)


def diloco(period: int) -> SlowMethod:
    """DiLoCo: AdamW inside, an outer Nesterov step every ``period`` steps."""
    return SlowMethod(f"DiLoCo H{period}", partial(_diloco, _period(period), None), True)


def streaming_diloco(period: int) -> SlowMethod:
    """Streaming DiLoCo as this chapter trains it: 4 fragments, each exchange waited for one
    inner step later and blended half and half (``mix`` 0.5, as the paper's alpha), int8."""
    streaming = {"fragments": 4, "delay": 1, "mix": 0.5, "bits": 8}
    method = partial(_diloco, _period(period), streaming)
    return SlowMethod(f"Streaming DiLoCo H{period}", method, True)


# The chapter's table: names are keys, each built once here. Another H or rank: call the
# builder (diloco(32)), and pass the SlowMethod where a name would go.
METHODS: dict[str, SlowMethod] = {
    m.name: m
    for m in (
        *map(hooked, ("mean", "fp16", "bf16")),
        *map(powersgd_at, (1, 4)),
        *map(local_sgd, (4, 16)),
        *map(diloco, (4, 16, 64)),
        streaming_diloco(16),
    )
}


def communicate_less(
    method: str | SlowMethod,
    net: nn.Module,
    lr: float,
    momentum: float = 0.0,
    find_unused_parameters: bool = False,
    inner_lr: float = 1e-3,
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """``net`` and its optimizer under ``method``: a name of :data:`METHODS`, or a
    :class:`SlowMethod` (``diloco(32)``).

    DDP and the hooks, and local SGD, step with SGD (``lr``, ``momentum``);
    DiLoCo's inner optimizer is AdamW (``inner_lr``), as in the paper, and its
    outer one SGD with Nesterov momentum 0.9 and lr 0.7.
    """
    return _method(method).prepare(net, lr, momentum, find_unused_parameters, inner_lr)


def _method(method: str | SlowMethod) -> SlowMethod:
    if isinstance(method, SlowMethod):
        return method
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(
            f"method must be one of {', '.join(METHODS)} (another H or rank: a SlowMethod "
            f"from local_sgd, diloco, powersgd_at), got {method!r}"
        )
    return METHODS[method]


class SlowResult(NamedTuple):
    """What :func:`train_slowlinks` returns on each rank."""

    records: list[Record]  # one per epoch on rank 0; [] on the other ranks
    ledger: Ledger  # every collective of the training steps, on this rank
    steps: int
    marks: list[int]  # len(ledger.calls) at the end of each epoch

    def epoch_ledgers(self) -> list[Ledger]:
        """One ledger per epoch: the collectives of that epoch's steps."""
        starts = [0, *self.marks[:-1]]
        return [
            Ledger(self.ledger.world_size, self.ledger.calls[a:b], self.ledger.dtypes[a:b])
            for a, b in zip(starts, self.marks)
        ]


def _counted(step, ledger: Ledger):
    def counted_step(*args, **kwargs):
        with count_bytes(ledger):
            return step(*args, **kwargs)

    return counted_step


def train_slowlinks(
    data: Data,
    profile: Profile | str | None = None,
    method: str | SlowMethod = "DDP",
    momentum: float = 0.0,
    inner_lr: float = 1e-3,
    **options: Any,
) -> SlowResult:
    """Train with ``method`` through chapter 5's loop; every rank of a group calls it.

    ``momentum`` and ``inner_lr`` go to :func:`communicate_less`; ``options`` are fields
    of :class:`~companion.ddp.config.DDPConfig`.
    """
    method = _method(method)
    check_positive(inner_lr, "inner_lr", "AdamW's rate inside DiLoCo, e.g. 1e-3")
    cfg = DDPConfig(get_profile(profile).name, **options).resolve(check_group("train_slowlinks")[1])
    made, ledger = {}, Ledger(dist.get_world_size())

    def wrap(net: nn.Module) -> nn.Module:
        model, made["optimizer"] = communicate_less(
            method, net, cfg.lr, momentum, cfg.find_unused_parameters, inner_lr
        )
        return model

    def make_step(mode: MathMode):
        _check_scaled_meetings(method, mode)
        return _counted(step_for(mode), ledger)

    run = setup_rank(
        data,
        cfg,
        method.name,
        wrap,
        make_optimizer=lambda params, lr: made["optimizer"],
        make_step=make_step,
    )
    if isinstance(run.optimizer, _Periodic):
        run.evaluate = _of_the_average(run.evaluate, run.optimizer)
    marks: list[int] = []
    records = train_epochs(run, on_epoch=lambda *_: marks.append(len(ledger.calls)))
    return SlowResult(records, ledger, run.steps, marks)


def _check_scaled_meetings(method: SlowMethod, mode: MathMode) -> None:
    """Local SGD and DiLoCo meet inside ``optimizer.step()``, and fp16's loss scaler skips
    ``step()`` on a rank that finds an inf in its own gradients (nothing averaged them):
    that rank would miss a meeting the others wait in until the group's timeout."""
    if method.meets_in_step and mode.precision == "fp16":
        name = method.name
        raise ValueError(
            f"{name} meets inside optimizer.step(), which fp16's loss scaler skips on a "
            f"rank whose own gradients overflow: that rank would miss the meeting the others "
            f"wait in. Train {name} in fp32 or bf16 (precision='fp32'), or in fp16 a method "
            f"that averages in backward (DDP, fp16, bf16, PowerSGD)"
        )


def _of_the_average(evaluate, optimizer: _Periodic):
    """``evaluate`` run on the replicas' average; each replica then gets its own back."""

    @torch.no_grad()
    def evaluate_average(net: nn.Module) -> float:
        params = optimizer.params()
        own = [p.detach().clone() for p in params]
        average_parameters(params)
        try:
            return evaluate(net)
        finally:
            for p, mine in zip(params, own):
                p.copy_(mine)

    return evaluate_average


def slowlinks_worker(
    rank: int, world_size: int, data: Data, profile: Profile | str | None = None, **options: Any
) -> SlowResult:
    """:func:`train_slowlinks` as a worker of :func:`~companion.runtime.launcher.launch`."""
    return train_slowlinks(data, profile, **options)


# Chapter 7's study cannot import this chapter (it comes first): this chapter hands it its
# methods, and `python -m companion.study` joins the tables (companion.commands).
# DiLoCo's inner AdamW keeps its own learning rate: the study's lr is not used.
_SGD = "SGD without momentum at the study's lr; chapter 10's own runs: momentum 0.9, lr / 10"
STUDY_METHODS: dict[str, Method] = {
    "powersgd": per_process(
        partial(slowlinks_worker, method="PowerSGD r4"), 10, f"DDP with PowerSGD, rank 4; {_SGD}"
    ),
    "localsgd": per_process(
        partial(slowlinks_worker, method="local SGD H16"), 10, f"local SGD, H = 16; {_SGD}"
    ),
    "diloco": per_process(
        partial(slowlinks_worker, method="DiLoCo H16"),
        10,
        "DiLoCo, H = 16; its inner AdamW keeps lr 1e-3: the study's lr, and study.csv's lr "
        "column, do not apply",
    ),
}
