"""Who reads what: the sampler-driven loader, DistributedSampler's shares, the exact test split."""

import pytest
import torch
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from companion.core import ImageSet
from companion.ddp import SampledLoader, count_correct, eval_indices, sampler_indices

pytestmark = pytest.mark.ch5


def tiny_images(n: int) -> ImageSet:
    return ImageSet(
        torch.arange(n, dtype=torch.uint8).reshape(n, 1, 1).expand(n, 2, 2).contiguous(),
        torch.arange(n) % 10,
    )


def test_the_loader_serves_batches_in_the_samplers_order_and_remembers_it():
    images = tiny_images(10)
    sampler = DistributedSampler(images, num_replicas=3, rank=1, shuffle=True, seed=5)
    loader = SampledLoader(images, sampler, batch_size=3)
    batches = list(loader)
    assert len(loader) == len(batches) == 2 and [len(y) for _, y in batches] == [3, 1]
    assert loader.indices.tolist() == list(sampler)
    seen = torch.cat([X[:, 0, 0, 0] for X, _ in batches]) * 255  # each image holds its own index
    assert seen.round().long().tolist() == loader.indices.tolist()
    with pytest.raises(ValueError, match="batch_size"):
        SampledLoader(images, sampler, batch_size=0)


def test_sampler_shares_are_disjoint_but_for_padding_and_change_with_the_epoch():
    images = tiny_images(10)
    shares = sampler_indices(images, 3, epoch=0, seed=1)
    assert [len(s) for s in shares] == [4, 4, 4]  # 10 samples padded to 12
    flat = sum(shares, [])
    assert set(flat) == set(range(10)) and len(flat) - len(set(flat)) == 2
    for rank, share in enumerate(shares):
        sampler = DistributedSampler(images, 3, rank, seed=1)
        sampler.set_epoch(0)
        assert list(sampler) == share
    assert sampler_indices(images, 3, epoch=1, seed=1) != shares
    assert sampler_indices(images, 3, epoch=0, seed=1) == shares
    assert sampler_indices(images, 3, shuffle=False) == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


@pytest.mark.parametrize("n, world_size", [(10, 3), (203, 4), (8, 4), (2, 3)])
def test_eval_shares_cover_every_sample_exactly_once(n, world_size):
    shares = [list(eval_indices(n, r, world_size)) for r in range(world_size)]
    assert sorted(sum(shares, [])) == list(range(n))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    # an unshuffled DistributedSampler deals the same way, plus its padding
    for r, share in enumerate(shares):
        assert (
            list(DistributedSampler(range(n), world_size, r, shuffle=False))[: len(share)] == share
        )


def test_eval_indices_refuses_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="rank must be in 0..1"):
        eval_indices(10, 2, 2)


def test_count_correct_counts_argmax_hits_in_batches():
    net = nn.Identity()  # the inputs are the logits
    X = torch.eye(10)[torch.tensor([3, 1, 4, 1, 5])]
    y = torch.tensor([3, 1, 0, 1, 0])
    assert count_correct(net, X, y, batch_size=2).tolist() == [3, 5]
