import copy
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from companion.core import (
    Record,
    Timer,
    accuracy,
    evaluate_accuracy,
    lenet,
    load_iters,
    set_seed,
    train,
    train_step,
    warm_up,
)
from companion.core.devices import cpu_cores
from companion.core.noise import scheduler_times
from companion.core.results import CPU_SHARE_QUIET

pytestmark = pytest.mark.ch1


def test_accuracy_counts_argmax_hits():
    y_hat = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert accuracy(y_hat, torch.tensor([1, 1, 1])) == 2


def test_evaluate_accuracy_restores_training_mode(sample):
    net = lenet().train()
    _, test_iter = load_iters(sample, 250)
    acc = evaluate_accuracy(net, test_iter)
    assert 0 <= acc <= 1 and net.training
    with pytest.raises(ValueError, match="empty"):
        evaluate_accuracy(net, [])


def test_train_step_is_plain_sgd():
    torch.manual_seed(0)
    net, X, y = nn.Linear(4, 3), torch.randn(8, 4), torch.randint(0, 3, (8,))
    before = copy.deepcopy(net)
    loss = nn.functional.cross_entropy(before(X), y)
    grads = torch.autograd.grad(loss, list(before.parameters()))
    train_step(net, X, y, nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=0.5))
    for p, p0, g in zip(net.parameters(), before.parameters(), grads):
        torch.testing.assert_close(p, p0 - 0.5 * g)


def test_warm_up_changes_neither_model_nor_random_stream(sample):
    set_seed(0)
    net = lenet()
    state = copy.deepcopy(net.state_dict())
    X, y = sample.train.tensors()
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    warm_up(net, X[:32], y[:32], lr=0.1, steps=2)
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k])
    assert torch.equal(torch.rand(3), expected_next)


def test_timer_measures_elapsed_time():
    with Timer("cpu", share=True) as t:
        time.sleep(0.05)
    assert 0.04 < t.seconds < 1.0
    # sleeping is not waiting for a core: a share near 1 if measured (a busy machine: 0.6)
    assert t.cpu_share is None or 0 <= t.cpu_share <= 1
    assert Timer("meta").cpu_share is None  # nothing measured yet, or not on a CPU


@pytest.mark.skipif(scheduler_times() is None, reason="the system reports no schedstat")
def test_timer_sees_a_core_shared_with_other_processes():
    # twice as many busy loops as cores: whatever else runs, this thread queues for a core
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cpu_cores())
    ]
    try:
        time.sleep(0.3)  # let them start (their start time is not part of the measurement)
        with Timer("cpu", share=True) as t:
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                pass
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)
    assert t.cpu_share < CPU_SHARE_QUIET  # 2 * cores + 1 ready processes on `cores` cores


def test_train_learns_and_records_every_epoch(sample):
    set_seed(0)
    tr, te = load_iters(sample, 64, seed=0)
    records = train(lenet(), tr, te, epochs=2, lr=0.1, profile="ci", method="m", model_name="lenet")
    assert [r.epoch for r in records] == [1, 2]
    assert all(isinstance(r, Record) and r.profile == "ci" and r.n_devices == 1 for r in records)
    assert records[-1].test_acc > 0.7  # chance is 0.1
    assert all(
        r.sec_per_epoch > 0 and abs(r.samples_per_sec * r.sec_per_epoch - 4000) < 1 for r in records
    )
    assert all(0 < r.cpu_share < 2 for r in records)  # measured on a CPU (summarize reads it)


def test_training_is_reproducible_with_seeds(sample):
    def run():
        set_seed(0)
        tr, te = load_iters(sample, 64, seed=0)
        net = lenet()
        train(net, tr, te, epochs=1, lr=0.1, profile="ci")
        return net

    for a, b in zip(run().parameters(), run().parameters()):
        assert torch.equal(a, b)


def test_progress_bar_only_when_asked(sample, capsys):
    tr, te = load_iters(sample, 500)
    train(lenet(), tr, te, epochs=1, lr=0.1, profile="ci")
    assert capsys.readouterr().err == ""
    train(lenet(), tr, te, epochs=1, lr=0.1, profile="ci", progress=True)
    assert "1 device" in capsys.readouterr().err


def test_bad_epochs(sample):
    tr, te = load_iters(sample, 500)
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        train(lenet(), tr, te, epochs=0, lr=0.1, profile="ci")
