"""Workers for the chapter-9 tests (importable by the launcher's fork server as
``tests.sharding.workers``)."""

from companion.sharding import sharded_worker


def several(rank, world_size, data, methods, **options):
    """Chapter 5's loop with each of ``methods`` in turn (``ci`` profile)."""
    return [sharded_worker(rank, world_size, data, "ci", method=m, **options) for m in methods]


def old_names_worker(rank, world_size, methods):
    """``state_worker`` with torch.distributed as torch before 2.13 has it: no
    ``reduce_scatter_single`` or ``all_gather_single``, only the older names."""
    import torch.distributed as dist

    from companion.sharding.measure import state_worker

    hidden = {
        n: getattr(dist, n)
        for n in ("reduce_scatter_single", "all_gather_single")
        if hasattr(dist, n)
    }
    for name in hidden:
        delattr(dist, name)
    try:
        return state_worker(rank, world_size, methods)
    finally:
        for name, real in hidden.items():
            setattr(dist, name, real)


# Parameters that get no gradient in some steps (issue 42, items 1 and 4).

import math  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

AWKWARD_STEPS = 4
AWKWARD_OPTIMIZERS = {
    "SGD": (torch.optim.SGD, {"lr": 0.1, "weight_decay": 0.05}),
    "SGD momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.05}),
    "Adam": (torch.optim.Adam, {"lr": 1e-2, "weight_decay": 0.05}),
    "AdamW": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
}
STAGES = ("ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3 prefetch", "DDP", "FSDP2")  # torch's two too


