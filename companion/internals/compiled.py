"""``torch.compile`` with DDP: the graphs each way of combining them compiles, where the
all-reduces run, and whether the step stays the same.

Used in: chapter 6 (its section on ``torch.compile``) and ``tests/internals/test_compiled.py``.

:class:`GraphLog` is a dynamo backend that notes each graph it is handed (its operations,
and how many of them are collectives) and compiles it with inductor (on a CPU its C++
backend, which needs a C++ compiler such as ``g++`` on the machine) or with ``aot_eager``
(the same graphs, no generated code: fast, for tests). :func:`compile_worker` trains a few
float64 steps of each variant of :data:`VARIANTS` on this rank, from the same start on
the same batches, and returns a :class:`Compiled` for each; with ``rounds`` it then times
each variant against eager DDP, the two taking turns.
"""

from __future__ import annotations

import logging
import re
import time
import traceback
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ..core.checks import check_choice, check_instance, check_int, check_positive
from ..core.models import get_model
from ..core.noise import rotated
from .buckets import BucketedDDP

__all__ = ["VARIANTS", "GraphLog", "OwnModule", "Compiled", "compile_worker"]

# Each variant, and dynamo's DDP mode (torch._dynamo.config.optimize_ddp) it runs under.
VARIANTS = {
    "eager DDP": True,
    "compile(DDP(model))": True,
    "compile(DDP(OwnModule(model)))": True,  # a forward defined outside torch
    "DDP(compile(model))": True,  # the default mode: DDPOptimizer splits at the buckets
    "DDP(compile(model)), optimize_ddp=False": False,  # one graph, the C++ reducer
    "DDP(compile(model)), compiled autograd": "python_reducer",  # all-reduces in the graph
    "BucketedDDP(compile(model))": True,
    "compile(BucketedDDP(model))": True,
    "BucketedDDP(compile(model)), compiled autograd": True,  # our hooks, traced
    "compile(model), no DDP": True,  # the control: what compile alone does to a step
}


class GraphLog:
    """A ``torch.compile`` backend: notes ``(operations, all-reduces)`` of each graph it
    compiles, then compiles it with ``compiler`` (``"inductor"`` or ``"aot_eager"``).
    When dynamo restarts a trace, the graphs of the abandoned attempt are forgotten."""

    def __init__(self, compiler: str = "inductor"):
        self.compiler = check_choice(compiler, "compiler", ("inductor", "aot_eager"))
        self._traces: dict = {}  # per traced frame: (its attempt, its graphs)

    @property
    def graphs(self) -> list[tuple[int, int]]:
        return [graph for _, graphs in self._traces.values() for graph in graphs]

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        calls = [n for n in gm.graph.nodes if n.op.startswith("call_")]
        allreduces = sum(str(n.target).startswith("_c10d_functional.all_") for n in calls)
        trace = torch._guards.CompileContext.current_trace_id()
        frame, attempt = (trace.compile_id, trace.attempt) if trace else (len(self._traces), 0)
        if self._traces.get(frame, (attempt,))[0] != attempt:  # a restart: start again
            self._traces[frame] = (attempt, [])
        self._traces.setdefault(frame, (attempt, []))[1].append((len(calls), allreduces))
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.compiler)(gm, example_inputs)


class OwnModule(nn.Module):
    """``model`` inside a module whose ``forward`` is not torch's own code."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = check_instance(model, "model", nn.Module, "pass the model to wrap")

    def forward(self, X):
        return self.model(X)


class Compiled(NamedTuple):
    """What one variant did on one rank."""

    variant: str
    graphs: tuple  # (operations, all-reduces) of each graph compiled, in order
    breaks: tuple  # the reason for each kind of graph break, one line each
    buckets: int | None  # after the steps; None: no DDP, no C++ reducer, or failed
    first_step_s: float  # the first step, which compiles
    params: list  # after the steps, float64
    rounds: tuple = ()  # (eager DDP, this variant) seconds per step, one pair per round;
    # for "compile(model), no DDP": (the eager model, the compiled model)
    error: str | None = None  # if the variant failed: the error, and where


@contextmanager
def _buckets_from(cap_mb: float):
    """DDPOptimizer caps its first bucket at ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB),
    not at DDP's, and refuses a ``bucket_cap_mb`` below that when it compiles (torch
    2.11-2.14): for a cap under 1 MiB, set the first bucket's cap to it too, meanwhile."""
    old = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = min(old, int(cap_mb * 2**20))
    try:
        yield
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = old


