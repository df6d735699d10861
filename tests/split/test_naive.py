"""Chapter 2: a batch split by hand equals single-device training on the whole batch."""

import copy

import pytest
import torch
from torch import nn

from companion.core import (
    DeviceLoader,
    ImageSet,
    Record,
    lenet,
    load_mnist_sample,
    set_seed,
    train_step,
)
from companion.split import (
    allreduce_grads,
    allreduce_grads_foreach,
    allreduce_on_devices,
    copy_replicas,
    forward_backward,
    forward_backward_once,
    shard_sizes,
    split_batch,
    train,
    train_batch,
    train_batch_foreach,
)

pytestmark = pytest.mark.ch2

CPU = torch.device("cpu")
PER_SAMPLE = nn.CrossEntropyLoss(reduction="none")
# (devices, batch size): even and uneven splits for 1 to 4 devices
SPLITS = [(1, 10), (2, 12), (2, 11), (3, 12), (3, 10), (4, 12), (4, 10)]
# The naive phases of companion.split.naive and the fused ones of companion.split.fused
# must both compute single-device SGD.
PHASES = {
    "naive": (forward_backward, allreduce_grads),
    "foreach": (forward_backward_once, allreduce_grads_foreach),
}
STEPS = {"naive": train_batch, "foreach": train_batch_foreach}


def cpus(n: int) -> list[torch.device]:
    return [CPU] * n


def batch(n: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(
        0, 10, (n,), generator=g
    )


def grads(net: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in net.parameters()]


def bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


# --- split_batch ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, k, sizes",
    [
        (10, 3, [4, 3, 3]),
        (12, 4, [3, 3, 3, 3]),
        (5, 4, [2, 1, 1, 1]),
        (4, 4, [1, 1, 1, 1]),
        (7, 1, [7]),
    ],
)
def test_shard_sizes_differ_by_at_most_one_first_larger(n, k, sizes):
    assert shard_sizes(n, k) == sizes
    assert [len(s) for s in torch.arange(n).tensor_split(k)] == sizes


def test_shard_sizes_differ_from_chunk_which_can_leave_devices_idle():
    assert [len(c) for c in torch.arange(10).chunk(3)] == [4, 4, 2]
    assert [len(c) for c in torch.arange(6).chunk(4)] == [2, 2, 2]  # 3 shards for 4 devices
    assert shard_sizes(6, 4) == [2, 2, 1, 1]


@pytest.mark.parametrize("k, n", SPLITS)
def test_split_batch_keeps_every_sample_once_in_order(k, n):
    X, _ = batch(n)
    y = torch.arange(n)
    X_shards, y_shards = split_batch(X, y, cpus(k))
    assert [len(s) for s in X_shards] == [len(s) for s in y_shards] == shard_sizes(n, k)
    assert torch.equal(torch.cat(X_shards), X) and torch.equal(torch.cat(y_shards), y)
    assert all(s.device == CPU for s in X_shards + y_shards)


def test_split_batch_rejects_bad_input():
    X, y = batch(3)
    with pytest.raises(
        ValueError,
        match="batch of 3 samples cannot be split across 4 devices.*"
        "at least 4 samples or fewer devices",
    ):
        split_batch(X, y, cpus(4))
    with pytest.raises(ValueError, match="X has 3 samples but y has 2"):
        split_batch(X, y[:2], cpus(2))
    with pytest.raises(ValueError, match="at least one device"):
        split_batch(X, y, [])


# --- replicate and allreduce ----------------------------------------------------------