class Awkward(nn.Module):
    """A parameter never used, a layer used in the first two steps only, a frozen layer, a
    zero-size parameter, and sizes (52 trainable numbers in all) that 3 and 4 do not divide."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(5, 4), nn.Linear(4, 3)
        self.early = nn.Linear(4, 3, bias=False)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)
        self.never = nn.Parameter(torch.ones(5))
        self.empty = nn.Parameter(torch.zeros(0))
        self.double()

    def forward(self, x, step: int):
        h = torch.tanh(self.a(x))
        out = self.b(h) + (self.early(h) if step < 2 else 0)
        return self.frozen(out) + self.empty.sum()  # a zero-size gradient, every step


def _awkward_batches(world_size):
    g = torch.Generator().manual_seed(3)
    return [torch.randn(7, 5, generator=g, dtype=torch.float64) for _ in range(AWKWARD_STEPS)]


def _loss(net, x, step, rank, world_size):
    """This rank's uneven share of ``x`` (7 samples); loss scaled so that the 1/N average
    of the gradients is the gradient of the global mean."""
    cuts = [len(x) * r // world_size for r in range(world_size + 1)]
    mine = x[cuts[rank] : cuts[rank + 1]]
    return net(mine, step).pow(2).sum() * world_size / len(x)


def awkward_one_process(optimizer):
    net = Awkward()
    cls, hp = AWKWARD_OPTIMIZERS[optimizer]
    opt = cls(net.parameters(), **hp)  # frozen and never-used ones included, as a reader would
    for step, x in enumerate(_awkward_batches(1)):
        opt.zero_grad()
        _loss(net, x, step, 0, 1).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters() if p.requires_grad])


def awkward_worker(rank, world_size):
    """Every stage and optimizer on Awkward: the parameters after the steps, and how far
    ``step(); zero_grad(); step()`` and ``backward(); zero_grad(); step()`` moved them."""
    from companion.sharding import shard
    from companion.sharding.training import full_parameters

    out = {}
    for method in STAGES:
        for optimizer, (cls, hp) in AWKWARD_OPTIMIZERS.items():
            unused = {"find_unused_parameters": True} if method == "DDP" else {}
            net, opt = shard(method, Awkward(), cls, **unused, **hp)
            batches = _awkward_batches(world_size)
            for step, x in enumerate(batches):
                opt.zero_grad()
                _loss(net, x, step, rank, world_size).backward()
                opt.step()
            trained = full_parameters(net, opt)
            opt.zero_grad()
            opt.step()  # no gradient at all: nothing moves
            after_empty_step = full_parameters(net, opt)
            _loss(net, batches[0], 5, rank, world_size).backward()
            opt.zero_grad()  # the gradient is discarded ...
            opt.step()  # ... so nothing moves
            after_discarded = full_parameters(net, opt)
            out[method, optimizer] = (trained, after_empty_step, after_discarded)
    return out


def reading_after_zero3(rank, world_size, tmp):
    """Issue 42 items 2 and 3: what a notebook reader does with a sharded model after a step."""
    from pathlib import Path

    from companion.runtime.checkpoint import save_checkpoint
    from companion.sharding import shard

    seen = {}
    net, opt = shard("ZeRO-3", Awkward(), torch.optim.SGD, lr=0.1)
    _loss(net, _awkward_batches(world_size)[0], 0, rank, world_size).backward()
    opt.step()
    try:
        seen["sum"] = float(net.a.weight.sum())
    except RuntimeError as err:
        seen["sum"] = f"{type(err).__name__}: {err}"
    net(_awkward_batches(world_size)[0], 0)  # inside forward the unit is whole: no error
    seen["is a Linear"] = isinstance(net.a, torch.nn.Linear)
    seen["whole"] = opt.full_parameters()[2].shape  # a.weight (after never, empty), gathered
    for name, call in (
        ("state_dict", net.state_dict),
        ("save_checkpoint", lambda: save_checkpoint(net, Path(tmp) / f"z{rank}.pt")),
        ("shard again", lambda: shard("ZeRO-3", net, torch.optim.SGD, lr=0.1)),
    ):
        try:
            call()
            seen[name] = "accepted"
        except (RuntimeError, ValueError) as err:
            seen[name] = str(err)
    seen["file written"] = (Path(tmp) / f"z{rank}.pt").exists()
    fsdp, _ = shard("FSDP2", Awkward(), torch.optim.SGD, lr=0.1)
    try:
        save_checkpoint(fsdp, Path(tmp) / f"f{rank}.pt")
        seen["fsdp2 save_checkpoint"] = "accepted"
    except ValueError as err:
        seen["fsdp2 save_checkpoint"] = str(err)
    return seen


def _scheduled(opt):
    """Warm-up for two steps, then halve the rate every step (torch's own schedulers)."""
    from torch.optim import lr_scheduler as ls

    return ls.SequentialLR(
        opt, [ls.LinearLR(opt, 0.25, total_iters=2), ls.StepLR(opt, 1, 0.5)], milestones=[2]
    )


def scheduled_one_process(optimizer):
    from torch.nn import functional as F

    from companion.sharding.verify import OPTIMIZERS, _model, global_batches

    net = _model()
    cls, hp = OPTIMIZERS[optimizer]
    opt = cls([p for p in net.parameters() if p.requires_grad], **hp)
    sched = _scheduled(opt)
    for X, y in global_batches(5):
        F.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters() if p.requires_grad])


def _sharded_from(method, whole, cls, hp):
    """A fresh chapter-6 model whose trainable parameters are ``whole``, under ``method``."""
    from companion.sharding import shard
    from companion.sharding.verify import _model

    fresh = _model()
    with torch.no_grad():
        trainable = [p for p in fresh.parameters() if p.requires_grad]
        torch.nn.utils.vector_to_parameters(whole, trainable)
    return shard(method, fresh, cls, bucket_cap_mb=0.001, **hp)