@contextmanager
def _restored_after_python_reducer():
    """A DDP built in ``"python_reducer"`` mode turns on inductor's fusion of its all-reduces
    and has dynamo inline DDP's own file, for the rest of the process: undo both after."""
    import torch._inductor.config as inductor
    from torch._dynamo import trace_rules

    inlined = "torch.nn.parallel.distributed" in trace_rules.LEGACY_MOD_INLINELIST
    with inductor.patch(_fuse_ddp_communication=inductor._fuse_ddp_communication,
                        _fuse_ddp_bucket_size=inductor._fuse_ddp_bucket_size):  # fmt: skip
        try:
            yield
        finally:
            if not inlined:
                trace_rules.LEGACY_MOD_INLINELIST.discard("torch.nn.parallel.distributed")
                trace_rules.get_legacy_mod_inlinelist.cache_clear()


def _wrap(model: nn.Module, variant: str, log: GraphLog, cap_mb: float) -> nn.Module:
    compiled = lambda m: torch.compile(m, backend=log)  # noqa: E731
    if variant == "eager DDP":
        return DDP(model, bucket_cap_mb=cap_mb)
    if variant == "compile(DDP(model))":
        return compiled(DDP(model, bucket_cap_mb=cap_mb))
    if variant == "compile(DDP(OwnModule(model)))":
        return compiled(DDP(OwnModule(model), bucket_cap_mb=cap_mb))
    if variant.startswith("DDP(compile(model))"):
        return DDP(compiled(model), bucket_cap_mb=cap_mb)
    if variant.startswith("BucketedDDP(compile(model))"):
        return BucketedDDP(compiled(model), cap_mb)
    if variant == "compile(model), no DDP":
        return compiled(model)
    return compiled(BucketedDDP(model, cap_mb))


def _buckets(net: nn.Module) -> int | None:
    net = getattr(net, "_orig_mod", net)  # under torch.compile
    if isinstance(net, BucketedDDP):
        return len(net.buckets)
    if not isinstance(net, DDP) or net._use_python_reducer:  # no DDP, or its all-reduces in
        return None  # the graph (compiled autograd): no buckets
    logged = net._get_ddp_logging_data()  # rebuilt in arrival order, logged from step 3 on
    return len(logged.get("rebuilt_bucket_sizes", logged["bucket_sizes"]).split(","))


def _step(net, optimizer, X, y, backward_in) -> None:
    loss = F.cross_entropy(net(X), y)
    with backward_in():
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _run(rank: int, variant: str, compiler: str, steps: int, batch: int, cap_mb: float,
         rounds: int, round_steps: int) -> Compiled:  # fmt: skip
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    log = GraphLog(compiler)
    mode = torch._dynamo.config.patch(optimize_ddp=VARIANTS[variant])
    with mode, _buckets_from(cap_mb), _restored_after_python_reducer():
        torch.manual_seed(0)  # the same model on every rank and in every variant
        model = get_model("lenet").double()
        net = _wrap(model, variant, log, cap_mb)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        backward = torch.compile(backend=log)  # under compiled autograd: the backward's graph
        traced = variant.endswith("compiled autograd")
        backward_in = (lambda: compiled_autograd._enable(backward)) if traced else nullcontext
        g = torch.Generator().manual_seed(rank)  # each rank its own batches
        data = [(torch.randn(batch, 1, 28, 28, dtype=torch.float64, generator=g),
                 torch.randint(0, 10, (batch,), generator=g)) for _ in range(steps)]  # fmt: skip
        start = time.perf_counter()
        _step(net, optimizer, *data[0], backward_in)  # compiles
        first_s = time.perf_counter() - start
        for X, y in data[1:]:
            _step(net, optimizer, X, y, backward_in)
        params = [p.detach().clone() for p in model.parameters()]
        alone = variant.endswith("no DDP")
        pairs = _time(net, optimizer, data[0], backward_in, rounds, round_steps, cap_mb, alone)
    breaks = tuple(sorted({_reason(k) for k in counters["graph_break"]}))
    return Compiled(variant, tuple(log.graphs), breaks, _buckets(net), first_s, params, pairs)


