"""Chapter 4: nn.DataParallel's four steps, rebuilt, equal single-device training."""

import copy
import threading
from collections import namedtuple

import pytest
import torch
from torch import nn

from companion.core import (
    DeviceLoader,
    ImageSet,
    Record,
    as_devices,
    lenet,
    load_mnist_sample,
    set_seed,
    train_step,
)
from companion.core import train as train_one_device
from companion.dataparallel import (
    GATHER_SCALAR_WARNING,
    DataParallelByHand,
    ReplicaError,
    check_on_first_device,
    chunk_sizes,
    gather,
    parallel_apply,
    replicate,
    scatter,
    train,
    wrap_dataparallel,
)

pytestmark = pytest.mark.ch4

CPU = torch.device("cpu")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
# (devices, batch size): even and uneven chunks for 1 to 4 devices; 6 on 4 gives 3
# chunks, and a batch of 3 on 4 devices (smaller than the device count) 3 chunks of 1
SPLITS = [(1, 10), (2, 12), (2, 11), (3, 12), (3, 10), (4, 12), (4, 10), (4, 6), (4, 3)]


def cpus(n: int) -> list[torch.device]:
    return [CPU] * n


def batch(n: int, dtype=torch.float32, seed: int = 0, device=CPU):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 1, 28, 28, generator=g, dtype=dtype)
    return X.to(device), torch.randint(0, 10, (n,), generator=g).to(device)


def grads(net: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in net.parameters()]


def bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


# --- step 1: scatter ------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 14))
@pytest.mark.parametrize("k", range(1, 6))
def test_chunk_sizes_are_torch_chunk_sizes(n, k):
    assert chunk_sizes(n, k) == [len(c) for c in torch.arange(n).chunk(k)]


def test_chunk_sizes_can_leave_devices_idle_and_reject_bad_input():
    assert chunk_sizes(10, 3) == [4, 4, 2] and chunk_sizes(6, 4) == [2, 2, 2]
    with pytest.raises(ValueError, match="at least one device"):
        chunk_sizes(5, 0)
    with pytest.raises(ValueError, match="batch of 0 samples.*non-empty"):
        chunk_sizes(0, 2)


@pytest.mark.parametrize("k, n", SPLITS)
def test_scatter_cuts_every_tensor_in_order_and_passes_other_inputs(k, n):
    X, _ = batch(n)
    y = torch.arange(n)
    chunks = scatter((X, y, "flag"), cpus(k))
    assert len(chunks) == len(chunk_sizes(n, k)) <= k
    assert [len(c[0]) for c in chunks] == [len(c[1]) for c in chunks] == chunk_sizes(n, k)
    assert torch.equal(torch.cat([c[0] for c in chunks]), X)
    assert torch.equal(torch.cat([c[1] for c in chunks]), y)
    assert all(c[2] == "flag" for c in chunks)


def test_scatter_is_differentiable():
    X = torch.rand(7, 3, requires_grad=True)
    chunks = scatter((X,), cpus(3))
    sum((i + 1) * c[0].sum() for i, c in enumerate(chunks)).backward()
    assert torch.equal(X.grad[:, 0], torch.tensor([1.0] * 3 + [2.0] * 3 + [3.0]))


def test_scatter_rejects_bad_input():
    with pytest.raises(ValueError, match="need at least one device, got \\[\\]"):
        scatter((torch.zeros(4),), [])
    with pytest.raises(ValueError, match=r"different batch sizes \[3, 4\].*one minibatch"):
        scatter((torch.zeros(4, 2), torch.zeros(3)), cpus(2))
    with pytest.raises(ValueError, match="batch dimension"):
        scatter(("no tensor",), cpus(2))
    with pytest.raises(ValueError, match="batch dimension"):
        scatter((torch.tensor(1.0),), cpus(2))
    with pytest.raises(ValueError, match="non-empty"):
        scatter((torch.zeros(0, 3),), cpus(2))


def test_as_devices_reads_gpu_indices_and_rejects_an_empty_list():
    assert as_devices([0, "cpu", torch.device("cuda:1")]) == [
        torch.device("cuda:0"),
        CPU,
        torch.device("cuda:1"),
    ]
    with pytest.raises(ValueError, match="at least one device.*try_devices"):
        as_devices([])


# --- step 2: replicate ----------------------------------------------------------------