def test_replicas_are_independent_copies_even_on_one_device():
    net = lenet()
    assert net.to("cpu") is net  # why replicate cannot simply call .to(device)
    replicas = copy_replicas(net, cpus(3))
    for a, b in zip(replicas[0].parameters(), replicas[1].parameters()):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr() and b.grad is None
    with torch.no_grad():
        next(replicas[0].parameters()).add_(1)
    assert not torch.equal(next(replicas[0].parameters()), next(replicas[1].parameters()))
    assert torch.equal(next(replicas[1].parameters()), next(net.parameters()))
    with pytest.raises(ValueError, match="at least one device"):
        copy_replicas(net, [])


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_allreduce_sums_in_place_into_every_tensor(k, dtype):
    tensors = [torch.full((2, 3), float(i + 1), dtype=dtype) for i in range(k)]
    held = list(tensors)  # the callers' references, e.g. parameters' .grad
    allreduce_on_devices(tensors)
    expected = torch.full((2, 3), k * (k + 1) / 2, dtype=dtype)
    for t, h in zip(tensors, held):
        assert t is h
        torch.testing.assert_close(h, expected)


def test_allreduce_handles_scalars():
    tensors = [torch.tensor(1.0), torch.tensor(2.5)]
    allreduce_on_devices(tensors)
    assert [t.item() for t in tensors] == [3.5, 3.5]


def test_allreduce_rejects_bad_input_and_writes_nothing():
    a, b = torch.ones(3), torch.ones(3)
    with pytest.raises(ValueError, match="shares memory.*counted twice"):
        allreduce_on_devices([a, b, a])
    with pytest.raises(ValueError, match="tensor 1 has shape \\(4,\\) but tensor 0 has \\(3,\\)"):
        allreduce_on_devices([a, torch.ones(4)])
    assert torch.equal(a, torch.ones(3)) and torch.equal(b, torch.ones(3))
    with pytest.raises(
        ValueError, match=r"tensors must hold at least 1 item\(s\), tensors, one per device"
    ):
        allreduce_on_devices([])


def test_aliased_replicas_would_double_count_gradients():
    # The bug copy_replicas() avoids: ".to(device)" "replicas" are one module.
    net = nn.Linear(3, 1)
    aliased = [net.to(d) for d in cpus(2)]
    assert aliased[0] is aliased[1]
    X, y = torch.randn(4, 3), torch.randn(4)
    for m, X_i in zip(aliased, X.split(2)):
        (m(X_i).squeeze(1) - y[:2]).pow(2).sum().backward()
    with pytest.raises(ValueError, match="shares memory"):
        allreduce_grads(aliased)


# --- equivalence with single-device training -------------------------------------------


