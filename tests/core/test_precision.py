"""Exact fp32 for equivalence checks, and a faithful emulation of TF32's rounding."""

import os

import pytest
import torch
from torch import nn

from companion.core import gradient_gap, lenet, round_to_tf32, set_seed, strict_fp32, tf32_emulation

pytestmark = pytest.mark.ch2


def test_round_to_tf32_keeps_ten_mantissa_bits_rounding_to_nearest_even():
    ulp = 2.0**-10  # of numbers in [1, 2)
    x = torch.tensor([1.0, 1 + ulp / 2, 1 + 1.5 * ulp, 1 + ulp + ulp / 4, 1 + ulp * 0.75, -3.14159])
    assert round_to_tf32(x).tolist() == [1.0, 1.0, 1 + 2 * ulp, 1 + ulp, 1 + ulp, -3.140625]


def test_round_to_tf32_error_is_at_most_half_a_tf32_ulp_and_it_is_idempotent():
    x = torch.randn(100_000) * torch.logspace(-20, 20, 100_000)
    r = round_to_tf32(x)
    assert torch.all((r.view(torch.int32) & 0x1FFF) == 0)  # the 13 dropped bits are zero
    assert torch.all(((r - x).abs() / x.abs()) <= 2.0**-11)
    assert torch.equal(round_to_tf32(r), r)
    with pytest.raises(TypeError, match="float32"):
        round_to_tf32(x.double())


def test_strict_fp32_switches_tf32_off_and_restores_everything():
    before = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        os.environ.get("NVIDIA_TF32_OVERRIDE"),
    )
    with strict_fp32():
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
        assert os.environ["NVIDIA_TF32_OVERRIDE"] == "0"  # inherited by launched workers
    after = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        os.environ.get("NVIDIA_TF32_OVERRIDE"),
    )
    assert after == before


def test_tf32_emulation_rounds_inside_and_leaves_the_model_unchanged(device):
    set_seed(0)
    net = lenet().to(device)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    X = torch.rand(8, 1, 28, 28, device=device)
    exact = net(X)
    with tf32_emulation(net):
        emulated = net(X)
    assert not torch.equal(emulated, exact)
    torch.testing.assert_close(emulated, exact, rtol=1e-2, atol=1e-3)  # close, not equal
    assert list(net.state_dict()) == list(state)
    assert all(torch.equal(net.state_dict()[k], v) for k, v in state.items())
    torch.testing.assert_close(net(X), exact, rtol=0, atol=0)


def test_gradient_gap_is_tf32_sized_on_a_smooth_model(device):
    set_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.Tanh(), nn.Linear(64, 10)).to(device)
    X, y = torch.rand(32, 1, 28, 28, device=device), torch.randint(0, 10, (32,), device=device)
    gap = gradient_gap(net, X, y)
    # TF32 keeps 11 significant bits: relative errors of about 2**-11 = 4.9e-4
    assert 1e-5 < gap["emulated relative"] < 5e-3
    assert ("cuda relative" in gap) == (device.type == "cuda")
    assert all(p.grad is None for p in net.parameters())


def test_best_precision_is_fp32_on_the_cpu_and_bad_names_are_refused():
    from companion.core import MathMode, best_precision

    assert best_precision("cpu") == "fp32"
    assert str(MathMode("auto", "cpu")) == "fp32"
    assert str(MathMode("bf16", "cpu", channels_last=True)) == "bf16, channels_last"
    with pytest.raises(ValueError, match="precision must be one of"):
        MathMode("fp8", "cpu")


@pytest.mark.parametrize("channels_last", [False, True])
def test_place_moves_the_model_and_stores_convolutions_in_the_mode_s_layout(channels_last):
    from companion.core import MathMode

    net = lenet()
    assert MathMode("fp32", "cpu", channels_last).place(net, "cpu") is net
    # a convolution with several input channels: for one, both layouts are the same memory
    conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1)
    assert conv.weight.device.type == "cpu"
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert conv.weight.is_contiguous() != channels_last


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_to_within_a_stated_tolerance_of_fp32(device, precision):
    """Same data, same start: after 2 epochs the loss and accuracy stay close to fp32's."""
    from companion.core import load_data, load_iters, train

    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    data = load_data("mnist-sample", verbose=False)
    results = {}
    for p in ("fp32", precision):
        set_seed(0)
        train_iter, test_iter = load_iters(data, 64, device, seed=0)
        records = train(
            lenet(),
            train_iter,
            test_iter,
            epochs=2,
            lr=0.1,
            device=device,
            profile="ci",
            precision=p,
            channels_last=p != "fp32",
        )
        results[p] = records[-1]
    assert results[precision].precision == f"{precision}, channels_last"
    assert results["fp32"].precision == "fp32"
    # stated tolerance: 0.05 in mean training loss, 3 points of test accuracy
    assert abs(results[precision].train_loss - results["fp32"].train_loss) < 0.05
    assert abs(results[precision].test_acc - results["fp32"].test_acc) < 0.03


def test_fp64_mode_computes_in_float64_from_float32_batches_and_is_never_auto():
    """``MathMode("fp64")``, for equivalence checks: float64 weights, float32 images cast on the
    way in (training, evaluation, a wrapper's ``.module``), the cast kept by deepcopy and pickle."""
    import copy
    import pickle

    from companion.core import (
        CHECK_PRECISION,
        PRECISIONS,
        MathMode,
        check_batch,
        check_exact,
        step_for,
        train_step,
    )

    mode = MathMode("fp64", "cpu")
    assert (str(mode), mode.plain, mode.dtype, mode.scaler) == ("fp64", True, None, None)
    assert step_for(mode) is train_step  # no autocast: chapter 1's step, in float64
    assert CHECK_PRECISION == "fp64" and CHECK_PRECISION not in PRECISIONS  # the study refuses it
    assert MathMode("auto", "cpu").precision == "fp32"
    assert [check_exact(p, "here") for p in ("fp32", "fp64")] == ["fp32", "fp64"]

    set_seed(0)
    plain = lenet()
    set_seed(0)
    net = mode.place(lenet(), "cpu")
    assert mode.place(net, "cpu") is net and len(net._forward_pre_hooks) == 1  # placed once
    assert all(p.dtype == torch.float64 for p in net.parameters())
    X = torch.rand(4, 1, 28, 28)  # float32, as ImageSet yields them
    out = net(X)
    assert out.dtype == torch.float64
    assert torch.equal(out, plain.double()(X.double()))  # the same weights, all in float64
    for copied in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert torch.equal(copied(X), out)
    check_batch(net, X, torch.arange(4))  # float32 batches go in; the model casts them
    check_batch(_Holder(net), X, torch.arange(4))  # inside a wrapper too (DDP's .module)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    assert train_step(net, X, torch.arange(4), nn.CrossEntropyLoss(), opt).dtype == torch.float64
    with pytest.raises(TypeError, match="X has dtype torch.uint8"):
        check_batch(net, X.to(torch.uint8), torch.arange(4))  # not a floating batch: refused
    with pytest.raises(ValueError, match="computes in fp32 or fp64 only, got precision='bf16'"):
        check_exact("bf16", "here")


class _Holder(nn.Module):
    """A wrapper holding the model as ``.module``, as DDP and the chapter-6 wrappers do."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, X):
        return self.module(X)
