"""The fixed tree over a global batch's pieces (chapter 11): each rank's nodes cover its
block exactly, and the nodes of any number of ranks add up to one process's sum, bit for bit."""

import pytest
import torch

import companion.samebits.tree as tree
from companion.samebits import PieceLoader, children, nodes_within, rank_pieces, tree_sum
from tests.samebits.workers import leaves, one_rank_root

pytestmark = pytest.mark.ch11


def test_children_split_off_the_largest_power_of_two_below_the_size():
    assert children((0, 2)) == ((0, 1), (1, 2))
    assert children((0, 8)) == ((0, 4), (4, 8))
    assert children((3, 8)) == ((3, 7), (7, 8))
    assert children((0, 6)) == ((0, 4), (4, 6))


@pytest.mark.parametrize("pieces", range(1, 18))
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 8])
def test_every_rank_count_adds_the_same_bits(pieces, world_size):
    """Rank blocks tile the pieces; their largest nodes, finished along the tree, give one
    process's sum bit for bit (leaves of magnitudes 1e-3 to 1e3, where order shows)."""
    values, known = leaves(pieces, 257), {}
    leaf = lambda n: values[n[0]] if n[1] - n[0] == 1 else None  # noqa: E731
    covered = []
    for r in range(world_size):
        lo, hi = rank_pieces(pieces, r, world_size)
        nodes = nodes_within(lo, hi, pieces)
        covered += [i for n in nodes for i in range(*n)]
        known.update({n: tree_sum(n, leaf) for n in nodes})
    assert covered == list(range(pieces))
    assert torch.equal(tree_sum((0, pieces), known.get), one_rank_root(pieces, 257))


def test_another_order_gives_other_bits():
    """The check can fail: a left-to-right sum of the same leaves differs from the tree's."""
    values = leaves(16, 257)
    assert not torch.equal(sum(values[1:], values[0]), one_rank_root(16, 257))


def test_piece_loader_blocks_join_to_one_process_order(sample, monkeypatch):
    """Each global batch is the same samples in the same order on 1, 2 and 4 ranks: the
    ranks' blocks, joined in rank order, are the one-process batch (last batch short)."""
    one = PieceLoader(sample.train, 64, 8, "cpu", seed=3)
    one.set_epoch(2)
    whole = [y for _, y in one]
    assert sum(len(y) for y in whole) == len(sample.train) and len(whole[-1]) < 64
    for world_size in (2, 4):
        blocks = []
        for rank in range(world_size):
            loader = PieceLoader(sample.train, 64, 8, "cpu", seed=3)
            loader.set_epoch(2)
            monkeypatch.setattr(tree, "_rank_and_size", lambda r=rank, n=world_size: (r, n))
            blocks.append([y for _, y in loader])
        for k, y in enumerate(whole):
            assert torch.equal(torch.cat([b[k] for b in blocks]), y)


def test_skip_resumes_the_order_where_it_stopped(sample):
    loader = PieceLoader(sample.train, 64, 8, "cpu", seed=1)
    full = [y for _, y in loader]
    loader.skip = 5
    assert all(torch.equal(a, b) for a, b in zip([y for _, y in loader], full[5:], strict=True))
    assert len([y for _, y in loader]) == len(full)  # a skip lasts one pass


def test_bad_loader_input_says_what_to_do(sample):
    with pytest.raises(ValueError, match="pick a piece that divides it"):
        PieceLoader(sample.train, 60, 8, "cpu")
    with pytest.raises(ValueError, match="piece must be an integer >= 1"):
        PieceLoader(sample.train, 64, 0, "cpu")