def test_replicas_are_connected_copies_and_own_no_parameters():
    net = lenet()
    replicas = replicate(net, cpus(3))
    w = net[0].weight
    for i, r in enumerate(replicas):
        assert r is not net and r[0] is not net[0] and list(r.parameters()) == []
        assert torch.equal(r[0].weight, w) and not r[0].weight.is_leaf
        assert (r[0].weight.data_ptr() == w.data_ptr()) == (i == 0)  # replica 0 shares storage
    frozen = replicate(net, cpus(2), detach=True)
    assert all(r[0].weight.grad_fn is None for r in frozen)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_backward_through_replicas_sums_their_gradients_into_the_original(k):
    net, X = nn.Linear(4, 2), torch.rand(5, 4)
    outs = [(i + 1) * r(X).sum() for i, r in enumerate(replicate(net, cpus(k)))]
    sum(outs).backward()
    single = copy.deepcopy(net)
    single.zero_grad()
    (sum(range(1, k + 1)) * single(X).sum()).backward()
    torch.testing.assert_close(grads(net), grads(single))


def test_buffers_of_replica_zero_are_the_originals_so_running_stats_come_from_chunk_zero():
    net = bn_net()
    replicas = replicate(net, cpus(2))
    assert replicas[0][1].running_mean is net[1].running_mean
    assert replicas[1][1].running_mean is not net[1].running_mean
    X = torch.randn(10, 8) * 3 + 1
    DataParallelByHand(net, cpus(2))(X)
    chunk0_only = bn_net()
    chunk0_only(X[:5])
    torch.testing.assert_close(net[1].running_mean, chunk0_only[1].running_mean)
    torch.testing.assert_close(net[1].running_var, chunk0_only[1].running_var)
    assert int(net[1].num_batches_tracked) == 1
    whole = bn_net()
    whole(X)
    assert not torch.allclose(net[1].running_mean, whole[1].running_mean)


def test_replicate_refuses_a_module_not_on_the_first_device():
    with pytest.raises(ValueError, match=r"0.weight is on meta.*devices\[0\] = cpu.*net.to"):
        replicate(lenet().to("meta"), cpus(2))


# --- step 3: parallel_apply -----------------------------------------------------------


def test_parallel_apply_runs_one_thread_per_replica_and_keeps_the_order():
    net, seen = nn.Linear(3, 1), []
    net.register_forward_hook(lambda m, i, o: seen.append(threading.current_thread().name))
    chunks = scatter((torch.rand(6, 3),), cpus(3))
    outs = parallel_apply(replicate(net, cpus(3)), chunks, cpus(3))
    assert sorted(seen) == [f"replica {i} on cpu" for i in range(3)]
    for out, (X_i,) in zip(outs, chunks):
        torch.testing.assert_close(out, net(X_i))


def test_parallel_apply_carries_the_grad_mode_into_the_threads():
    net = nn.Linear(3, 1)
    chunks = scatter((torch.rand(4, 3),), cpus(2))
    assert all(
        o.grad_fn is not None for o in parallel_apply(replicate(net, cpus(2)), chunks, cpus(2))
    )
    replicas = replicate(net, cpus(2))  # connected to net: outputs would have a grad_fn
    with torch.no_grad():  # ... unless the threads also run without gradients
        outs = parallel_apply(replicas, chunks, cpus(2))
    assert all(o.grad_fn is None for o in outs)