def optimizer_contract_worker(rank, world_size):
    """Each stage under torch's schedulers (warm-up, then StepLR) for 5 steps, and each stage
    resumed from its shard_state_dict() after 3 steps into a fresh model: the whole
    parameters."""
    from companion.sharding import shard
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import OPTIMIZERS, _model, _share_loss, global_batches

    batches, out = global_batches(5), {}

    def share_step(model, opt, X, y):
        opt.step(lambda: _share_loss(model, X, y).backward())  # step(closure), as torch's
        opt.zero_grad()

    for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        for optimizer in OPTIMIZERS:
            cls, hp = OPTIMIZERS[optimizer]
            model, opt = shard(method, _model(), cls, bucket_cap_mb=0.001, **hp)
            sched = _scheduled(opt)
            for X, y in batches:
                share_step(model, opt, X, y)
                sched.step()
            out[method, optimizer, "scheduled"] = full_parameters(model, opt)
            model, opt = shard(method, _model(), cls, bucket_cap_mb=0.001, **hp)
            for X, y in batches[:3]:
                share_step(model, opt, X, y)
            saved, whole = opt.shard_state_dict(), full_parameters(model, opt)
            model, opt = _sharded_from(method, whole, cls, hp)
            opt.load_shard_state_dict(saved)
            for X, y in batches[3:]:
                share_step(model, opt, X, y)
            out[method, optimizer, "resumed"] = full_parameters(model, opt)
    return out


def mixed_worker(rank, world_size, methods=("ZeRO-3", "FSDP2"), steps=4):
    """bf16 training, cast at gather (ZeRO-3's ``param_dtype``, FSDP2's policy) under
    autocast, SGD: each method's whole fp32 parameters after ``steps`` steps."""
    import torch
    from torch.nn import functional as F

    from companion.core import MathMode, set_seed
    from companion.runtime import rank_device
    from companion.sharding.measure import divisible_mlp
    from companion.sharding.training import full_parameters, shard

    device = rank_device()
    mode = MathMode("bf16", device)
    g = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 12, (8,), generator=g))]
    batches *= steps
    out = {}
    for method in methods:
        set_seed(0)
        model, opt = shard(method, divisible_mlp(24, 3).to(device), torch.optim.SGD, mode, lr=0.1)
        for X, y in batches:
            with mode.autocast():
                loss = F.cross_entropy(model(X.to(device)), y.to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
        out[method] = full_parameters(model, opt)
    return out


def unresharded_worker(rank, world_size):
    """Saved weight bytes after a bf16 forward of FSDP2 kept gathered after forward."""
    import torch

    from companion.core import MathMode
    from companion.sharding.library import fsdp2
    from companion.sharding.measure import divisible_mlp
    from companion.sharding.memory import saved_weight_bytes

    mode = MathMode("bf16", "cpu")
    net = divisible_mlp(96, 4)
    model, _ = fsdp2(net, torch.optim.SGD, reshard_after_forward=False, mode=mode, lr=0.1)
    return saved_weight_bytes(model, torch.randn(8, 1, 28, 28), mode.autocast())


def overflow_worker(rank, world_size, methods, scaler_kind="sharded"):
    """fp16 with ``ShardedScaler`` (or torch's plain ``GradScaler``, ``scaler_kind="plain"``):
    an inf planted in the last rank's gradient shard on the first step only. Per method:
    whether this rank saw an inf itself, the scale after both steps, whether step 1 left the
    parameters alone and step 2 moved them, and the parameters."""
    import torch
    from torch.nn import functional as F

    from companion.core import MathMode, set_seed
    from companion.sharding import ShardedScaler, gradient_shards
    from companion.sharding.measure import divisible_mlp
    from companion.sharding.training import full_parameters, shard

    mode = MathMode("fp16", "cpu")
    g = torch.Generator().manual_seed(rank)
    X, y = torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 12, (8,), generator=g)
    out = {}
    for method in methods:
        set_seed(0)
        model, opt = shard(method, divisible_mlp(24, 3), torch.optim.SGD, mode, lr=0.1)
        if scaler_kind == "plain":
            scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        else:
            scaler = ShardedScaler(init_scale=1024.0)
        seen, local = [], False
        for step in range(2):
            seen.append(full_parameters(model, opt))
            with mode.autocast():
                loss = F.cross_entropy(model(X), y)
            scaler.scale(loss).backward()
            shards = [s for s in gradient_shards(opt) if s.numel()]
            if step == 0 and rank == world_size - 1:
                shards[0].view(-1)[0] = float("inf")
            if step == 0:
                local = any(not torch.isfinite(s).all() for s in shards)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        seen.append(full_parameters(model, opt))
        out[method] = {
            "local": local,
            "scale": scaler.get_scale(),
            "step 1 skipped": torch.equal(seen[0], seen[1]),
            "step 2 taken": not torch.equal(seen[1], seen[2]),
            "params": seen[2],
        }
    return out


