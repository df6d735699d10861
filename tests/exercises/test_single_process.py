"""The exercise checkers of chapters 1, 2, 4, 5 and 8 (one process): each passes the
chapter's own code and a right answer, and fails wrong answers on the case that is wrong."""

import pytest
import torch

from companion.elastic import make_snapshot, restore
from companion.split import shard_sizes
from companion_tools.exercises.dataparallel import check_scatter
from companion_tools.exercises.ddp import check_sampler
from companion_tools.exercises.elastic import check_resume
from companion_tools.exercises.one_device import check_evaluate
from companion_tools.exercises.split import check_forward_backward, check_shard_sizes

pytestmark = [pytest.mark.ch1, pytest.mark.ch2, pytest.mark.ch4, pytest.mark.ch5, pytest.mark.ch8]


def _failed(verdicts) -> list[str]:
    return [case for case, ok, _ in verdicts.cases if not ok]


def test_evaluate_checker_catches_a_mean_of_batch_means_and_training_mode():
    from companion.core import evaluate_accuracy

    assert check_evaluate(evaluate_accuracy, quiet=True)

    def mean_of_means(net, batches):
        net.eval()
        with torch.no_grad():
            accs = [(net(X).argmax(1) == y).float().mean().item() for X, y in batches]
        net.train()
        return sum(accs) / len(accs)

    assert _failed(check_evaluate(mean_of_means, quiet=True)) == [
        "every sample counts once (not a mean of the batches' accuracies)"
    ]

    def in_training_mode(net, batches):
        with torch.no_grad():
            right = sum(int((net(X).argmax(1) == y).sum()) for X, y in batches)
        return right / sum(len(y) for _, y in batches)

    failed = _failed(check_evaluate(in_training_mode, quiet=True))
    assert "BatchNorm's running statistics are unchanged" in failed
    crashed = check_evaluate(lambda net, batches: 1 / 0, quiet=True)
    assert "raised ZeroDivisionError" in crashed.cases[0][2]
    with pytest.raises(TypeError, match="your evaluation function"):
        check_evaluate("evaluate_accuracy")


def test_split_checkers_tell_even_shards_from_uneven_ones():
    assert check_forward_backward(quiet=True)

    def mean_of_means(replicas, X_shards, y_shards, batch_size, loss):
        for net, X, y in zip(replicas, X_shards, y_shards):
            (loss(net(X), y).mean() / len(replicas)).backward()

    failed = _failed(check_forward_backward(mean_of_means, quiet=True))
    assert failed and all(
        case.split(" on ")[0] in ("batch 7", "batch 5", "batch 6") for case in failed
    )  # even shards pass, uneven ones fail

    def by_speed(batch, speeds):  # largest remainder: within one sample of each share
        shares = [batch * s / sum(speeds) for s in speeds]
        sizes = [int(x) for x in shares]
        for i in sorted(range(len(sizes)), key=lambda i: sizes[i] - shares[i])[
            : batch - sum(sizes)
        ]:
            sizes[i] += 1
        return sizes

    assert check_shard_sizes(by_speed, quiet=True)
    even = check_shard_sizes(lambda batch, speeds: shard_sizes(batch, len(speeds)), quiet=True)
    assert _failed(even) and "batch 6 at speeds (1, 1, 1, 1)" not in _failed(even)
    lossy = check_shard_sizes(
        lambda batch, speeds: [batch // len(speeds)] * len(speeds), quiet=True
    )
    assert any("sum to" in why for _, ok, why in lossy.cases if not ok)


def test_scatter_checker_wants_every_sample_once_on_its_device():
    assert check_scatter(quiet=True)

    def even(inputs, devices):
        sizes = [s for s in shard_sizes(len(inputs[0]), min(len(devices), len(inputs[0])))]
        parts = [x.split(sizes) for x in inputs]
        return [tuple(p.to(d) for p in args) for args, d in zip(zip(*parts), devices)]

    passed = check_scatter(even, quiet=True)
    assert passed and "batch 6 over 4 devices, pieces of 2, 2, 1, 1" in [
        c for c, _, _ in passed.cases
    ]

    def strided(inputs, devices):
        X, y = inputs
        return [(X[i :: len(devices)], y[i :: len(devices)]) for i in range(len(devices))]

    assert "the pieces, put together in order, are not the batch" in {
        why for _, ok, why in check_scatter(strided, quiet=True).cases if not ok
    }

    def chunk_x_split_y(inputs, devices):  # X cut as torch.chunk, y as tensor_split
        X, y = inputs
        return list(zip(X.chunk(len(devices)), y.tensor_split(len(devices))))

    uneven = check_scatter(chunk_x_split_y, quiet=True)
    assert "batch 7 over 3 devices" in uneven.failed
    assert any("inputs and" in why for _, ok, why in uneven.cases if not ok)


def test_sampler_checker_catches_unequal_shares_and_a_seed_per_rank():
    from torch.utils.data import DistributedSampler

    assert check_sampler(quiet=True)
    unequal = check_sampler(lambda n, rank, world, epoch: list(range(rank, n, world)), quiet=True)
    assert all("not equal" in why for _, ok, why in unequal.cases if not ok) and not unequal

    def seed_per_rank(n, rank, world, epoch):
        sampler = DistributedSampler(range(n), world, rank, seed=rank)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert all("never read" in why for _, _, why in check_sampler(seed_per_rank, quiet=True).cases)

    def never_reshuffled(n, rank, world, epoch):
        sampler = DistributedSampler(range(n), world, rank)
        return list(sampler)  # set_epoch forgotten

    assert "reshuffle" in check_sampler(never_reshuffled, quiet=True).cases[0][2]

    def as_a_tensor(n, rank, world, epoch):  # torch.randperm's integers, not Python ints
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(n, generator=g)
        order = torch.cat([order, order[: -n % world or n]])[: world * -(-n // world)]
        return order[rank::world]

    assert check_sampler(as_a_tensor, quiet=True)


def test_resume_checker_needs_the_random_state_only_with_dropout():
    assert check_resume(quiet=True)

    def without_rng(*args, **kwargs):
        snapshot = make_snapshot(*args, **kwargs)
        del snapshot["rng"]
        return snapshot

    def restore_without_rng(snapshot, net, optimizer, scheduler):
        net.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        scheduler.load_state_dict(snapshot["scheduler"])
        return snapshot["epoch"], snapshot["position"], snapshot["step"]

    assert _failed(check_resume(without_rng, restore_without_rng, quiet=True)) == [
        "a model with dropout, resumed run equal to the uninterrupted run bit for bit"
    ]

    def without_schedule(snapshot, net, optimizer, scheduler):
        net.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        return snapshot["epoch"], snapshot["position"], snapshot["step"]

    assert len(_failed(check_resume(make_snapshot, without_schedule, quiet=True))) == 2
    assert "raised" in check_resume(without_rng, restore, quiet=True).cases[0][2]
