"""The ranks finish the tree (chapter 11): both exchanges give one process's sum bit for bit
on every rank, and the halving one sends an all-reduce's bytes."""

import pytest
import torch

from companion.runtime import launch
from companion.samebits import fits_halving
from tests.samebits.workers import exchange_worker, one_rank_root

pytestmark = pytest.mark.ch11


@pytest.mark.parametrize("world_size", [2, 4])
def test_halving_doubling_is_the_tree_and_an_all_reduce_s_bytes(world_size):
    numel = 1001  # odd: the halves are uneven
    runs = launch(exchange_worker, world_size, 8, numel, "halving", backend="gloo", timeout=60)
    root = one_rank_root(8, numel)
    assert all(torch.equal(r["root"], root) for r in runs)
    ring = 2 * (world_size - 1) / world_size * numel * 4
    assert all(abs(r["sent"] - ring) <= 4 * world_size for r in runs)  # uneven halves: +-1
    assert all(r["calls"] == {"send": 2 * (world_size - 1).bit_length()} for r in runs)


@pytest.mark.parametrize(("world_size", "pieces"), [(2, 3), (3, 6), (3, 2), (4, 5)])
def test_gather_finishes_any_tree(world_size, pieces):
    """Uneven blocks, a rank with no piece, a rank count that is not a power of two."""
    runs = launch(exchange_worker, world_size, pieces, 33, "gather", backend="gloo", timeout=60)
    assert all(torch.equal(r["root"], one_rank_root(pieces, 33)) for r in runs)


def test_finish_tree_takes_halving_only_where_it_fits():
    assert fits_halving(8, 4) and fits_halving(4, 4) and fits_halving(8, 1)
    assert not fits_halving(8, 3) and not fits_halving(6, 2) and not fits_halving(2, 4)
    runs = launch(exchange_worker, 2, 3, 17, "finish halving", backend="gloo", timeout=60)
    assert all(r["calls"] == {"all-gather": 1} for r in runs)  # 3 pieces: gathered
    assert all(torch.equal(r["root"], one_rank_root(3, 17)) for r in runs)