def same_start_worker(rank, world_size, apart):
    torch.manual_seed(rank if apart else 0)
    from companion.ddp.detectors import ReplicasOutOfSync
    from companion.sharding.pitfalls import check_same_start

    try:
        check_same_start(nn.Linear(4, 3))
    except ReplicasOutOfSync as err:
        return str(err)
    return None


def uneven_mesh_worker(rank, world_size, replicas):
    from companion.sharding import device_mesh, hybrid_groups

    refused = []
    for build in (lambda: device_mesh("cpu", replicas), lambda: hybrid_groups(replicas)):
        try:
            build()
        except ValueError as err:
            refused.append(str(err))
    return refused


# Checkpoints that would load partly, and resumes with a parameter never stepped (issue 54,
# items 4 and 5).

LOADERS = ("plain", "DDP", "FSDP2", "ZeRO-1", "ZeRO-3")


class Late(nn.Module):
    """``late`` gets its first gradient at step 2: after a save at step 2 it has no optimizer
    state in the checkpoint. ``extra`` adds a layer (trainable, or frozen)."""

    def __init__(self, extra: str = ""):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.late = nn.Linear(6, 5), nn.Linear(5, 3)
        if extra:
            self.extra = nn.Linear(3, 3).requires_grad_(extra == "trainable")
        self.double()

    def forward(self, x, step=0):
        h = torch.tanh(self.a(x))
        out = h[:, :3] + (self.late(h) if step >= 2 else 0)
        return self.extra(out) if hasattr(self, "extra") else out


def _built(method, net, optimizer_class=torch.optim.Adam, **defaults):
    from companion.sharding.training import shard

    if method == "plain":
        return net, optimizer_class([p for p in net.parameters() if p.requires_grad], **defaults)
    return shard(method, net, optimizer_class, find_unused_parameters=method == "DDP", **defaults)


def _late_steps(method, model, optimizer, steps, rank, world_size):
    for step in steps:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(4 * world_size, 6, generator=g, dtype=torch.float64)[
            rank * 4 : rank * 4 + 4
        ]
        optimizer.zero_grad()
        (model(x, step) ** 2).mean().backward()
        if method == "plain" and world_size > 1:  # average by hand, as DDP does
            for p in model.parameters():
                if p.grad is not None:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= world_size
        optimizer.step()


def partial_load_worker(rank, world_size, tmp, method):
    """Save after steps 0-1 (``late`` never stepped); then load into models and optimizers
    that differ (each must be refused), and into the same ones (must resume to the
    parameters of a run never interrupted, over steps 2-3)."""
    from companion.sharding import full_parameters
    from companion.sharding.checkpoint import load_sharded, save_sharded

    def fresh(extra="", wrap=False, optimizer_class=torch.optim.Adam, **defaults):
        net = Late(extra)
        net = nn.Sequential(net) if wrap else net
        return _built(method, net, optimizer_class, **(defaults or {"lr": 1e-2}))

    whole = fresh()
    _late_steps(method, *whole, range(4), rank, world_size)
    saved = fresh()
    _late_steps(method, *saved, range(2), rank, world_size)
    save_sharded(*saved, f"{tmp}/{method}")
    refused = {}
    for case, options in {
        "wrapped in nn.Sequential": dict(wrap=True),
        "one more layer": dict(extra="trainable"),
        "one more frozen layer": dict(extra="frozen"),
        "SGD with momentum": dict(optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9),
    }.items():
        model, optimizer = fresh(**options)
        try:
            load_sharded(model, optimizer, f"{tmp}/{method}")
            refused[case] = "loaded"
        except ValueError as error:
            refused[case] = str(error)
    resumed = fresh()
    load_sharded(*resumed, f"{tmp}/{method}")
    _late_steps(method, *resumed, range(2, 4), rank, world_size)
    return refused, full_parameters(*resumed), full_parameters(*whole)


