"""One process on the workers' global minibatches: joined_batches reads every shard once per
epoch in the workers' order, and last_epoch_accuracies takes train_reference's steps."""

import pytest
import torch
from torch.nn.utils import vector_to_parameters

from companion.collectives import (
    DataPartitioner,
    joined_batches,
    last_epoch_accuracies,
    train_reference,
)
from companion.core import DeviceLoader, evaluate_accuracy, get_model, get_profile, set_seed

pytestmark = pytest.mark.ch3


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_each_epoch_joins_the_ranks_minibatches_in_rank_order(small_sample, world_size):
    """Step s of an epoch is rank 0's minibatch s, then rank 1's, ...: the loaders each rank of
    train_worker reads (shard r, seed r); each epoch covers every shard once, reshuffled."""
    batch = 16
    passes = joined_batches(world_size, small_sample, batch * world_size)
    shards = DataPartitioner.even(small_sample.train, world_size, 0)
    loaders = [DeviceLoader(shards.use(r), batch, seed=r) for r in range(world_size)]
    epochs = [list(next(passes)) for _ in range(2)]
    for epoch in epochs:
        ranks = [list(loader) for loader in loaders]  # the same pass the workers make
        assert len(epoch) == len(ranks[0])
        for step, (X, y) in enumerate(epoch):
            torch.testing.assert_close(X, torch.cat([r[step][0] for r in ranks]), rtol=0, atol=0)
            assert torch.equal(y, torch.cat([r[step][1] for r in ranks]))
        seen = sorted(torch.cat([y for _, y in epoch]).tolist())
        every = sorted(torch.cat([shards.use(r).labels for r in range(world_size)]).tolist())
        assert seen == every
    assert not torch.equal(epochs[0][0][1], epochs[1][0][1])  # reshuffled


def test_the_last_accuracy_is_that_of_train_reference_s_parameters(small_sample):
    """The same steps as train_reference: after the last step, its parameters give the same
    accuracy, and the list has one value per step of the last epoch."""
    profile = get_profile("ci")
    accuracies = last_epoch_accuracies(2, small_sample, "ci", epochs=2)
    steps_per_epoch = -(-len(small_sample.train) // profile.batch_size)
    assert len(accuracies) == steps_per_epoch
    flat = train_reference(
        2,
        small_sample,
        "ci",
        global_batch=profile.batch_size,
        lr=profile.lr,
        steps=2 * steps_per_epoch,
    )
    set_seed(0)
    net = get_model(profile.processes.model)
    vector_to_parameters(flat, net.parameters())
    test = DeviceLoader(small_sample.test, 256, shuffle=False)
    assert accuracies[-1] == evaluate_accuracy(net, test)
    assert len(set(accuracies)) > 1  # measured after every step, not once
