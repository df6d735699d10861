"""Resuming mid-epoch: the same samples as an uninterrupted run, and, with another world size,
the same global batches split differently."""

import pytest
from torch.utils.data.distributed import DistributedSampler

from companion.elastic import ResumableSampler, global_batches

pytestmark = pytest.mark.ch8

DATA = range(203)  # not a multiple of any world size below: DistributedSampler pads


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_from_the_start_it_is_a_distributed_sampler(world_size):
    for rank in range(world_size):
        ours, theirs = (
            ResumableSampler(DATA, world_size, rank, seed=5),
            DistributedSampler(DATA, world_size, rank, seed=5),
        )
        ours.set_epoch(3)
        theirs.set_epoch(3)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_a_resumed_epoch_continues_with_the_uninterrupted_batches():
    whole = global_batches(DATA, 2, 16, epoch=1)
    assert global_batches(DATA, 2, 16, epoch=1, start=5 * 16) == whole[5:]


@pytest.mark.parametrize("world_size", [1, 4, 8])
def test_another_world_size_reads_the_same_global_batches(world_size):
    before = global_batches(DATA, 2, 16, epoch=0, start=64)
    after = global_batches(DATA, world_size, 16, epoch=0, start=64)
    assert after[:-1] == before[:-1]  # all but the last: padding depends on the world size
    assert set(after[-1]) <= set(DATA) and len(after) == len(before)


def test_bad_positions_and_batches_are_refused():
    sampler = ResumableSampler(DATA, 2, 0)
    with pytest.raises(ValueError, match="past the end of the epoch"):
        sampler.set_epoch(0, 205)
    with pytest.raises(ValueError, match="not a multiple of 3 ranks"):
        global_batches(DATA, 3, 16, 0)