def sync_attribute_worker(rank, world_size, batches, method, micro_steps):
    """nanoGPT's accumulation under ``method``: ``require_backward_grad_sync`` set on the
    model before each micro-step, ``True`` on the last only. The whole parameters after the
    steps, and the collectives (``{kind: count}``) of each micro-step of the first step and
    of its ``optimizer.step()``."""

    from companion.sharding.ledger import count_bytes
    from companion.sharding.training import full_parameters, shard
    from companion.sharding.verify import OPTIMIZERS, _model, _share_loss

    cls, hp = OPTIMIZERS["Adam"]
    net, opt = shard(method, _model(), cls, find_unused_parameters=True, **hp)  # DDP's
    seen = []
    for step, (X, y) in enumerate(batches):
        micro = list(zip(X.tensor_split(micro_steps), y.tensor_split(micro_steps)))
        for i, (X_m, y_m) in enumerate(micro):
            net.require_backward_grad_sync = i == micro_steps - 1
            with count_bytes() as ledger:
                _share_loss(net, X_m, y_m, total=len(y)).backward()
            if step == 0:
                seen.append(ledger.counts())
        with count_bytes() as ledger:
            opt.step()  # ZeRO-2 with an unused parameter reduces its bucket here
        if step == 0:
            seen.append(ledger.counts())
        opt.zero_grad()
    return full_parameters(net, opt), seen


def whole_state_worker(rank, world_size, plain_states, steps=3):
    """nanoGPT's optimizer checkpoint under each stage: after ``steps`` steps every rank calls
    ``consolidate_state_dict(to=0)``, rank 0 alone takes ``state_dict()`` (``torch.save``'s
    input), every rank loads it into a fresh stage (its parameters set to the saved ones) and
    trains the remaining steps. Also: ``plain_states[optimizer]``, a one-process optimizer's
    state after ``steps`` steps, loaded the same way. Per stage and optimizer: rank 0's
    whole state, what state_dict() raised on the other ranks and before consolidating, and
    the whole parameters at the end of both resumes."""
    import torch.distributed as dist

    from companion.sharding import shard
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import OPTIMIZERS, _model, _share_loss, global_batches

    batches, out = global_batches(5), {}

    def train(model, opt, part):
        for X, y in part:
            _share_loss(model, X, y).backward()
            opt.step()
            opt.zero_grad()

    def resumed(method, cls, hp, whole, state):
        model, opt = _sharded_from(method, whole, cls, hp)
        opt.load_state_dict(state)
        train(model, opt, batches[steps:])
        return full_parameters(model, opt)

    for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        for optimizer in OPTIMIZERS:
            cls, hp = OPTIMIZERS[optimizer]
            model, opt = shard(method, _model(), cls, bucket_cap_mb=0.001, **hp)
            train(model, opt, batches[:steps])
            try:
                opt.state_dict()
                out[method, optimizer, "before"] = "returned"
            except RuntimeError as err:
                out[method, optimizer, "before"] = str(err)
            opt.consolidate_state_dict(to=0)
            whole = full_parameters(model, opt)
            try:
                state = opt.state_dict()
            except RuntimeError as err:
                state, out[method, optimizer, "elsewhere"] = None, str(err)
            if rank == 0:
                out[method, optimizer, "state"] = state
            box = [state]
            dist.broadcast_object_list(box, src=0)  # each rank reads rank 0's file
            out[method, optimizer, "resumed"] = resumed(method, cls, hp, whole, box[0])
            plain, plain_whole = plain_states[optimizer]
            out[method, optimizer, "from plain"] = resumed(method, cls, hp, plain_whole, plain)
    return out


