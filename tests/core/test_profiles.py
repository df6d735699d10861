import pytest
import torch

from companion.core import PROFILES, describe_setup, devices, get_profile, profiles
from companion.core.profiles import ProcessPlan

pytestmark = pytest.mark.ch1


def test_env_var_selects_the_profile(monkeypatch):
    monkeypatch.setenv("BOOK_PROFILE", "ci")
    p = get_profile()
    assert (p.name, p.dataset, p.models, p.device_counts) == (
        "ci",
        "mnist-sample",
        ("lenet",),
        (1, 2),
    )


def test_explicit_name_wins_over_env(monkeypatch):
    monkeypatch.setenv("BOOK_PROFILE", "ci")
    assert get_profile("cpu").name == "cpu"


def test_hardware_decides_when_unset(monkeypatch):
    monkeypatch.delenv("BOOK_PROFILE", raising=False)
    monkeypatch.setattr(profiles, "gpu_count", lambda: 0)
    assert get_profile().name == "cpu"
    monkeypatch.setattr(profiles, "gpu_count", lambda: 4)
    p = get_profile()
    assert p.name == "gpu" and p.device_counts == (1, 2, 3, 4) and p.model == "resnet18"
    assert get_profile(gpus=0).name == "cpu" and get_profile(gpus=1).name == "gpu"


@pytest.mark.parametrize(
    "gpus, counts, virtual, processes",
    [
        # BOOK_PROFILE=gpu without a GPU, and Colab's T4: the GPU named twice, and every
        # process run on the CPU with LeNet for the cpu profile's 5 epochs
        (0, (1, 2), [2], ProcessPlan("gloo", "cpu", "lenet", 5, "auto")),
        (1, (1, 2), [2], ProcessPlan("gloo", "cpu", "lenet", 5, "fp32")),
        (2, (1, 2), [], ProcessPlan(None, "cuda:0", "resnet18", 10, "auto")),
        (8, tuple(range(1, 9)), [], ProcessPlan(None, "cuda:0", "resnet18", 10, "auto")),
    ],
)
def test_the_gpu_profile_shows_two_devices_on_one_gpu(gpus, counts, virtual, processes):
    """One GPU still shows data parallelism: 2 virtual devices, processes on the CPU
    (nccl wants a GPU per process; gloo has no gathers for CUDA tensors) with LeNet."""
    p = get_profile("gpu", gpus=gpus)
    assert (p.gpus, p.device_counts) == (gpus, counts)
    assert [n for n in p.device_counts if p.virtual(n)] == virtual
    assert p.processes == processes


def test_the_number_of_gpus_comes_from_torch_unless_given(monkeypatch):
    monkeypatch.setattr(profiles, "gpu_count", lambda: 1)
    assert get_profile("gpu").device_counts == (1, 2) and get_profile("gpu").gpus == 1
    assert get_profile("gpu", gpus=4).device_counts == (1, 2, 3, 4)
    assert get_profile("ci", gpus=3).gpus == 3 and get_profile("ci").gpus == 1
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="gpus must be a count of GPUs"):
            get_profile("gpu", gpus=bad)


def test_the_rehearsal_is_the_one_gpu_path_at_ci_sizes_in_fp16(monkeypatch):
    monkeypatch.setattr(profiles, "gpu_count", lambda: 0)
    rehearsal, gpu, ci = get_profile("rehearsal"), get_profile("gpu", gpus=1), get_profile("ci")
    assert rehearsal.gpus == 1 and rehearsal.device_counts == gpu.device_counts
    # as on a T4: fp16 on the GPU, fp32 in the processes that fall back to the CPU
    assert rehearsal.processes == ProcessPlan("gloo", "cpu", "lenet", rehearsal.epochs, "fp32")
    assert rehearsal.precision == "fp16"  # a T4 has no bf16: autocast with a loss scaler
    assert (rehearsal.dataset, rehearsal.batch_size) == (ci.dataset, ci.batch_size)
    # two models as gpu's: the chapter's own cells train one with BatchNorm, the processes
    # LeNet (a process run given the chapter's model fails: other state_dict keys)
    assert rehearsal.models == ("lenet-bn", "lenet") and gpu.models[-1] == "lenet"
    assert rehearsal.epochs < ci.epochs  # fp16 on a CPU is slower than fp32
    assert get_profile("rehearsal", gpus=2).device_counts == (1, 2)  # still follows gpus
    text = describe_setup(rehearsal)
    assert "one GPU: 'several devices' are virtual" in text
    assert "the profile assumes 1 GPU; this machine has 0" in text
    assert "device counts [1, 2] (virtual: [2])" in text


