"""Chapter 2: the foreach step computes what the naive step and one device compute."""

import copy

import pytest
import torch
from torch import nn

from companion.models import lenet
from companion.split import replicate, split_batch, train, train_batch
from companion.split_fast import (
    allreduce_grads_foreach,
    forward_backward_once,
    train_batch_foreach,
)
from companion.train import set_seed, train_step

pytestmark = pytest.mark.ch2

CPU = torch.device("cpu")
SPLITS = [(1, 10), (2, 12), (2, 11), (3, 12), (3, 10), (4, 12), (4, 10)]


def batch(n: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("k, n", SPLITS)
def test_gradients_of_one_step_equal_the_full_batch_gradient(k, n, dtype):
    set_seed(0)
    net = lenet().to(dtype)
    X, y = batch(n, dtype)
    reference = copy.deepcopy(net)
    loss = nn.functional.cross_entropy(reference(X), y)
    loss.backward()
    replicas = replicate(net, [CPU] * k)
    losses = forward_backward_once(replicas, *split_batch(X, y, [CPU] * k), n,
                                   nn.CrossEntropyLoss(reduction="none"))
    allreduce_grads_foreach(replicas)
    torch.testing.assert_close(sum(losses), loss.detach())
    for replica in replicas:
        torch.testing.assert_close([p.grad for p in replica.parameters()],
                                   [p.grad for p in reference.parameters()])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("k, n", SPLITS)
def test_five_steps_equal_single_device_sgd_and_the_naive_step(k, n, dtype):
    set_seed(0)
    net = lenet().to(dtype)
    reference = copy.deepcopy(net)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    fast, naive = replicate(net, [CPU] * k), replicate(net, [CPU] * k)
    for step in range(5):
        X, y = batch(n, dtype, seed=step)
        ref_loss = train_step(reference, X, y, nn.CrossEntropyLoss(), opt)
        torch.testing.assert_close(train_batch_foreach(X, y, fast, [CPU] * k, lr=0.1), ref_loss)
        train_batch(X, y, naive, [CPU] * k, lr=0.1)
    for replica, other in zip(fast, naive):
        assert all(p.grad is None for p in replica.parameters())
        torch.testing.assert_close(list(replica.parameters()), list(reference.parameters()))
        torch.testing.assert_close(list(replica.parameters()), list(other.parameters()))
    for other in fast[1:]:
        assert all(torch.equal(a, b) for a, b in zip(fast[0].parameters(), other.parameters()))


def test_foreach_step_rejects_bad_input_before_changing_anything():
    X, y = batch(8)
    replicas = replicate(lenet(), [CPU] * 2)
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
    from companion.data import DeviceLoader, ImageSet, load_mnist_sample

    data = load_mnist_sample()
    small = ImageSet(data.train.images[:320], data.train.labels[:320])
    nets, runs = [], []
    for step in (train_batch, train_batch_foreach):
        set_seed(0)
        nets.append(lenet())
        runs.append(train(nets[-1], DeviceLoader(small, 64, seed=0),
                          DeviceLoader(data.test, 250, shuffle=False), [CPU] * 2, epochs=1,
                          lr=0.1, step=step, method=step.__name__, profile="ci"))
    assert [r.method for r in runs[1]] == ["train_batch_foreach"]
    torch.testing.assert_close(list(nets[0].parameters()), list(nets[1].parameters()))
    assert abs(runs[0][0].test_acc - runs[1][0].test_acc) <= 0.002