class _Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.p, self.q = nn.Linear(12, 12), nn.Linear(12, 12)

    def forward(self, h, use_q: bool):
        h = torch.relu(self.p(h))
        return h + torch.tanh(self.q(h)) if use_q else h


class Branchy(nn.Module):
    """A layer ``a``, a unit ``body`` whose second layer ``q`` runs only when ``use_q`` (so a
    unit is half used in some micro-steps), and a head."""

    def __init__(self):
        super().__init__()
        self.a, self.body, self.head = nn.Linear(784, 12), _Body(), nn.Linear(12, 10)
        self.use_q = True

    def forward(self, x):
        return self.head(self.body(torch.relu(self.a(x.flatten(1))), self.use_q))


def branchy(seed=0):
    from companion.core import set_seed

    set_seed(seed)
    return Branchy().double()


def branchy_one_process(batches, micro_steps, uses):
    """One process on the global micro-batches, ``use_q`` as in ``uses``, Adam."""
    from torch.nn import functional as F

    from companion.sharding.verify import OPTIMIZERS

    net = branchy()
    cls, hp = OPTIMIZERS["Adam"]
    opt = cls(net.parameters(), **hp)
    for X, y in batches:
        for use, X_m, y_m in zip(uses, X.tensor_split(micro_steps), y.tensor_split(micro_steps)):
            net.use_q = use
            (F.cross_entropy(net(X_m), y_m, reduction="sum") / len(y)).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def branchy_worker(rank, world_size, batches, method, uses, syncs):
    """The same under ``method``: micro-step ``i`` runs with ``use_q = uses[i]`` and
    ``require_backward_grad_sync = syncs[i]``; the whole parameters after the steps."""
    from companion.sharding.training import full_parameters, shard
    from companion.sharding.verify import OPTIMIZERS, _share_loss

    cls, hp = OPTIMIZERS["Adam"]
    net, opt = shard(method, branchy(), cls, find_unused_parameters=True, **hp)
    model = net.module if hasattr(net, "module") else net
    for X, y in batches:
        micro = zip(uses, syncs, X.tensor_split(len(uses)), y.tensor_split(len(uses)))
        for use, sync, X_m, y_m in micro:
            model.use_q, net.require_backward_grad_sync = use, sync
            _share_loss(net, X_m, y_m, total=len(y)).backward()
        opt.step()
        opt.zero_grad()
    return full_parameters(net, opt)


CLIPS = {  # how a step is clipped: torch's call on one process, the stage's call
    "norm 2": (
        lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.1),
        lambda o: o.clip_grad_norm_(0.1),
    ),
    "norm 1": (
        lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.5, norm_type=1.0),
        lambda o: o.clip_grad_norm_(0.5, norm_type=1.0),
    ),
    "norm inf": (
        lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.01, norm_type=math.inf),
        lambda o: o.clip_grad_norm_(0.01, norm_type=math.inf),
    ),
    "value": (
        lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.002),
        lambda o: o.clip_grad_value_(0.002),
    ),
}


def torch_clip_worker(rank, world_size, batches):
    """Issue 54, item 2: nanoGPT's ``torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)``
    (and ``clip_grad_value_``) on each stage's model, what it raised; then training clipped by
    each of :data:`CLIPS` through the stage's own call. Also: torch's call on a plain model
    built after the stages, which must still work."""
    from companion.sharding import shard
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import OPTIMIZERS, _model, _share_loss

    cls, hp = OPTIMIZERS["SGD momentum"]
    out = {}
    for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        for kind, (_, clip) in CLIPS.items():
            model, opt = shard(method, _model(), cls, bucket_cap_mb=0.001, **hp)
            for step, (X, y) in enumerate(batches):
                _share_loss(model, X, y).backward()
                if step == 0:
                    for name in ("clip_grad_norm_", "clip_grad_value_"):
                        try:
                            getattr(torch.nn.utils, name)(model.parameters(), 1.0)
                            out[method, name] = "returned"
                        except RuntimeError as err:
                            out[method, name] = str(err)
                out[method, kind, step] = float(clip(opt) or 0.0)
                opt.step()
                opt.zero_grad()
            out[method, kind] = full_parameters(model, opt)
    plain = torch.nn.Linear(3, 2)
    plain(torch.ones(1, 3)).sum().backward()
    out["plain"] = float(torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0))
    return out