@pytest.mark.parametrize("phases", PHASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("k, n", SPLITS)
def test_gradients_of_one_step_equal_the_full_batch_gradient(k, n, dtype, phases, device, strict):
    forward_backward, allreduce_grads = PHASES[phases]
    set_seed(0)
    net = lenet().to(device, dtype)
    X, y = (t.to(device) for t in batch(n, dtype))
    reference = copy.deepcopy(net)
    loss = nn.functional.cross_entropy(reference(X), y)
    loss.backward()
    replicas = copy_replicas(net, [device] * k)
    X_shards, y_shards = split_batch(X, y, [device] * k)
    losses = forward_backward(replicas, X_shards, y_shards, n, PER_SAMPLE)
    allreduce_grads(replicas)
    torch.testing.assert_close(sum(losses), loss.detach())
    for replica in replicas:
        for g, g_ref in zip(grads(replica), grads(reference)):
            torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("k, n", SPLITS)
def test_parameters_after_five_steps_equal_single_device_sgd(k, n, dtype, step, device, strict):
    train_batch = STEPS[step]
    set_seed(0)
    net = lenet().to(device, dtype)
    reference = copy.deepcopy(net)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    replicas = copy_replicas(net, [device] * k)
    for step in range(5):
        X, y = (t.to(device) for t in batch(n, dtype, seed=step))
        ref_loss = train_step(reference, X, y, nn.CrossEntropyLoss(), opt)
        loss = train_batch(X, y, replicas, [device] * k, lr=0.1)
        torch.testing.assert_close(loss, ref_loss)
    for replica in replicas:
        assert all(p.grad is None for p in replica.parameters())
        for p, p_ref in zip(replica.parameters(), reference.parameters()):
            torch.testing.assert_close(p, p_ref)
    for other in replicas[1:]:  # identical updates keep the replicas bit-for-bit equal
        assert all(torch.equal(a, b) for a, b in zip(replicas[0].parameters(), other.parameters()))


def test_a_mean_of_per_device_means_is_wrong_for_uneven_splits():
    set_seed(0)
    net = lenet()
    X, y = batch(10)
    reference = copy.deepcopy(net)
    nn.functional.cross_entropy(reference(X), y).backward()
    replicas = copy_replicas(net, cpus(3))  # shards of 4, 3, 3
    for replica, X_i, y_i in zip(replicas, *split_batch(X, y, cpus(3))):
        (nn.functional.cross_entropy(replica(X_i), y_i) / 3).backward()
    allreduce_grads(replicas)
    diff = max(
        (g - g_ref).abs().max().item() for g, g_ref in zip(grads(replicas[0]), grads(reference))
    )
    assert diff > 1e-3  # a thousand times what rounding explains: the check would catch it
    with pytest.raises(AssertionError):
        torch.testing.assert_close(grads(replicas[0]), grads(reference))


# --- the named exception: BatchNorm ----------------------------------------------------


def bn_gradient_gap(n: int, k: int, train_mode: bool = True) -> float:
    """Relative difference between the split-by-hand and full-batch gradients of bn_net."""
    torch.manual_seed(1)
    X, y = torch.randn(n, 8), torch.randint(0, 3, (n,))
    net = bn_net().train(train_mode)
    reference = copy.deepcopy(net)
    nn.functional.cross_entropy(reference(X), y).backward()
    replicas = copy_replicas(net, cpus(k))
    forward_backward(replicas, *split_batch(X, y, cpus(k)), n, PER_SAMPLE)
    allreduce_grads(replicas)
    g = torch.cat([p.grad.flatten() for p in replicas[0].parameters()])
    g_ref = torch.cat([p.grad.flatten() for p in reference.parameters()])
    return ((g - g_ref).norm() / g_ref.norm()).item()


def test_batchnorm_in_training_mode_is_the_exception():
    gaps = {(n, k): bn_gradient_gap(n, k) for n, k in [(12, 2), (12, 4), (48, 2), (768, 2)]}
    assert gaps[12, 2] > 0.1  # per-device statistics: far beyond rounding
    assert gaps[12, 4] > gaps[12, 2]  # smaller shards, larger gap
    assert gaps[768, 2] < gaps[48, 2] < gaps[12, 2]  # larger shards, smaller gap
    assert gaps[768, 2] < 0.1 and max(gaps.values()) < 2


@pytest.mark.parametrize("k", [2, 3, 4])
def test_batchnorm_in_eval_mode_matches(k):
    assert bn_gradient_gap(12, k, train_mode=False) < 1e-6


def test_batchnorm_running_means_average_to_the_full_batch_ones_for_even_shards():
    torch.manual_seed(1)
    X, y = torch.randn(12, 8), torch.randint(0, 3, (12,))
    net = bn_net()
    reference = copy.deepcopy(net)
    reference(X)
    replicas = copy_replicas(net, cpus(3))
    for replica, X_i in zip(replicas, split_batch(X, y, cpus(3))[0]):
        replica(X_i)
    means = torch.stack([r[1].running_mean for r in replicas])
    assert not torch.allclose(means[0], means[1])  # the replicas' buffers drift apart
    torch.testing.assert_close(means.mean(0), reference[1].running_mean)


# --- train_batch and train -------------------------------------------------------------


def test_train_batch_rejects_bad_input_before_changing_anything():
    X, y = batch(8)
    replicas = copy_replicas(lenet(), cpus(2))
    before = [copy.deepcopy(r.state_dict()) for r in replicas]
    with pytest.raises(ValueError, match="2 replicas for 3 devices"):
        train_batch(X, y, replicas, cpus(3), lr=0.1)
    with pytest.raises(ValueError, match="one value per sample.*reduction='none'"):
        train_batch(X, y, replicas, cpus(2), lr=0.1, loss=nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match="cannot be split"):
        train_batch(X[:1], y[:1], replicas, cpus(2), lr=0.1)
    for r, state in zip(replicas, before):
        assert all(torch.equal(v, state[k]) for k, v in r.state_dict().items())
        assert all(p.grad is None for p in r.parameters())


@pytest.fixture(scope="module")
def small_sample():
    data = load_mnist_sample()
    return ImageSet(data.train.images[:640], data.train.labels[:640]), data.test


class InFloat64:
    """A loader's batches in float64: 20 fp32 SGD steps at lr 0.1 carry a split's rounding
    (its gradients summed in another order) up to 4e-3 in LeNet's weights on one thread,
    and equality is then a matter of the thread count; in float64 it is not."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return ((X.double(), y) for X, y in self.loader)


def run_split(small_sample, k: int):
    train_set, test_set = small_sample
    set_seed(0)
    net = lenet().double()
    records = train(
        net,
        InFloat64(DeviceLoader(train_set, 64, seed=0)),
        InFloat64(DeviceLoader(test_set, 250, shuffle=False)),
        cpus(k),
        epochs=2,
        lr=0.1,
        profile="ci",
        model_name="lenet",
    )
    return net, records


def test_train_records_epochs_and_matches_single_device_training(small_sample):
    from companion.core import train as train_one

    train_set, test_set = small_sample
    set_seed(0)
    reference = lenet().double()
    ref_records = train_one(
        reference,
        InFloat64(DeviceLoader(train_set, 64, seed=0)),
        InFloat64(DeviceLoader(test_set, 250, shuffle=False)),
        epochs=2,
        lr=0.1,
        profile="ci",
    )
    assert not any(r.virtual for r in ref_records)
    for k in (2, 3):
        net, records = run_split(small_sample, k)
        assert [(r.epoch, r.n_devices, r.method) for r in records] == [
            (1, k, "split by hand"),
            (2, k, "split by hand"),
        ]
        assert all(
            isinstance(r, Record) and r.profile == "ci" and r.sec_per_epoch > 0 for r in records
        )
        assert all(abs(r.samples_per_sec * r.sec_per_epoch - 640) < 1e-6 for r in records)
        assert all(r.virtual for r in records)  # k devices named on the one CPU
        for p, p_ref in zip(net.parameters(), reference.parameters()):
            torch.testing.assert_close(p, p_ref, rtol=1e-9, atol=1e-10)
        for r, r_ref in zip(records, ref_records):
            assert r.test_acc == r_ref.test_acc
            assert abs(r.train_loss - r_ref.train_loss) < 1e-9


def test_train_rejects_zero_epochs(small_sample):
    train_set, test_set = small_sample
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        train(
            lenet(),
            DeviceLoader(train_set, 64),
            DeviceLoader(test_set, 250),
            cpus(2),
            epochs=0,
            lr=0.1,
        )


# --- on a GPU: the same split as d2l ---------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("n", [12, 10])
def test_split_batch_agrees_with_d2l_on_gpu(n):
    from d2l import torch as d2l

    from companion.core import try_devices

    devices = try_devices(3, verbose=False)
    X, _ = batch(n)
    X, y = X.cuda(), torch.arange(n, device="cuda")
    ours, theirs = split_batch(X, y, devices), d2l.split_batch(X, y, devices)
    for mine, d2ls in zip(ours, theirs):
        assert torch.equal(torch.cat([s.cpu() for s in mine]), torch.cat([s.cpu() for s in d2ls]))
        assert [s.device for s in mine] == [s.device for s in d2ls] == devices[: len(d2ls)]
        if n % 3 == 0:  # even: the same shards
            assert all(torch.equal(a, b) for a, b in zip(mine, d2ls))
        else:  # uneven: d2l cuts like torch.chunk ([4, 4, 2]), we cut [4, 3, 3]
            assert [len(s) for s in d2ls] == [len(c) for c in torch.arange(n).chunk(3)]
            assert [len(s) for s in mine] == shard_sizes(n, 3)
