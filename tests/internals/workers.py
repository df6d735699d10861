"""Workers for the chapter-6 tests (importable by the launcher's fork server as
``tests.internals.workers``): one worker that trains the chapter's model with tied, frozen
and unused parameters and a buffer with every variant, evenly and unevenly split."""

import torch
from torch import nn
from torch.nn import functional as F

from companion.core import set_seed
from companion.ddp import UnusedParameters
from companion.internals import TiedFrozenUnused, accumulation_step, wrap

LR = 0.1
STEPS, GLOBAL, MICRO = 3, 24, 3  # steps, global batch, micro-batches of the shared runs


def quirky(unused: bool = True, seed: int = 0) -> TiedFrozenUnused:
    """The chapter's model with tied, frozen (and unused) parameters and a buffer, seeded."""
    set_seed(seed)
    return TiedFrozenUnused(unused)


def grads_of(net):
    return [None if p.grad is None else p.grad.clone() for p in net.parameters()]


def params_of(net):
    return [p.detach().clone() for p in net.parameters()]


def shares(n: int, world_size: int, uneven: bool) -> list[int]:
    """Sample counts per rank adding up to ``n``: equal, or 1, 2, 3, ... parts."""
    if not uneven:
        return [n // world_size] * world_size
    weights = list(range(1, world_size + 1))
    sizes = [n * w // sum(weights) for w in weights]
    sizes[-1] += n - sum(sizes)
    return sizes


def train_variant(
    rank, world_size, variant, batches, uneven, unused=True, explicit=False, **options
):
    """Steps on this rank's share of each global batch: (first step's grads, final params).

    ``explicit``: the wrappers' fallback, ``finish_in_backward=False`` and ``net.finish()``
    called after backward (twice: the second call must do nothing)."""
    if explicit:
        options["finish_in_backward"] = False
    net = wrap(quirky(unused, seed=rank), variant, **options)  # rank 0's copy is broadcast
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    first = None
    for X, y in batches:
        sizes = shares(len(y), world_size, uneven)
        start = sum(sizes[:rank])
        X, y = X[start : start + sizes[rank]], y[start : start + sizes[rank]]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(X), y).backward()  # driven exactly as torch's DDP: no finish() call
        if explicit:
            net.finish()
            net.finish()
        first = grads_of(net) if first is None else first
        opt.step()
    return first, params_of(net)


def every_variant(rank, world_size, batches, micro_batches):
    """Everything the equivalence tests compare, from one launch per world size."""
    out = {}
    for uneven in (False, True):
        weigh = {"weigh_by_samples": uneven}
        out["NaiveDDP", uneven] = train_variant(
            rank, world_size, "NaiveDDP", batches, uneven, False, **weigh
        )
        out["HookedDDP", uneven] = train_variant(
            rank, world_size, "HookedDDP", batches, uneven, False, **weigh
        )
        for cap in (25.0, 0.001):
            out["BucketedDDP", cap, uneven] = train_variant(
                rank,
                world_size,
                "BucketedDDP",
                batches,
                uneven,
                bucket_cap_mb=cap,
                find_unused_parameters=True,
                **weigh,
            )
        for variant in ("NaiveDDP", "HookedDDP", "BucketedDDP"):
            out[variant, "explicit", uneven] = train_variant(
                rank,
                world_size,
                variant,
                batches,
                uneven,
                variant == "BucketedDDP",
                explicit=True,
                **weigh,
                **({"find_unused_parameters": True} if variant == "BucketedDDP" else {}),
            )
    for unused in (True, False):
        out["torch DDP", unused] = train_variant(
            rank, world_size, "torch DDP", batches, False, unused, find_unused_parameters=unused
        )
    out["errors"] = unused_errors(rank, world_size, batches[0])
    out["accumulation"] = accumulate(rank, world_size, batches, micro_batches)
    return out


def unused_errors(rank, world_size, batch):
    """The messages each wrapper (BucketedDDP without find_unused_parameters) raises for an
    unused parameter: at the next forward pass (as torch's DDP), or in an explicit finish()."""
    X, y = batch
    messages = {}
    for variant in ("NaiveDDP", "HookedDDP", "BucketedDDP"):
        for explicit in (False, True):
            net = wrap(quirky(), variant, bucket_cap_mb=0.001, finish_in_backward=not explicit)
            try:
                F.cross_entropy(net(X), y).backward()  # the step cannot complete ...
                net.finish() if explicit else net(X)  # ... and says so here
                messages[variant, explicit] = ""
            except UnusedParameters as err:
                messages[variant, explicit] = str(err)
    return messages


def accumulate(rank, world_size, batches, micro_batches):
    """Accumulation over micro-batches with and without no_sync: params and all-reduce counts."""
    out = {}
    for variant, no_sync in (
        ("BucketedDDP", True),
        ("BucketedDDP", False),
        ("HookedDDP", True),
        ("NaiveDDP", True),
        ("torch DDP", True),
    ):
        net = wrap(quirky(False), variant, bucket_cap_mb=0.001)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
        per_rank = len(batches[0][1]) // world_size
        for X, y in batches:
            X, y = (
                X[rank * per_rank : (rank + 1) * per_rank],
                y[rank * per_rank : (rank + 1) * per_rank],
            )
            accumulation_step(net, X, y, nn.CrossEntropyLoss(), opt, micro_batches, no_sync)
        buckets = len(net.buckets) if variant == "BucketedDDP" else None
        out[variant, no_sync] = (params_of(net), getattr(net, "allreduces", None), buckets)
    for variant in ("NaiveDDP", "HookedDDP", "BucketedDDP"):  # the explicit-finish fallback
        for no_sync in (True, False):
            net = wrap(quirky(False), variant, bucket_cap_mb=0.001, finish_in_backward=False)
            opt = torch.optim.SGD(net.parameters(), lr=LR)
            per_rank = len(batches[0][1]) // world_size
            for X, y in batches:
                X, y = (
                    X[rank * per_rank : (rank + 1) * per_rank],
                    y[rank * per_rank : (rank + 1) * per_rank],
                )
                accumulation_step(net, X, y, nn.CrossEntropyLoss(), opt, micro_batches, no_sync)
            out[variant, no_sync, "explicit"] = params_of(net)
    return out


# The single-process side of the comparisons (run in the test process).


def global_batches():
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(GLOBAL, 1, 28, 28, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g))
        for _ in range(STEPS)
    ]


