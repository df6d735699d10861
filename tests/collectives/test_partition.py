"""DataPartitioner, and N-process training with average_gradients equals one process on the global batch."""

import pytest
import torch
from torch.utils.data import Subset, TensorDataset

from companion.collectives import DataPartitioner, average_gradients, train_reference, train_worker
from companion.core import Data, ImageSet, Record, load_data, rank_batch_size
from companion.runtime import launch

pytestmark = pytest.mark.ch3

STEPS, GLOBAL_BATCH, LR = 5, 48, 0.1  # 48 splits evenly over 1, 2, 3 and 4 ranks


@pytest.fixture(scope="module")
def data():
    return load_data("mnist-sample", verbose=False)


def tiny_images(n: int) -> ImageSet:
    return ImageSet(torch.arange(n * 4, dtype=torch.uint8).reshape(n, 2, 2), torch.arange(n) % 10)


def test_shards_are_disjoint_seeded_and_of_the_requested_integer_sizes():
    images = tiny_images(103)
    parts = DataPartitioner(images, [50, 30, 20], seed=7)
    assert [len(parts.use(i)) for i in range(len(parts))] == [50, 30, 20]
    assert isinstance(parts.use(0), ImageSet)
    seen = torch.cat(parts.partitions)
    assert len(set(seen.tolist())) == 100  # no index twice
    for i, idx in enumerate(parts.partitions):
        torch.testing.assert_close(parts.use(i).labels, images.labels[idx])
    again, other = (
        DataPartitioner(images, [50, 30, 20], seed=7),
        DataPartitioner(images, [50, 30, 20], seed=8),
    )
    assert all(torch.equal(a, b) for a, b in zip(parts.partitions, again.partitions))
    assert not torch.equal(parts.partitions[0], other.partitions[0])


def test_even_shards_leave_out_only_the_remainder():
    parts = DataPartitioner.even(tiny_images(103), 4)
    assert [len(p) for p in parts.partitions] == [25, 25, 25, 25]
    with pytest.raises(ValueError, match="world_size"):
        DataPartitioner.even(tiny_images(10), 0)


def test_other_datasets_get_a_subset():
    dataset = TensorDataset(torch.arange(10.0))
    shard = DataPartitioner(dataset, [4, 6]).use(1)
    assert isinstance(shard, Subset) and len(shard) == 6


def test_fractions_and_oversized_shards_are_refused():
    with pytest.raises(TypeError, match="sample counts"):
        DataPartitioner(tiny_images(10), [0.5, 0.5])
    with pytest.raises(ValueError, match="at most the 10 samples"):
        DataPartitioner(tiny_images(10), [6, 6])


def test_the_global_batch_must_split_evenly():
    assert rank_batch_size(48, 4) == 12 and rank_batch_size(48, 1) == 48
    with pytest.raises(ValueError, match="choose a multiple of 4"):
        rank_batch_size(50, 4)
    with pytest.raises(ValueError, match="does not split evenly"):
        rank_batch_size(3, 4)


def test_unknown_allreduce_names_are_refused():
    with pytest.raises(ValueError, match="unknown all-reduce 'tree'"):
        average_gradients(torch.nn.Linear(2, 2), "tree")


@pytest.mark.parametrize(
    "world_size, allreduce", [(1, "ring"), (2, "ring"), (4, "ring"), (3, "recursive doubling")]
)
def test_n_processes_equal_one_process_on_the_global_batch(data, world_size, allreduce):
    # gloo: the workers compute on the CPU, with the same arithmetic as the reference
    outcomes = launch(
        train_worker,
        world_size,
        data,
        "ci",
        global_batch=GLOBAL_BATCH,
        lr=LR,
        allreduce=allreduce,
        max_steps=STEPS,
        timeout=180,
        backend="gloo",
    )
    expected = train_reference(
        world_size, data, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=STEPS
    )
    start = train_reference(world_size, data, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=0)
    assert not torch.allclose(expected, start)  # the steps did move the parameters
    for rank, outcome in enumerate(outcomes):
        assert torch.equal(outcome.params, outcomes[0].params), f"rank {rank}'s replica drifted"
        torch.testing.assert_close(outcome.params, expected)
        assert len(outcome.allreduce_seconds) == 1 and outcome.allreduce_seconds[0] >= 0
        assert len(outcome.records) == (1 if rank == 0 else 0)


@pytest.mark.parametrize("world_size", [2, 3])
def test_short_last_batches_across_epochs_still_match_one_process(data, world_size):
    # 100 samples: shards of 50 or 33 are not multiples of the local batch of 4, so every
    # epoch ends in a short batch (2 or 1 samples per rank) and training runs into epoch 2
    small = Data(
        "small", ImageSet(data.train.images[:100], data.train.labels[:100]), data.test, data.classes
    )
    batch, steps = 4 * world_size, 17
    outcomes = launch(
        train_worker,
        world_size,
        small,
        "ci",
        model="lenet",
        global_batch=batch,
        lr=LR,
        epochs=3,
        max_steps=steps,
        timeout=180,
        backend="gloo",
    )
    assert len(outcomes[0].records) == 2  # the short batch ended epoch 1
    expected = train_reference(
        world_size, small, "ci", model="lenet", global_batch=batch, lr=LR, steps=steps
    )
    for outcome in outcomes:
        torch.testing.assert_close(outcome.params, expected)


def test_rank_zero_returns_the_records_and_every_replica_ends_equal(data):
    outcomes = launch(
        train_worker, 2, data, "ci", epochs=2, max_steps=6, timeout=180, backend="gloo"
    )
    assert outcomes[1].records == [] and torch.equal(outcomes[0].params, outcomes[1].params)
    records = outcomes[0].records
    assert [r.epoch for r in records] == [1]  # max_steps ends training within the first epoch
    r = records[0]
    assert isinstance(r, Record) and r.n_devices == 2 and r.method == "average_gradients (ring)"
    assert (
        0 <= r.test_acc <= 1 and r.sec_per_epoch > 0 and r.samples_per_sec > 0 and r.profile == "ci"
    )


def test_max_steps_must_be_positive(data):
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        train_worker(0, 1, data, "ci", max_steps=0)