class _Probe(nn.Module):
    """A layer that notes, in each replica's thread, the dtype its matmul computed in."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.lin, self.seen = nn.Linear(4, 4), seen

    def forward(self, x):
        y = self.lin(x)
        self.seen.append((threading.current_thread().name, y.dtype))
        return y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_parallel_apply_carries_autocast_into_the_threads(k, dtype):
    """Autocast is per thread, like grad mode: without it the replicas of a virtual-device
    run computed in fp32 while the run was labelled bf16 or fp16 (chapter 4 on one GPU)."""
    seen = []
    net = DataParallelByHand(_Probe(seen), cpus(k))
    with torch.autocast("cpu", dtype=dtype):
        out = net(torch.rand(6, 4))
    assert out.dtype == dtype
    assert len(seen) == k and all(d == dtype for _, d in seen), seen
    if k > 1:
        assert all(name.startswith("replica ") for name, _ in seen)  # really in the threads
    seen.clear()
    assert net(torch.rand(6, 4)).dtype == torch.float32  # and nothing leaks out of them
    assert [d for _, d in seen] == [torch.float32] * k


def test_parallel_apply_reraises_a_thread_error_naming_replica_and_device():
    net = nn.Linear(3, 1)
    inputs = [(torch.rand(2, 3),), (torch.rand(2, 5),)]  # the second has the wrong width
    with pytest.raises(ReplicaError, match="replica 1 on device cpu raised RuntimeError") as info:
        parallel_apply(replicate(net, cpus(2)), inputs, cpus(2))
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(ValueError, match="2 replicas, 1 inputs and 2 devices"):
        parallel_apply(replicate(net, cpus(2)), inputs[:1], cpus(2))


# --- step 4: gather -------------------------------------------------------------------


def test_gather_concatenates_tensors_and_containers():
    a, b = torch.rand(3, 2), torch.rand(2, 2)
    torch.testing.assert_close(gather([a, b], CPU), torch.cat([a, b]))
    Pair = namedtuple("Pair", "x y")
    got = gather([Pair(a, {"k": a}), Pair(b, {"k": b})], CPU)
    assert isinstance(got, Pair) and torch.equal(got.y["k"], torch.cat([a, b]))
    assert gather([(a, None), (b, None)], "cpu")[1] is None
    with pytest.raises(TypeError, match="cannot gather outputs of type str"):
        gather(["a", "b"], CPU)


def test_gather_turns_scalars_into_a_vector_with_torchs_warning():
    with pytest.warns(UserWarning) as record:
        got = gather([torch.tensor(1.0), torch.tensor(2.0)], CPU)
    assert str(record[0].message) == GATHER_SCALAR_WARNING
    assert torch.equal(got, torch.tensor([1.0, 2.0]))


# --- the wrapper: equivalence with one device -----------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k, n", SPLITS)
def test_gradients_equal_one_device(k, n, dtype, device, strict):
    set_seed(0)
    net = lenet().to(device, dtype)
    single = copy.deepcopy(net)
    X, y = (t.to(device) for t in batch(n, dtype))
    X_dp, X_1 = X.clone().requires_grad_(), X.clone().requires_grad_()
    out = DataParallelByHand(net, [device] * k)(X_dp)
    nn.functional.cross_entropy(out, y).backward()
    nn.functional.cross_entropy(single(X_1), y).backward()
    assert out.shape == (n, 10)
    torch.testing.assert_close(grads(net), grads(single))
    torch.testing.assert_close(X_dp.grad, X_1.grad)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_parameters_after_sgd_steps_equal_one_device(k, device, strict):
    set_seed(0)
    net = lenet().to(device)
    single = copy.deepcopy(net)
    dp_net = DataParallelByHand(net, [device] * k)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (dp_net, single)]
    for step, n in enumerate([13, 16, 11, 9, 14]):  # uneven and even chunks
        X, y = batch(n, seed=step)  # on the CPU: train_step moves them to the model
        train_step(dp_net, X, y, nn.CrossEntropyLoss(), opts[0])
        train_step(single, X, y, nn.CrossEntropyLoss(), opts[1])
    torch.testing.assert_close(list(net.parameters()), list(single.parameters()))


def test_a_batch_smaller_than_the_device_count_runs_on_as_many_devices_as_samples():
    net, ran_in = lenet(), []
    net.register_forward_hook(lambda m, i, o: ran_in.append(threading.current_thread().name))
    X, _ = batch(3)
    torch.testing.assert_close(DataParallelByHand(net, cpus(4))(X), net(X))
    assert sorted(ran_in[:3]) == [f"replica {i} on cpu" for i in range(3)]


def test_eval_under_no_grad_equals_one_device():
    net = lenet().eval()
    X, _ = batch(9)
    with torch.no_grad():
        torch.testing.assert_close(DataParallelByHand(net, cpus(4))(X), net(X))


def test_batchnorm_in_training_mode_is_the_named_exception():
    X, y = torch.randn(12, 8), torch.randint(0, 3, (12,))
    gaps = {}
    for mode in ("train", "eval"):
        net = bn_net().train(mode == "train")
        single = copy.deepcopy(net)
        nn.functional.cross_entropy(DataParallelByHand(net, cpus(3))(X), y).backward()
        nn.functional.cross_entropy(single(X), y).backward()
        g_k, g_1 = (torch.cat([g.flatten() for g in grads(m)]) for m in (net, single))
        gaps[mode] = ((g_k - g_1).norm() / g_1.norm()).item()
    assert gaps["train"] > 0.01 and gaps["eval"] < 1e-5


def test_wrapper_checks_the_device_at_construction_and_at_every_call():
    with pytest.raises(ValueError, match="devices\\[0\\] = cpu"):
        DataParallelByHand(lenet().to("meta"), cpus(2))
    with pytest.raises(ValueError, match="need at least one device, got \\[\\]"):
        DataParallelByHand(lenet(), [])
    dp_net = DataParallelByHand(lenet(), cpus(2))
    dp_net.module.to("meta")
    with pytest.raises(ValueError, match="is on meta"):
        dp_net(torch.rand(4, 1, 28, 28))
    with pytest.raises(ValueError, match="is on meta"):
        check_on_first_device(dp_net.module, ["cpu"])


def test_wrapper_keeps_nn_dataparallels_interface():
    net = lenet()
    dp_net = DataParallelByHand(net, cpus(2))
    assert dp_net.module is net and dp_net.output_device == CPU
    assert all(k.startswith("module.") for k in dp_net.state_dict())
    assert [p is q for p, q in zip(dp_net.parameters(), net.parameters())] == [True] * 10


# --- concise training -----------------------------------------------------------------


@pytest.mark.skipif(GPUS > 0, reason="shows what nn.DataParallel does without CUDA")
def test_without_cuda_nn_dataparallel_calls_the_module_on_one_device(capsys):
    net = lenet()
    dp = nn.DataParallel(net)
    assert dp.device_ids == []
    X, _ = batch(4)
    torch.testing.assert_close(dp(X), net(X))
    wrapped, method = wrap_dataparallel(net, cpus(2))
    assert isinstance(wrapped, DataParallelByHand) and method == "DataParallel by hand (no GPU)"
    assert "device_ids = []" in capsys.readouterr().out


def test_train_equals_one_device_training_and_returns_records():
    data = load_mnist_sample()
    small = ImageSet(data.train.images[:192], data.train.labels[:192])
    test = ImageSet(data.test.images[:64], data.test.labels[:64])
    runs = {}
    for k in (1, 2):
        set_seed(0)
        net = lenet()
        runs[k] = (
            net,
            train(
                net,
                DeviceLoader(small, 40, seed=0),
                DeviceLoader(test, 32),
                cpus(k),
                epochs=2,
                lr=0.1,
                profile="ci",
                verbose=False,
            ),
        )
    set_seed(0)
    single = lenet()
    train_one_device(
        single,
        DeviceLoader(small, 40, seed=0),
        DeviceLoader(test, 32),
        epochs=2,
        lr=0.1,
        profile="ci",
    )
    for k, (net, records) in runs.items():
        assert [r.epoch for r in records] == [1, 2] and all(isinstance(r, Record) for r in records)
        assert {r.n_devices for r in records} == {k}
        assert records[0].method.startswith(("DataParallel by hand", "nn.DataParallel"))
        torch.testing.assert_close(list(net.parameters()), list(single.parameters()))


# --- on GPUs: the same numbers as nn.DataParallel itself ------------------------------
# In float64: TF32 convolutions (on by default) would round differently for
# different chunk sizes, and tolerances fit for float32 would not hold.


@pytest.mark.gpu
def test_on_one_gpu_equals_nn_dataparallel_and_virtual_devices_agree():
    set_seed(0)
    net = lenet().cuda().double()
    torch_dp, by_hand = copy.deepcopy(net), copy.deepcopy(net)
    X, y = batch(11, torch.float64, device="cuda")
    nn.functional.cross_entropy(nn.DataParallel(torch_dp, device_ids=[0])(X), y).backward()
    out = DataParallelByHand(by_hand, ["cuda:0", "cuda:0", "cuda:0"])(X)
    nn.functional.cross_entropy(out, y).backward()
    torch.testing.assert_close(grads(by_hand), grads(torch_dp))
    assert isinstance(wrap_dataparallel(net, [0], verbose=False)[0], nn.DataParallel)


@pytest.mark.multigpu
@pytest.mark.parametrize("n", [12, 11])
def test_on_gpus_equals_nn_dataparallel(n):
    devices = list(range(min(GPUS, 4)))
    set_seed(0)
    net = nn.Sequential(lenet(), nn.BatchNorm1d(10)).cuda().double()
    torch_dp = nn.DataParallel(copy.deepcopy(net), device_ids=devices)
    by_hand = DataParallelByHand(copy.deepcopy(net), devices)
    X, y = batch(n, torch.float64, device="cuda:0")
    chunks = torch.nn.parallel.scatter(X, devices)
    assert [len(c) for c in chunks] == chunk_sizes(n, len(devices))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (torch_dp, by_hand)]
    for step in range(3):
        X, y = batch(n, torch.float64, seed=step, device="cuda:0")
        outs = [m(X) for m in (torch_dp, by_hand)]
        torch.testing.assert_close(outs[1], outs[0])
        for out, opt in zip(outs, opts):
            opt.zero_grad()
            nn.functional.cross_entropy(out, y).backward()
        torch.testing.assert_close(grads(by_hand.module), grads(torch_dp.module))
        for opt in opts:
            opt.step()
    torch.testing.assert_close(by_hand.module.state_dict(), torch_dp.module.state_dict())
