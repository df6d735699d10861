"""Published DDP examples' mistakes, reproduced in worker processes: each is caught by its own detector,
and the correct loop passes all of them. Evaluation: right, per rank, and padded."""

import math

import pytest

from companion.ddp import (
    MISTAKES,
    EvaluationMiscount,
    check_eval_count,
    detect,
    evaluate_three_ways,
    train_with_mistake,
)
from companion.runtime import WorkerError, launch

pytestmark = pytest.mark.ch5

CAUGHT_BY = {
    None: [],
    "dataparallel": ["ReplicasOutOfSync"],
    "no-sampler": ["DuplicatedWork"],
    "no-set-epoch": ["SameOrderEveryEpoch"],
    "softmax": ["ProbabilitiesNotLogits"],
}


def test_every_mistake_has_a_detector():
    assert set(CAUGHT_BY) == set(MISTAKES)


@pytest.mark.parametrize("mistake", list(MISTAKES), ids=str)
def test_each_mistake_is_caught_by_its_detector_and_only_by_it(small, mistake):
    runs = launch(train_with_mistake, 2, small, mistake, epochs=2, timeout=120, backend="gloo")
    assert [p.split(":")[0] for p in detect(runs, len(small.train))] == CAUGHT_BY[mistake]
    assert all(len(run.losses) == 2 for run in runs)
    if (
        mistake == "softmax"
    ):  # softmax, then CrossEntropyLoss: the loss cannot go below log(1 + 9/e)
        assert min(runs[0].losses) > math.log(1 + 9 / math.e)


def test_an_unknown_mistake_is_refused(small):
    with pytest.raises(WorkerError, match="unknown mistake 'typo'"):
        launch(train_with_mistake, 1, small, "typo", timeout=60)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_distributed_evaluation_equals_one_process_exactly_and_the_wrong_ones_are_caught(
    small, world_size
):
    n = len(small.test)  # 203: not a multiple of 2, 3 or 4
    seen = launch(evaluate_three_ways, world_size, small, timeout=120, backend="gloo")
    assert seen[0]["distributed"] == seen[0]["single process"]  # the same count, exactly
    assert {s["distributed"] for s in seen} == {seen[0]["distributed"]}  # every rank knows it
    padding = -n % world_size
    assert seen[0]["padded counted"] == n + padding
    with pytest.raises(EvaluationMiscount, match="some twice"):
        check_eval_count(seen[0]["padded counted"], n)
    assert seen[0]["per rank counted"] == -(-n // world_size)
    with pytest.raises(EvaluationMiscount, match="only part of them"):
        check_eval_count(seen[0]["per rank counted"], n)
    # what the ranks would log alone adds up to the padded count's correct predictions
    assert round(sum(s["per rank"] for s in seen) * n) == round(seen[0]["padded"] * (n + padding))


def test_a_cpu_rank_s_dataparallel_never_grabs_a_gpu(monkeypatch, device):
    """On a machine whose one GPU a CPU (gloo) rank does not use, torch's DataParallel would move the
    model to cuda:0 and return CUDA outputs; the mistake's wrapper keeps a CPU rank's model on the CPU.
    torch's DataParallel is made to see one GPU (simulated where there is none)."""
    import sys

    import torch

    from companion.ddp import data_parallel_on

    data_parallel = sys.modules["torch.nn.parallel.data_parallel"]  # the module, not the function

    monkeypatch.setattr(data_parallel, "_get_available_device_type", lambda: "cuda")
    monkeypatch.setattr(data_parallel, "_get_all_device_indices", lambda: [0])
    net = torch.nn.Linear(4, 2).to(device)
    wrapped = data_parallel_on(net, device)
    assert isinstance(wrapped, torch.nn.DataParallel) and wrapped.module is net
    here = torch.device("cuda", 0) if device.type == "cuda" else device  # what torch reports
    assert all(p.device == here for p in wrapped.parameters())
    out = wrapped(torch.ones(3, 4, device=device))
    assert out.device == here and out.shape == (3, 2)
