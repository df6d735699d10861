"""Each detector passes correct evidence and catches its mistake (synthetic evidence here;
published DDP examples' mistakes, reproduced in worker processes, are in test_mistakes.py)."""

import copy

import pytest
import torch
from torch import nn

from companion.core import get_model
from companion.ddp import (
    DuplicatedWork,
    EvaluationMiscount,
    ProbabilitiesNotLogits,
    RankTrace,
    ReplicasOutOfSync,
    SameOrderEveryEpoch,
    check_disjoint_shards,
    check_eval_count,
    check_logits,
    check_order_changes,
    check_replicas_in_sync,
    diagnose,
    fingerprint,
    sampler_indices,
)

pytestmark = pytest.mark.ch5


def test_fingerprints_are_equal_for_equal_bits_and_ignore_the_wrapper():
    net = get_model("lenet")
    twin = copy.deepcopy(net)
    assert fingerprint(net) == fingerprint(twin) == fingerprint(nn.DataParallel(twin))
    with torch.no_grad():  # change one parameter by one unit in the last place
        w = twin[0].weight
        w[0, 0, 0, 0] = torch.nextafter(w[0, 0, 0, 0], torch.tensor(1.0, device=w.device))
    assert fingerprint(net) != fingerprint(twin)
    bn = nn.BatchNorm1d(3)
    before = fingerprint(bn)
    bn.running_mean += 1  # buffers count too
    assert fingerprint(bn) != before


def test_replicas_in_sync():
    check_replicas_in_sync(["a1", "a1", "a1"])
    with pytest.raises(ReplicasOutOfSync, match=r"ranks \[1, 3\] differ.*DistributedDataParallel"):
        check_replicas_in_sync(["a1", "b2", "a1", "c3"])


@pytest.mark.parametrize("n, world_size", [(10, 3), (12, 4), (601, 2)])
def test_disjoint_shards_accept_the_samplers_padding_and_nothing_more(n, world_size):
    shares = [torch.tensor(s) for s in sampler_indices(range(n), world_size)]
    check_disjoint_shards(shares, n)
    with pytest.raises(DuplicatedWork, match="DistributedSampler"):
        check_disjoint_shards(
            [torch.randperm(n) for _ in range(world_size)], n
        )  # everyone reads everything
    overlapping = [shares[0], torch.cat([shares[1], shares[0][: -n % world_size + 1]])]
    with pytest.raises(DuplicatedWork):
        check_disjoint_shards(overlapping + shares[2:], n)


def test_order_changes():
    check_order_changes([torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1]), torch.tensor([1, 2, 0])])
    check_order_changes([torch.tensor([0, 1, 2])])  # one epoch: nothing to compare
    with pytest.raises(SameOrderEveryEpoch, match="epochs 2 and 3.*set_epoch"):
        check_order_changes(
            [torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1]), torch.tensor([2, 0, 1])]
        )


def test_logits_pass_and_probabilities_are_caught():
    torch.manual_seed(0)
    logits = torch.randn(8, 10)
    check_logits(logits)
    check_logits(
        logits.abs() / logits.abs().sum(dim=1, keepdim=True) * 1.5
    )  # positive, rows sum to 1.5
    with pytest.raises(ProbabilitiesNotLogits, match="drop the final softmax"):
        check_logits(torch.softmax(logits, dim=1))


def test_eval_count():
    check_eval_count(203, 203)
    with pytest.raises(
        EvaluationMiscount, match="204 samples for a test set of 203 \\(some twice\\)"
    ):
        check_eval_count(204, 203)
    with pytest.raises(EvaluationMiscount, match="only part of them"):
        check_eval_count(102, 203)


def test_diagnose_reports_each_problem_once():
    shares = [torch.tensor(s) for s in sampler_indices(range(10), 2)]
    good = [RankTrace("f", [shares[r], shares[r].flip(0)]) for r in range(2)]
    assert diagnose(good, 10) == []
    bad = [RankTrace("f", [torch.arange(10)] * 2), RankTrace("g", [torch.arange(10)] * 2)]
    problems = diagnose(bad, 10)
    assert [p.split(":")[0] for p in problems] == [
        "ReplicasOutOfSync",
        "DuplicatedWork",
        "SameOrderEveryEpoch",
    ]


@pytest.mark.parametrize("world_size", [2, 3])
def test_buffers_count_as_of_ddps_broadcast_and_unwrapped_models_are_still_caught(world_size):
    from companion.runtime import launch
    from tests.ddp.workers import bn_fingerprints

    wrapped = launch(bn_fingerprints, world_size, timeout=120, backend="gloo")
    now, broadcast = zip(*wrapped)
    assert len(set(now)) == world_size  # the running statistics moved with each rank's batch
    check_replicas_in_sync(broadcast)  # what DDP keeps equal is equal
    alone = launch(bn_fingerprints, world_size, wrap=False, timeout=120, backend="gloo")
    with pytest.raises(ReplicasOutOfSync):
        check_replicas_in_sync([f for _, f in alone])


def test_tracked_buffers_replace_the_current_ones_and_only_in_training_mode():
    from companion.ddp import track_buffers

    net = get_model("lenet-bn")
    buffers = track_buffers(net)
    before = fingerprint(net)
    assert buffers == {} and fingerprint(net, buffers) == before
    net(torch.randn(4, 1, 28, 28))  # training mode: snapshot, then the statistics move
    assert fingerprint(net) != before and fingerprint(net, buffers) == before
    snapshot = {k: v.clone() for k, v in buffers.items()}
    net.eval()(torch.randn(4, 1, 28, 28))
    assert all(torch.equal(buffers[k], snapshot[k]) for k in snapshot)
