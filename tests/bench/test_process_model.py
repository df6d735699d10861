"""Every process run trains the model of the profile's process plan, its reference and its
benchmarks included. Under the gpu profile on one GPU (Colab's T4) the processes compute on
the CPU with LeNet while the chapter's own cells train ResNet-18 on the GPU: a default taken
from ``profile.model`` there compared LeNet ranks with a ResNet-18 reference, and timed
ResNet-18 on CPU processes for many minutes (seen on an H200, chapters 1, 5 and 6)."""

import pytest

from companion.collectives import train_reference
from companion.core import count_parameters, get_model, get_profile
from companion.ddp import train_reference_ddp
from companion_tools.bench import allocator, run_settings

pytestmark = pytest.mark.ch5

ONE_GPU, TWO_GPUS = get_profile("gpu", gpus=1), get_profile("gpu", gpus=2)


def test_the_one_gpu_plan_trains_lenet_on_the_cpu_beside_resnet18_on_the_gpu():
    assert (ONE_GPU.model, ONE_GPU.processes.model, ONE_GPU.processes.device) == (
        "resnet18",
        "lenet",
        "cpu",
    )
    assert TWO_GPUS.processes.model == "resnet18"


@pytest.mark.parametrize("profile", [ONE_GPU, TWO_GPUS], ids=["1 GPU", "2 GPUs"])
def test_a_launched_benchmark_times_the_processes_model(profile):
    settings = run_settings(2, profile, model=None, global_batch=None, rounds=1, steps=1)
    assert settings["model"] == profile.processes.model
    assert (
        run_settings(2, profile, model="convnet", global_batch=8, rounds=1, steps=1)["model"]
        == "convnet"
    )


@pytest.mark.parametrize("profile", [ONE_GPU, TWO_GPUS], ids=["1 GPU", "2 GPUs"])
def test_the_allocator_benchmark_times_the_cpu_model(monkeypatch, profile):
    seen = []
    monkeypatch.setattr(allocator, "in_fresh_process", lambda *a: seen.append(a) or {})
    settings = allocator.measure(profile, rounds=1, steps=1)["settings"]
    assert settings["model"] == "lenet" and {a[1] for a in seen} == {"lenet"} and len(seen) == 2


@pytest.mark.parametrize("reference", [train_reference, train_reference_ddp])
@pytest.mark.parametrize("profile", [ONE_GPU, TWO_GPUS], ids=["1 GPU", "2 GPUs"])
def test_a_reference_defaults_to_the_processes_model(small, reference, profile):
    start = reference(2, small, profile, global_batch=8, lr=0.1, steps=0)
    assert start.numel() == count_parameters(get_model(profile.processes.model))
