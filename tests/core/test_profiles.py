import pytest
import torch

from companion.core import PROFILES, describe_setup, devices, get_profile, profiles

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


def test_unknown_profile_lists_the_valid_ones(monkeypatch):
    monkeypatch.setenv("BOOK_PROFILE", "laptop")
    with pytest.raises(
        ValueError, match="unknown profile 'laptop'; valid profiles are: ci, cpu, gpu"
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
