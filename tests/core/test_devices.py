import pytest
import torch

from companion.core import describe_devices, devices, hardware_label, try_devices

pytestmark = pytest.mark.ch1


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_try_devices_without_gpus_gives_virtual_cpus(monkeypatch, capsys, n):
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    got = try_devices(n)
    assert got == [torch.device("cpu")] * n
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    assert ("virtual" in line) == (n > 1)


def test_one_gpu_is_repeated_and_the_notice_says_virtual(monkeypatch, capsys):
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    assert try_devices(2) == [torch.device("cuda:0")] * 2
    assert "2 virtual devices on 1 GPU" in capsys.readouterr().out


def test_enough_gpus_are_distinct_and_fewer_are_round_robin(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 3)
    assert [str(d) for d in try_devices(3, verbose=False)] == ["cuda:0", "cuda:1", "cuda:2"]
    assert [str(d) for d in try_devices(4, verbose=False)] == [
        "cuda:0",
        "cuda:1",
        "cuda:2",
        "cuda:0",
    ]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_device_counts_are_clear_errors(bad):
    with pytest.raises(ValueError, match="at least one device"):
        try_devices(bad)


def test_describe_real_devices():
    assert (
        describe_devices([torch.device("cuda:0"), torch.device("cuda:1")])
        == "2 real GPUs: cuda:0, cuda:1"
    )
    assert describe_devices([torch.device("cpu")]) == "1 real device: cpu"


def test_hardware_label_names_the_cpu_when_there_is_no_gpu(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 0)
    assert hardware_label().startswith("CPU, ")
