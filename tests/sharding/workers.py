"""Workers for the chapter-9 tests (importable by the launcher's fork server as
``tests.sharding.workers``): every sharded method trains the chapter-6 model with tied, frozen
and unused parameters and a buffer, in float64, on uneven local shares of global batches."""
import torch
from torch.nn import functional as F

from companion.core import set_seed
from companion.internals import TiedFrozenUnused
from companion.sharding import METHODS, full_parameters, shard, sharded_worker

STEPS, GLOBAL = 3, 11  # 11 samples split over 2, 3 or 4 ranks: uneven shares
OPTIMIZERS = {
    "Adam": (torch.optim.Adam, {"lr": 1e-2}),
    "SGD momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
}


def quirky() -> TiedFrozenUnused:
    set_seed(0)
    return TiedFrozenUnused().double()


def global_batches(steps: int = STEPS, n: int = GLOBAL):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 1, 28, 28, generator=g, dtype=torch.float64),
             torch.randint(0, 10, (n,), generator=g)) for _ in range(steps)]


def local_loss(net, X, y, rank, world_size):
    """This rank's share of the global mean loss, times N: the 1/N average is then exact."""
    X_r, y_r = X.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]
    return F.cross_entropy(net(X_r), y_r, reduction="sum") * world_size / len(y)


def reference(batches, optimizer: str) -> torch.Tensor:
    """One process, the whole global batch, the plain optimizer."""
    net = quirky()
    cls, hp = OPTIMIZERS[optimizer]
    opt = cls([p for p in net.parameters() if p.requires_grad], **hp)
    for X, y in batches:
        F.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters() if p.requires_grad])


def equivalence_worker(rank, world_size, batches, methods=METHODS, optimizers=tuple(OPTIMIZERS)):
    """``{(method, optimizer): flat parameters after the steps}`` on this rank."""
    out = {}
    for method in methods:
        for optimizer in optimizers:
            cls, hp = OPTIMIZERS[optimizer]
            model, opt = shard(method, quirky(), cls, find_unused_parameters=True,
                               bucket_cap_mb=0.001, **hp)
            for X, y in batches:
                local_loss(model, X, y, rank, world_size).backward()
                opt.step()
                opt.zero_grad()
            out[method, optimizer] = full_parameters(model, opt)
    return out


def several(rank, world_size, data, methods, **options):
    """Chapter 5's loop with each of ``methods`` in turn (``ci`` profile)."""
    return [sharded_worker(rank, world_size, data, "ci", method=m, **options) for m in methods]