def reference(batches, unused=True):
    """One process, one model, a plain SGD step on each whole global batch."""
    net = quirky(unused)
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=LR)
    first = None
    for X, y in batches:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(X), y).backward()
        first = grads_of(net) if first is None else first
        opt.step()
    return first, params_of(net)


def assert_same(got, expected):
    for a, b in zip(got, expected, strict=True):
        if b is None:
            assert a is None, "a parameter that nobody used got a gradient"
        else:
            torch.testing.assert_close(a, b)


def assert_replicas_equal_reference(results, key, want) -> None:
    """Every rank's first-step gradients and final parameters of run ``key`` equal ``want``."""
    for out in results:
        grads, params = out[key]
        assert_same(grads, want[0])  # the first step's averaged gradients
        assert_same(params, want[1])  # the parameters after the last step
        assert_same(params, results[0][key][1])  # and the replicas are identical


def train_several(rank, world_size, data, runs):
    """:func:`companion.internals.train_internals` once per dict of options in ``runs``."""
    from companion.internals import train_internals

    return [train_internals(data, "ci", **options) for options in runs]


def chapter5_loop(rank, world_size, data, variants, **options):
    """Chapter 5's loop unchanged (its setup, epochs and chapter 1's train_step), with each
    variant as the wrapper: the flat parameters at the end, one per variant."""
    from functools import partial

    from companion.core import flat_params
    from companion.ddp import DDPConfig, setup_rank
    from companion.runtime import train_epochs

    cfg = DDPConfig("ci", **options).resolve(world_size)
    out = []
    for variant in variants:
        run = setup_rank(data, cfg, variant, partial(wrap, variant=variant))
        records = train_epochs(run)
        out.append((flat_params(run.net), [r.method for r in records]))
    return out