def _decay_groups(net):
    """nanoGPT's configure_optimizers: weight decay on matrices, none on biases."""
    trainable = [p for p in net.parameters() if p.requires_grad]
    return [
        {"params": [p for p in trainable if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0, "lr": 3e-3},
    ]


def groups_one_process(batches, steps=3):
    """One process's AdamW over :func:`_decay_groups`: the parameters after all the batches,
    and the state after ``steps`` of them (with the parameters then)."""
    import copy

    import torch.nn.functional as F

    from companion.sharding.training import full_parameters
    from companion.sharding.verify import _model

    net = _model()
    opt = torch.optim.AdamW(_decay_groups(net), lr=1e-2)
    saved = None
    for i, (X, y) in enumerate(batches):
        if i == steps:
            saved = (copy.deepcopy(opt.state_dict()), full_parameters(net, opt))  # not live
        F.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
    return full_parameters(net, opt), saved


def groups_worker(rank, world_size, batches, plain_state, path, steps=3):
    """Issue 54, item 9: each stage built with nanoGPT's two AdamW groups (``params=``): the
    parameters after the batches; its consolidated whole state after ``steps`` (rank 0); a
    fresh stage loaded from one process's state and from a sharded checkpoint, trained on."""
    import torch.distributed as dist

    from companion.sharding import load_sharded, save_sharded, shard
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import _model, _share_loss

    out = {}

    def build(method, whole=None):
        net = _model()
        if whole is not None:
            with torch.no_grad():
                trainable = [p for p in net.parameters() if p.requires_grad]
                torch.nn.utils.vector_to_parameters(whole, trainable)
        opt_kw = {"params": _decay_groups(net), "lr": 1e-2, "bucket_cap_mb": 0.001}
        return shard(method, net, torch.optim.AdamW, **opt_kw)

    def train(model, opt, part):
        for X, y in part:
            _share_loss(model, X, y).backward()
            opt.step()
            opt.zero_grad()

    for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        model, opt = build(method)
        train(model, opt, batches[:steps])
        opt.consolidate_state_dict(to=0)
        if rank == 0:
            out[method, "state"] = opt.state_dict()
        save_sharded(model, opt, f"{path}/{method}")
        train(model, opt, batches[steps:])
        out[method, "trained"] = full_parameters(model, opt)
        model, opt = build(method, plain_state[1])
        opt.load_state_dict(plain_state[0])
        train(model, opt, batches[steps:])
        out[method, "from plain"] = full_parameters(model, opt)
        model, opt = build(method)
        load_sharded(model, opt, f"{path}/{method}")
        train(model, opt, batches[steps:])
        out[method, "from checkpoint"] = full_parameters(model, opt)
        dist.barrier()
    return out


def nan_norm_worker(rank, world_size):
    """A NaN in the last rank's shard only: the inf-norm and the 2-norm of the whole gradient
    are NaN on every rank, and ``error_if_nonfinite`` raises on every rank."""
    from companion.sharding import clip_shards

    out = {}
    for norm_type in (2.0, math.inf):
        bad = math.nan if rank == world_size - 1 else 0.5
        out[norm_type] = float(clip_shards([torch.tensor([1.0, bad])], 1.0, None, norm_type))
        try:
            clip_shards([torch.tensor([1.0, bad])], 1.0, None, norm_type, error_if_nonfinite=True)
            out[norm_type, "raised"] = None
        except RuntimeError as err:
            out[norm_type, "raised"] = str(err)
    return out
