"""Chapter 4: the pitfalls of nn.DataParallel and their helpers."""

from pathlib import Path

import pytest
import torch
from torch import nn

from companion.core import lenet
from companion.dataparallel import (
    GATHER_SCALAR_WARNING,
    DataParallelByHand,
    NetWithLoss,
    chunk_sizes,
    global_mean,
    output_device_bytes,
    peak_memory_per_device,
    physical_gpu_ids,
    scatter,
    visible_devices_in_subprocess,
)
from companion.runtime import (
    load_checkpoint,
    load_into,
    save_checkpoint,
    strip_module_prefix,
    unwrap,
)

pytestmark = pytest.mark.ch4

CPU = torch.device("cpu")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


# --- CUDA_VISIBLE_DEVICES -------------------------------------------------------------


@pytest.mark.parametrize(
    "value, n_physical, ids",
    [
        ("2,3", None, ["2", "3"]),
        (" 1, 0 ", None, ["1", "0"]),
        ("0,2,-1,1", None, ["0", "2"]),  # CUDA stops at the first invalid entry
        ("1,foo,0", None, ["1"]),
        ("", None, []),
        ("GPU-8f3c,02", None, ["GPU-8f3c", "2"]),
        ("3,0", 2, []),  # GPU 3 does not exist on a 2-GPU machine
        ("1,0,5", 2, ["1", "0"]),
    ],
)
def test_physical_gpu_ids_follow_cuda_visible_devices(value, n_physical, ids):
    assert physical_gpu_ids(value, n_physical) == ids


