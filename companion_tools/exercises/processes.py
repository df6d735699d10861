"""Chapters 6, 9 and 10's exercise checker: a training method of your own, in processes.

``check_prepare(prepare)`` takes ``prepare(net, optimizer_class, **options) ->
(model, optimizer)``, the shape of chapter 9's ``shard`` with the method bound
(``functools.partial(shard, "ZeRO-3")``), and runs chapter 9's equivalence check
with it: chapter 6's awkward model (a tied weight, a frozen layer, an unused
parameter, a buffer) in float64, on uneven shares of three global batches of 11
samples, on 2 and 3 processes, with Adam and with SGD with momentum. Each rank's
whole parameters (``full_parameters``) must equal one process's
(``same_as="one process"``), or the ``reference`` method's bit for bit
(``same_as="reference"``: a faster version of the same algorithm), or nothing
(``same_as=None``: a lossy method, which you judge by its bytes). It counts, with
chapter 9's ledger, the bytes each rank sends per step, beside ``reference``'s
(a name of ``shard``, or a prepare of its own), so that you can check a saving you
predicted (chapter 6: exercises 1, 4 and 5; chapter 9: 1 and 3; chapter 10: 1 and 3).

``prepare`` must be importable by the worker processes. Two adapters give the
chapters' pieces this shape: ``partial(wrapper_prepare, "BucketedDDP")`` (chapter
6's wrappers) and ``partial(hook_prepare, powersgd_hook, partial(PowerSGDState, 1))``
(a DDP communication hook and what makes its state). A wrapper that cannot skip an
unused parameter (``NaiveDDP``, ``HookedDDP``) refuses the awkward model, as it
should: check it with ``unused=False``, the model without that parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from companion.core import set_seed
from companion.core.checks import check_choice
from companion.internals import TiedFrozenUnused, trainable_parameters
from companion.internals.training import wrap
from companion.runtime import launch
from companion.runtime.launcher import _check_function
from companion.sharding import OPTIMIZERS, global_batches, shard
from companion.sharding.ledger import count_bytes
from companion.sharding.training import full_parameters
from companion.sharding.verify import _share_step

from .verdicts import Verdicts, attempt

__all__ = ["check_prepare", "prepare_worker", "wrapper_prepare", "hook_prepare", "awkward"]


def wrapper_prepare(variant: str, net, optimizer_class: type, **options):
    """Chapter 6's ``variant`` around ``net`` and its optimizer; the bucketed ones find unused
    parameters (``NaiveDDP`` and ``HookedDDP`` cannot: check them with ``unused=False``)."""
    finds = variant in ("BucketedDDP", "torch DDP")
    extra = {"find_unused_parameters": True} if finds else {}
    model = wrap(net, variant, bucket_cap_mb=0.001, **extra)
    return model, optimizer_class([p for _, p in trainable_parameters(net)], **options)


def hook_prepare(
    hook: Callable, make_state: Callable | None, net, optimizer_class: type, **options
):
    """Torch's DDP around ``net`` with ``hook`` (its state ``make_state()``, made on each rank),
    and its optimizer: chapter 10's hooks in this shape, ``partial(hook_prepare, hook, None)``."""
    model = DDP(net, find_unused_parameters=True)  # the awkward model has an unused parameter
    model.register_comm_hook(None if make_state is None else make_state(), hook)
    return model, optimizer_class([p for _, p in trainable_parameters(net)], **options)


def awkward(unused: bool = True) -> TiedFrozenUnused:
    """Chapter 6's awkward model in float64, the same on every rank (seed 0)."""
    set_seed(0)
    return TiedFrozenUnused(unused=unused).double()


def one_process(batches, optimizer: str, unused: bool = True) -> torch.Tensor:
    """Chapter 9's ``one_process`` on :func:`awkward` with or without its unused parameter."""
    net = awkward(unused)
    cls, options = OPTIMIZERS[optimizer]
    opt = cls([p for _, p in trainable_parameters(net)], **options)
    for X, y in batches:
        torch.nn.functional.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
    return full_parameters(net, opt)


def prepare_worker(rank: int, world_size: int, prepares: dict, batches, unused: bool) -> dict:
    """Worker: ``{(name, optimizer): (whole parameters, bytes sent per step)}``."""
    out = {}
    for name, prepare in prepares.items():
        for optimizer, (cls, options) in OPTIMIZERS.items():
            model, opt = prepare(awkward(unused), cls, **options)
            with count_bytes() as ledger:
                for X, y in batches:
                    _share_step(model, opt, X, y)
            out[name, optimizer] = (full_parameters(model, opt), ledger.sent() / len(batches))
    return out


def _name(fn: Callable) -> str:
    """``shard('ZeRO-3')``, ``hook_prepare(powersgd_hook, ...)``: a partial by its arguments."""
    inner = getattr(fn, "func", fn)
    args = [_name(a) if callable(a) else repr(a) for a in getattr(fn, "args", ())]
    name = getattr(inner, "__name__", repr(inner))
    return f"{name}({', '.join(args)})" if args else name


def _same(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-9, atol=1e-12)


def check_prepare(
    prepare: Callable,
    reference: str | Callable = "DDP",
    same_as: str | None = "one process",
    unused: bool = True,
    world_sizes: Sequence[int] = (2, 3),
    quiet: bool = False,
) -> Verdicts:
    """Your ``prepare`` in chapter 9's check; bytes per step beside ``reference``'s."""
    for fn in (prepare, reference):
        if not isinstance(fn, str):
            _check_function(getattr(fn, "func", fn))
    check_choice(same_as, "same_as", ["one process", "reference", None])
    theirs = (
        partial(shard, reference, find_unused_parameters=unused)
        if isinstance(reference, str)
        else reference
    )
    ref = reference if isinstance(reference, str) else _name(reference)
    batches = global_batches()
    expected = {opt: one_process(batches, opt, unused) for opt in OPTIMIZERS}
    model = "chapter 6's awkward model" + ("" if unused else " without its unused parameter")
    verdicts = Verdicts(
        f"{_name(prepare)} on {model} in float64, {len(batches)} global batches "
        f"of 11, beside {ref}",
        quiet,
    )
    for n in world_sizes:
        runs, problem = attempt(
            launch,
            prepare_worker,
            n,
            {"yours": prepare, "theirs": theirs},
            batches,
            unused,
            backend="gloo",
            timeout=300,
        )
        if same_as is not None:
            exact = same_as == "reference"
            wrong = (
                []
                if problem
                else sorted(
                    f"{opt} on rank {r}"
                    for r, run in enumerate(runs)
                    for opt in OPTIMIZERS
                    if not (
                        torch.equal(run["yours", opt][0], run["theirs", opt][0])
                        if exact
                        else _same(run["yours", opt][0], expected[opt])
                    )
                )
            )
            verdicts.add(
                f"{n} processes, {' and '.join(OPTIMIZERS)}, every rank equal to "
                + (f"{ref} bit for bit" if exact else "one process"),
                not problem and not wrong,
                problem or f"differs: {', '.join(wrong)}",
            )
        else:
            verdicts.add(f"{n} processes, every rank trains", not problem, problem)
        if not problem:
            sent = {k: runs[0][k, "Adam"][1] for k in ("yours", "theirs")}
            verdicts.note(
                f"{n} processes: rank 0 sends {sent['yours']:,.0f} bytes per step, "
                f"{ref} {sent['theirs']:,.0f}"
            )
    return verdicts