def _time(net, optimizer, batch, backward_in, rounds, round_steps, cap_mb, alone) -> tuple:
    """Seconds per step of eager DDP (``alone``: the eager model) and of ``net``, taking
    turns, ``rounds`` times."""
    if not rounds:
        return ()
    torch.manual_seed(0)
    eager = get_model("lenet").double()
    with torch._dynamo.config.patch(optimize_ddp=True):  # its C++ reducer, whatever the mode
        reference = eager if alone else _wrap(eager, "eager DDP", None, cap_mb)
    sides = {"eager": (reference,
                       torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9), nullcontext),
             "net": (net, optimizer, backward_in)}  # fmt: skip
    for _ in range(3):  # untimed, as net's first steps were: DDP rebuilds its buckets meanwhile
        _step(*sides["eager"][:2], *batch, nullcontext)
    pairs = []
    for r in range(rounds):
        took = {}
        for side in rotated(list(sides), r):
            wrapped, opt, context = sides[side]
            dist.barrier()
            start = time.perf_counter()
            for _ in range(round_steps):
                _step(wrapped, opt, *batch, context)
            took[side] = (time.perf_counter() - start) / round_steps
        pairs.append((took["eager"], took["net"]))
    return tuple(pairs)


def _reason(key: str) -> str:
    """One line for a graph break: its kind, and what it stopped at."""
    lines = [line.strip() for line in key.splitlines() if line.strip()]
    explained = " ".join(x for x in lines if x.startswith("Explanation:"))
    named = re.findall(r"`([^`]+)`", explained)
    target = re.search(r"target: <built-in function (\w+)>", key)
    at = named[0] if named else (target.group(1) if target else "")
    return f"{lines[0]} ({at})" if at else lines[0]


def compile_worker(
    rank: int,
    world_size: int,
    variants=tuple(VARIANTS),
    compiler: str = "inductor",
    steps: int = 3,
    batch: int = 32,
    bucket_cap_mb: float = 0.1,
    rounds: int = 0,
    round_steps: int = 5,
) -> dict[str, Compiled]:
    """Worker: each of ``variants`` trains LeNet (float64, SGD with momentum) for ``steps``
    steps of ``batch`` samples per rank; ``rounds`` > 0 then times it against eager DDP.
    At least 3 steps: torch's DDP logs the buckets it rebuilt after step 1 at step 3."""
    for name in variants:
        check_choice(name, "variant", tuple(VARIANTS))
    for value, name, least in (
        (steps, "steps", 3),
        (batch, "batch", 1),
        (rounds, "rounds", 0),
        (round_steps, "round_steps", 1),
    ):
        check_int(value, name, least)
    check_positive(bucket_cap_mb, "bucket_cap_mb", "give the bucket size in MiB, e.g. 0.1")
    out = {}
    with _quiet():
        for name in variants:
            try:
                out[name] = _run(rank, name, compiler, steps, batch, bucket_cap_mb, rounds,
                                 round_steps)  # fmt: skip
            except Exception as err:  # shown as the variant's result: where it breaks
                out[name] = Compiled(name, (), (), None, 0.0, [], (), _where(err))
    return out


@contextmanager
def _quiet():
    """Compile's log lines, and torch's warning on Python 3.13.0 (Colab's) that guards run
    slower, off the page while the ways run (errors come back as results); then as before."""
    names = ("torch._dynamo", "torch._inductor", "torch._guards", "torch.utils.cpp_extension")
    levels = {name: logging.getLogger(name).level for name in names}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Guards may run slower", RuntimeWarning)
        try:
            for name in names:
                logging.getLogger(name).setLevel(logging.CRITICAL)
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def _where(err: Exception) -> str:
    """The error's kind, and the last line of this package it came through (else its text)."""
    ours = [f for f in traceback.extract_tb(err.__traceback__)
            if "companion" in f.filename and not f.filename.endswith("compiled.py")]  # fmt: skip
    if not ours:
        return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[-1]}"
    at = Path(ours[-1].filename)
    return f"{type(err).__name__} at {at.parent.name}/{at.name}:{ours[-1].lineno} `{ours[-1].line}`"