def test_the_cpu_and_ci_profiles_plan_their_processes_as_before():
    for name in ("ci", "cpu"):
        p = get_profile(name, gpus=0)
        assert p.processes == ProcessPlan("gloo", "cpu", "lenet", p.epochs, p.precision)


def test_unknown_profile_lists_the_valid_ones(monkeypatch):
    monkeypatch.setenv("BOOK_PROFILE", "laptop")
    with pytest.raises(
        ValueError, match="unknown profile 'laptop'; valid profiles are: ci, cpu, gpu, rehearsal"
    ):
        get_profile()


def test_case_and_whitespace_are_forgiven(monkeypatch):
    monkeypatch.setenv("BOOK_PROFILE", " CI ")
    assert get_profile().name == "ci"


def test_profiles_match_the_design_table():
    assert PROFILES["ci"].epochs <= 3 and PROFILES["gpu"].epochs == 10
    assert PROFILES["cpu"].device_counts == (1, 2, 4)
    assert PROFILES["gpu"].models == ("resnet18", "lenet")


@pytest.mark.parametrize(
    "gpus, hardware, meaning",
    [
        (0, "hardware: CPU", "no GPU"),
        (1, "hardware: 1x Fake GPU", "one GPU: 'several devices' are virtual"),
        (2, "hardware: 2x Fake GPU", "2 GPUs: multi-device cells run on real, distinct GPUs"),
    ],
)
def test_setup_notice_names_profile_and_hardware(monkeypatch, gpus, hardware, meaning):
    monkeypatch.setattr(profiles, "gpu_count", lambda: gpus)
    monkeypatch.setattr(devices, "gpu_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Fake GPU")
    text = describe_setup(get_profile("ci"))
    assert text.startswith("profile 'ci'") and hardware in text and meaning in text


def test_every_profile_sizes_the_study_with_a_subset_or_all_of_the_data():
    for profile in PROFILES.values():
        size = profile.study_samples
        assert size is None or (
            len(size) == 2 and all(isinstance(n, int) and n > 0 for n in size)
        ), (profile.name, size)
    assert PROFILES["gpu"].study_samples is None  # the full study where it takes minutes
    ci, cpu = PROFILES["ci"].study_samples, PROFILES["cpu"].study_samples
    assert ci[0] <= cpu[0]  # the reader's profile studies at least as much as CI's


def test_book_precision_replaces_the_profile_precision_and_refuses_unknown_names(monkeypatch):
    """BOOK_PRECISION=fp16 runs the gpu profile as a T4 runs it (make gpu-check's fp16 pass)."""
    from companion.core import get_profile

    assert get_profile("gpu").precision == "auto"
    monkeypatch.setenv("BOOK_PRECISION", "fp16")
    assert get_profile("gpu").precision == get_profile("ci").precision == "fp16"
    monkeypatch.setenv("BOOK_PRECISION", " ")
    assert get_profile("ci").precision == "fp32"
    monkeypatch.setenv("BOOK_PRECISION", "fp8")
    with pytest.raises(
        ValueError,
        match=r"BOOK_PRECISION='fp8' is not a precision; use one of auto, fp32, bf16, fp16",
    ):
        get_profile("gpu")
