"""Workers for the chapter-11 tests (importable by the launcher's fork server as
``tests.samebits.workers``)."""

import torch
import torch.distributed as dist

from companion.core import set_seed
from companion.core.data import ImageSet
from companion.core.training import flat_params, train_epoch
from companion.internals import TiedFrozenUnused
from companion.samebits import (
    PieceLoader,
    PieceStep,
    finish_tree,
    gather_nodes,
    halving_doubling,
    nodes_within,
    rank_pieces,
    tree_sum,
)
from companion.sharding import Ledger, count_bytes


def leaves(pieces: int, numel: int, dtype=torch.float32) -> list[torch.Tensor]:
    """One random vector per piece, the same on every rank (seed 0), of mixed magnitudes."""
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(numel, generator=g, dtype=dtype) * 10.0 ** (i % 7 - 3) for i in range(pieces)
    ]


def one_rank_root(pieces: int, numel: int) -> torch.Tensor:
    """The tree's sum in one process, every piece local."""
    values = leaves(pieces, numel)
    return tree_sum((0, pieces), lambda n: values[n[0]] if n[1] - n[0] == 1 else None)


def exchange_worker(rank: int, world_size: int, pieces: int, numel: int, how: str) -> dict:
    """This rank's node sums of the shared leaves, finished by ``how``; the root and the
    ledger of what this rank sent."""
    values = leaves(pieces, numel)
    lo, hi = rank_pieces(pieces, rank, world_size)
    leaf = lambda n: values[n[0]] if n[1] - n[0] == 1 else None  # noqa: E731
    mine = [tree_sum(n, leaf) for n in nodes_within(lo, hi, pieces)]
    ledger = Ledger(world_size)
    with count_bytes(ledger):
        if how == "halving":
            root = halving_doubling(mine[0])
        elif how == "gather":
            root = gather_nodes(mine, pieces, torch.zeros(numel))
        else:  # "finish halving": finish_tree's choice
            root = finish_tree(mine, pieces, torch.zeros(numel), how.split()[1])
    return {"root": root, "sent": ledger.sent(), "calls": ledger.counts()}


def quirky_worker(
    rank: int, world_size: int, data: ImageSet, optimizer: str, threads: int, unused: bool
) -> torch.Tensor:
    """An epoch of chapter 6's model with tied, frozen (and unused) parameters and a buffer,
    with the pieces' step, at ``threads`` threads; the final parameters."""
    from companion.ddp.join import OPTIMIZERS

    torch.set_num_threads(threads)
    set_seed(0)
    net = TiedFrozenUnused(unused)
    cls, options = OPTIMIZERS[optimizer]
    opt = cls([p for p in net.parameters() if p.requires_grad], **options)
    loader = PieceLoader(data, 32, 4, "cpu", seed=0)
    train_epoch(net, loader, torch.nn.CrossEntropyLoss(), opt, "cpu", step=PieceStep(loader))
    assert dist.get_world_size() == world_size
    return flat_params(net)