class LeNetWithUnused(nn.Module):
    """Chapter 1's LeNet plus a parameter that forward never uses."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        from companion.core import get_model

        self.net, self.unused = get_model("lenet", num_classes), nn.Parameter(torch.ones(3))

    def forward(self, X):
        return self.net(X)


def unused_through_train_internals(rank, world_size, data, variants):
    """train_internals(find_unused_parameters=True) on a model with an unused parameter."""
    from companion.core import models
    from companion.internals import train_internals

    models.MODELS["lenet-unused"] = LeNetWithUnused  # this worker process only
    return {
        v: train_internals(
            data,
            "ci",
            v,
            model="lenet-unused",
            max_steps=3,
            epochs=1,
            find_unused_parameters=True,
            precision="fp64",
        ).params
        for v in variants
    }


def reentrant_weight_sharing(rank, world_size, steps=5):
    """Torch's ``test_ddp_checkpointing_weight_sharing[use_reentrant=True]`` on gloo: two
    ``Linear(20, 20)`` sharing one weight, the *wrapper* run under reentrant checkpointing,
    MSE loss, SGD, ``zero_grad(set_to_none=False)``, 16 samples per rank. Per variant
    (torch's DDP first): the gradients of every step."""
    import torch.distributed as dist
    from torch.utils.checkpoint import checkpoint

    out = {}
    for variant in ("torch DDP", "NaiveDDP", "HookedDDP", "BucketedDDP"):
        set_seed(0)
        first, second = nn.Linear(20, 20), nn.Linear(20, 20)
        first.weight = second.weight
        model = nn.Sequential(first, second).double()
        net = wrap(model, variant, bucket_cap_mb=0.001)  # several buckets
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        g = torch.Generator().manual_seed(rank)
        out[variant] = []
        for _ in range(steps):
            x = torch.randn(16, 20, generator=g, dtype=torch.float64, requires_grad=True)
            y = torch.randn(16, 20, generator=g, dtype=torch.float64)
            F.mse_loss(checkpoint(net, x, use_reentrant=True), y).backward()
            out[variant].append(grads_of(model))
            opt.step()
            opt.zero_grad(set_to_none=False)
        dist.barrier()
    return out


def metric_inside_checkpointed_step(rank, world_size):
    """Non-reentrant checkpointing around the wrapper, uneven shares, ``weigh_by_samples``;
    before backward, maybe a metric pass under ``no_grad``. Per variant, mode (drop-in, or
    the fallback's ``finish()``) and metric: the gradients, or what was raised."""
    from torch.utils.checkpoint import checkpoint

    out = {}
    for variant in ("NaiveDDP", "HookedDDP", "BucketedDDP"):
        for fallback in (False, True):
            for metric in (False, True):
                set_seed(0)
                model = nn.Linear(3, 2).double()
                net = wrap(model, variant, weigh_by_samples=True, finish_in_backward=not fallback)
                g = torch.Generator().manual_seed(rank)
                x = torch.randn(4 + rank, 3, generator=g, dtype=torch.float64)
                try:
                    y = checkpoint(net, x, use_reentrant=False)
                    if metric:
                        with torch.no_grad():
                            net(x[:1])  # not the step's: its recomputation must not begin one
                    y.sum().backward()
                    if fallback:
                        net.finish()
                    out[variant, fallback, metric] = grads_of(model)
                except RuntimeError as err:
                    out[variant, fallback, metric] = str(err)
    return out


class _TupleOut(nn.Module):
    """Torch's ``TwoLinLayerNet`` (distributed_test.py): two outputs, returned apart."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(10, 10, bias=False), nn.Linear(10, 1, bias=False)

    def forward(self, x):
        return self.a(x), self.b(x)


class _DictOut(nn.Module):
    """Torch's ``DictOutputModule``: the same outputs inside a dict."""

    def __init__(self):
        super().__init__()
        self.module = _TupleOut()

    def forward(self, x):
        return {"predictions": self.module(x), "loss": self.module(x)[1].sum()}


def output_unused_in_loss(rank, world_size, steps=6):
    """Torch's ``test_output_unused_in_loss_tuple_module`` / ``_dict_module`` on gloo, with
    ``find_unused_parameters``: output ``a`` enters the loss for two iterations, then not;
    one backward first with ``a`` left out. Per module and variant: ``.grad`` after each
    backward (``None`` stays ``None``), and one process's for comparison."""
    import copy

    import torch.distributed as dist

    out = {}
    for name, build in (("tuple", _TupleOut), ("dict", _DictOut)):
        set_seed(0)
        model = build().double()
        g = torch.Generator().manual_seed(1 + rank)  # inputs differ from rank to rank
        inputs = [torch.randn(10, 10, generator=g, dtype=torch.float64) for _ in range(steps)]
        for variant in ("local", "torch DDP", "BucketedDDP"):
            local = copy.deepcopy(model)
            net = local if variant == "local" else wrap(local, variant, find_unused_parameters=True)
            seen = []

            def outputs(x):
                got = net(x)
                return got["predictions"] if name == "dict" else got

            a, b = outputs(inputs[0])
            b.sum().backward()
            seen.append(grads_of(local))
            local.zero_grad()
            for i, x in enumerate(inputs):
                a, b = outputs(x)
                (a @ b).sum().backward() if i < 2 else b.sum().backward()
                seen.append(grads_of(local))
            out[name, variant] = seen
            dist.barrier()
    return out


def undefined_grads(rank, world_size):
    """Torch's ``test_undefined_grad_parity_unused_parameters`` on gloo: backward through
    ``UndefinedGrad`` leaves every ``.grad`` None in one process and under torch's DDP."""
    import copy

    x = torch.ones(1, 2, dtype=torch.float64)
    out = {}
    set_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    for variant in ("local", "torch DDP", "NaiveDDP", "HookedDDP", "BucketedDDP"):
        local = copy.deepcopy(model)
        options = (
            {"find_unused_parameters": True} if variant in ("torch DDP", "BucketedDDP") else {}
        )
        net = local if variant == "local" else wrap(local, variant, **options)
        try:
            torch._C._functions.UndefinedGrad()(net(x).sum()).backward()
            out[variant] = grads_of(local)
            net(x)  # the next step begins
        except RuntimeError as err:
            out[variant] = str(err)
    return out


class _ControlFlow(nn.Module):
    """Torch's ``ControlFlowToyModel``: the second layer runs only on an input of ones."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(10, 10, bias=False), nn.Linear(10, 10, bias=False)

    def forward(self, x):
        h = F.relu(self.lin1(x))
        return self.lin2(h) if torch.equal(x, torch.ones_like(x)) else h


def control_flow_under_no_sync(rank, world_size):
    """``test_ddp_control_flow_same_across_ranks``'s model on gloo, trained inside
    ``no_sync()`` with the second layer used every other micro-step, then one step that
    syncs, with or without it. Per ending and variant: ``.grad`` after the synced step."""
    import torch.distributed as dist

    g = torch.Generator().manual_seed(1 + rank)
    random = torch.randn(20, 10, generator=g, dtype=torch.float64)
    ones = torch.ones(20, 10, dtype=torch.float64)
    out = {}
    for last in ("random", "ones"):
        for variant in ("torch DDP", "BucketedDDP"):
            set_seed(0)
            model = _ControlFlow().double()
            net = wrap(model, variant, find_unused_parameters=True)
            with net.no_sync():
                for i in range(5):
                    net(random if i % 2 == 0 else ones).sum().backward()
            net(random if last == "random" else ones).sum().backward()
            out[last, variant] = grads_of(model)
            dist.barrier()
    return out


def small_cap_without_lowering(rank: int, world_size: int) -> str:
    """``DDP(torch.compile(lenet), bucket_cap_mb=0.1)``, one step, torch's first-bucket
    constant left at 1 MiB: the error DDPOptimizer raises (or "" if it ran)."""
    from torch.nn.parallel import DistributedDataParallel

    from companion.core import get_model

    torch._dynamo.reset()
    net = DistributedDataParallel(torch.compile(get_model("lenet"), backend="aot_eager"),
                                  bucket_cap_mb=0.1)  # fmt: skip
    try:
        net(torch.zeros(2, 1, 28, 28)).sum().backward()
    except Exception as err:  # dynamo wraps the backend's error
        return f"{type(err).__name__}: {err}"
    return ""


def process_state_after_python_reducer(rank: int, world_size: int) -> tuple[bool, bool]:
    """Inductor's DDP fusion flag, and whether dynamo inlines DDP's file, after
    compile_worker ran the compiled-autograd way (a python-reducer DDP sets both)."""
    import torch._inductor.config as inductor
    from torch._dynamo import trace_rules

    from companion.internals import compile_worker

    compile_worker(rank, world_size, ("DDP(compile(model)), compiled autograd",),
                   compiler="aot_eager", batch=2)  # fmt: skip
    inlined = "torch.nn.parallel.distributed" in trace_rules.LEGACY_MOD_INLINELIST
    return inductor._fuse_ddp_communication, inlined