def test_physical_gpu_ids_read_the_environment_and_refuse_duplicates(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_gpu_ids() is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert physical_gpu_ids() == ["3", "1"]
    with pytest.raises(ValueError, match="lists GPU 1 twice"):
        physical_gpu_ids("1,0,1")


def test_a_child_process_sees_only_the_gpus_the_variable_lists():
    none = visible_devices_in_subprocess("")
    assert none["device_count"] == 0 and none["physical_ids"] == [] and none["names"] == []
    first = visible_devices_in_subprocess("0")
    assert first["CUDA_VISIBLE_DEVICES"] == "0" and first["physical_ids"] == ["0"]
    assert first["device_count"] == min(1, GPUS)


def test_a_child_process_that_hangs_is_killed_after_the_timeout():
    with pytest.raises(TimeoutError, match="did not answer within"):
        visible_devices_in_subprocess("", timeout=0.05)


# --- saving and loading ---------------------------------------------------------------


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    """Equal state dicts, compared on the CPU: nn.DataParallel moves its module to cuda:0."""
    cpu = lambda net: {k: v.cpu() for k, v in net.state_dict().items()}  # noqa: E731
    torch.testing.assert_close(cpu(a), cpu(b))


@pytest.mark.parametrize(
    "wrapper",
    [
        lambda net: DataParallelByHand(net, [CPU, CPU]),
        nn.DataParallel,  # without CUDA it still holds the model as .module
    ],
)
def test_state_dicts_round_trip_between_wrapped_and_plain_models(wrapper, tmp_path):
    torch.manual_seed(0)
    source, target = lenet(), lenet()
    wrapped = wrapper(source)
    assert unwrap(wrapped) is source
    assert all(k.startswith("module.") for k in wrapped.state_dict())
    with pytest.raises(RuntimeError, match="Missing key"):
        target.load_state_dict(wrapped.state_dict())  # the pitfall itself
    assert list(unwrap(wrapped).state_dict()) == list(source.state_dict())
    # wrapped -> plain, plain -> wrapped, through memory and through files
    load_into(target, wrapped.state_dict())
    assert_same_state(target, source)
    other = wrapper(lenet())
    load_into(other, source.state_dict())
    assert_same_state(unwrap(other), source)
    for saved_from, loaded_into in ((wrapped, lenet()), (source, wrapper(lenet()))):
        path = save_checkpoint(saved_from, tmp_path / "sub" / "net.pt")
        assert list(torch.load(path, weights_only=True)) == list(source.state_dict())
        load_checkpoint(loaded_into, path)
        assert_same_state(unwrap(loaded_into), source)


def test_strip_module_prefix_only_when_every_key_has_it():
    assert strip_module_prefix({"module.a": 1, "module.b": 2}) == {"a": 1, "b": 2}
    assert strip_module_prefix({"module.module.a": 1}) == {"a": 1}
    mixed = {"module.a": 1, "b": 2}
    assert strip_module_prefix(mixed) == mixed
    assert strip_module_prefix({}) == {}


def test_save_is_atomic_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = save_checkpoint(lenet(), tmp_path / "net.pt")
    before = path.read_bytes()

    def broken_save(obj, f):
        f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(lenet(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["net.pt"]


def test_loading_a_mismatched_state_says_which_keys():
    with pytest.raises(RuntimeError, match="Missing key"):
        load_into(lenet(), {"module.0.weight": torch.zeros(6, 1, 5, 5)})


# --- memory on the output device ------------------------------------------------------


def test_output_device_bytes_are_computed_from_tensor_sizes():
    net = lenet()
    outputs = [torch.zeros(32, 10), torch.zeros(29, 10)]
    got = output_device_bytes(outputs, DataParallelByHand(net, [CPU, CPU]))
    n_params = sum(p.numel() for p in net.parameters())
    assert got == {
        "gathered output": 61 * 10 * 4,
        "gradient of the gathered output": 61 * 10 * 4,
        "summed parameter gradients": n_params * 4,
    }


@pytest.mark.multigpu
def test_the_output_device_peaks_higher_than_the_others():
    X, y = torch.rand(256, 1, 28, 28), torch.randint(0, 10, (256,))
    peaks = peak_memory_per_device(lenet(), X, y, list(range(min(GPUS, 4))))
    assert len(peaks) == min(GPUS, 4) and all(p > 0 for p in peaks)
    assert peaks[0] > max(peaks[1:])


def test_peak_memory_needs_two_distinct_gpus():
    X, y = torch.rand(4, 1, 28, 28), torch.randint(0, 10, (4,))
    with pytest.raises(ValueError, match="two or more distinct GPUs.*output_device_bytes"):
        peak_memory_per_device(lenet(), X, y, ["cpu", "cpu"])


# --- a loss computed inside the module ------------------------------------------------


@pytest.mark.parametrize("k, n", [(2, 11), (3, 10), (4, 6), (2, 12)])
def test_scalar_losses_come_back_as_a_vector_whose_weighted_mean_is_the_batch_mean(k, n):
    torch.manual_seed(0)
    net = lenet()
    X, y = torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,))
    with pytest.warns(UserWarning) as caught:
        means = DataParallelByHand(NetWithLoss(net), [CPU] * k)(X, y)
    assert [str(w.message) for w in caught] == [GATHER_SCALAR_WARNING]
    sizes = chunk_sizes(n, k)
    assert means.shape == (len(sizes),)
    expected = [
        nn.functional.cross_entropy(net(X_i), y_i) for X_i, y_i in scatter((X, y), [CPU] * k)
    ]
    torch.testing.assert_close(means, torch.stack(expected))
    full = nn.functional.cross_entropy(net(X), y)
    torch.testing.assert_close(global_mean(means, sizes), full)
    if len(set(sizes)) > 1:  # uneven chunks: the plain mean is wrong
        assert abs(means.mean() - full) > 1e-4
    per_sample = DataParallelByHand(
        NetWithLoss(net, nn.CrossEntropyLoss(reduction="none")), [CPU] * k
    )
    torch.testing.assert_close(per_sample(X, y).mean(), full)


def test_global_mean_needs_one_mean_per_replica():
    with pytest.raises(ValueError, match="one mean per replica"):
        global_mean(torch.tensor([1.0, 2.0]), [3, 3, 3])
    with pytest.raises(ValueError, match="one mean per replica"):
        global_mean(torch.tensor(1.0), [3])
