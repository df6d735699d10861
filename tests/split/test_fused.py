"""Chapter 2: the foreach step's own checks, and training that matches the naive step."""

import copy

import pytest
import torch
from torch import nn

from companion.core import lenet, set_seed
from companion.split import (
    allreduce_grads_foreach,
    copy_replicas,
    train,
    train_batch,
    train_batch_foreach,
)

pytestmark = pytest.mark.ch2

CPU = torch.device("cpu")
# Equivalence with one device, for both steps, is tested in test_split.py.


def test_foreach_step_rejects_bad_input_before_changing_anything():
    X, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    replicas = copy_replicas(lenet(), [CPU] * 2)
    before = [copy.deepcopy(r.state_dict()) for r in replicas]
    with pytest.raises(ValueError, match="2 replicas for 3 devices"):
        train_batch_foreach(X, y, replicas, [CPU] * 3, lr=0.1)
    with pytest.raises(ValueError, match="one value per sample"):
        train_batch_foreach(X, y, replicas, [CPU] * 2, lr=0.1, loss=nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match="cannot be split"):
        train_batch_foreach(X[:1], y[:1], replicas, [CPU] * 2, lr=0.1)
    for r, state in zip(replicas, before):
        assert all(torch.equal(v, state[key]) for key, v in r.state_dict().items())
        assert all(p.grad is None for p in r.parameters())


def test_foreach_allreduce_refuses_aliased_replicas():
    net = nn.Linear(3, 2)
    net(torch.randn(4, 3)).sum().backward()
    grad = net.weight.grad.clone()
    with pytest.raises(ValueError, match="share gradient memory"):
        allreduce_grads_foreach([net, net])
    assert torch.equal(net.weight.grad, grad)


def test_train_with_the_foreach_step_matches_the_naive_step():
    from companion.core import DeviceLoader, ImageSet, load_mnist_sample

    data = load_mnist_sample()
    small = ImageSet(data.train.images[:320], data.train.labels[:320])
    nets, runs = [], []
    for step in (train_batch, train_batch_foreach):
        set_seed(0)
        nets.append(lenet())
        runs.append(
            train(
                nets[-1],
                DeviceLoader(small, 64, seed=0),
                DeviceLoader(data.test, 250, shuffle=False),
                [CPU] * 2,
                epochs=1,
                lr=0.1,
                step=step,
                method=step.__name__,
                profile="ci",
            )
        )
    assert [r.method for r in runs[1]] == ["train_batch_foreach"]
    torch.testing.assert_close(list(nets[0].parameters()), list(nets[1].parameters()))
    assert abs(runs[0][0].test_acc - runs[1][0].test_acc) <= 0.002


class _EmptyFirst(torch.nn.Module):
    """A model whose first parameter holds no elements (as a pruned or placeholder layer can)."""

    def __init__(self):
        super().__init__()
        self.empty = torch.nn.Parameter(torch.zeros(0))
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x) + self.empty.sum()


@pytest.mark.parametrize("step", ["train_batch", "train_batch_foreach"])
def test_a_zero_size_parameter_is_no_shared_memory_and_the_step_matches_one_device(step):
    """Two empty tensors share no bytes: both steps train such a model as one device does."""
    from companion.split import fused, naive

    torch.manual_seed(0)
    net = _EmptyFirst().double()
    X, y = torch.randn(10, 6, dtype=torch.float64), torch.randint(0, 3, (10,))
    devices = [torch.device("cpu")] * 3
    replicas = naive.copy_replicas(net, devices)
    train = getattr(naive if step == "train_batch" else fused, step)
    train(X, y, replicas, devices, lr=0.1)
    one = copy.deepcopy(net)
    torch.nn.functional.cross_entropy(one(X), y).backward()
    with torch.no_grad():
        for p in one.parameters():
            p -= 0.1 * p.grad
    for replica in replicas:
        for a, b in zip(replica.parameters(), one.parameters()):
            torch.testing.assert_close(a, b)
