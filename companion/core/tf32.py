"""TF32: what NVIDIA GPUs do to fp32 convolutions by default, how to switch it off, and its size.

Used in: chapter 1 (the fast baseline) and the checks of chapters 5 and 6 on a GPU.

On NVIDIA GPUs since Ampere, cuDNN convolutions run in **TF32** by default
(``torch.backends.cudnn.allow_tf32`` is ``True``): the inputs of each
convolution are rounded to 10 explicit mantissa bits (fp32 has 23), and the
products are accumulated in fp32. Results move by about 1e-4 relative, far
more than the reordering of fp32 sums that data parallelism causes (about
1e-7), so a check that compares a parallel method with one device on a GPU
must switch TF32 off: :func:`strict_fp32`.

:func:`tf32_emulation` reproduces that rounding with ordinary fp32 operations,
on any device, so the size of the effect can be measured without a GPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.utils import parametrize

from .checks import check_batch, check_module, check_tensor

__all__ = ["strict_fp32", "round_to_tf32", "tf32_emulation", "gradient_gap"]

_TF32_ENV = "NVIDIA_TF32_OVERRIDE"  # read by cuBLAS and cuDNN when a process starts


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """Inside: matrix products and convolutions in full fp32 (TF32 off), then restored.

    Also sets ``NVIDIA_TF32_OVERRIDE=0`` for the duration, so worker processes
    started inside (``launch`` copies the environment) compute in fp32 too.
    On a CPU it changes nothing: TF32 is a GPU feature.
    """
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        os.environ.get(_TF32_ENV),
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.environ[_TF32_ENV] = "0"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved[0]
        torch.backends.cudnn.allow_tf32 = saved[1]
        torch.set_float32_matmul_precision(saved[2])
        if saved[3] is None:
            os.environ.pop(_TF32_ENV, None)
        else:
            os.environ[_TF32_ENV] = saved[3]


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (fp32) rounded to TF32's 10 mantissa bits, to nearest, ties to even."""
    _check_fp32_tensor(x)
    bits = x.view(torch.int32)
    lsb = (bits >> 13) & 1  # the lowest bit that TF32 keeps
    rounded = (bits + 0xFFF + lsb) & ~0x1FFF  # add half an ulp (ties to even), cut
    return rounded.view(torch.float32)


def _check_fp32_tensor(x: torch.Tensor) -> None:
    check_tensor(x, "x", "pass a float32 tensor")
    if x.dtype != torch.float32:
        raise TypeError(f"round_to_tf32 needs a float32 tensor, got {x.dtype}: pass x.float()")


class _RoundTF32(nn.Module):
    """Rounds in the forward pass; the gradient passes through unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (round_to_tf32(x.detach()) - x).detach()


def _round_input(module, args):
    return tuple(_RoundTF32()(a) if torch.is_tensor(a) else a for a in args)


@contextlib.contextmanager
def tf32_emulation(net: nn.Module) -> Iterator[nn.Module]:
    """Inside: every convolution and linear layer of ``net`` sees TF32-rounded operands.

    Both the layer's input and its weight are rounded, as TF32 tensor cores
    do; the arithmetic stays fp32. Removed on exit, leaving ``net`` unchanged.
    """
    check_module(net)
    layers = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    orders = [list(m._parameters) for m in layers]  # removal re-adds weight last
    hooks = [m.register_forward_pre_hook(_round_input) for m in layers]
    for m in layers:
        parametrize.register_parametrization(m, "weight", _RoundTF32())
    try:
        yield net
    finally:
        for h in hooks:
            h.remove()
        for m, order in zip(layers, orders):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
            m._parameters = {name: m._parameters[name] for name in order}


def gradient_gap(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """How far TF32 moves the gradient of ``net``'s mean loss on ``(X, y)``.

    Returns, against the strict-fp32 gradient, the largest absolute difference
    of one entry (what ``assert_close`` looks at) and the norm of the
    difference relative to the gradient's norm: ``"emulated"`` always,
    ``"cuda"`` (the GPU's real TF32) when ``X`` is on a GPU.
    """
    check_batch(check_module(net), X, y, nn.CrossEntropyLoss())

    params = list(net.parameters())  # the same objects while the emulation is on

    def grads() -> torch.Tensor:
        net.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(X), y).backward()
        return torch.cat([p.grad.reshape(-1) for p in params])

    with strict_fp32():
        exact = grads()
        with tf32_emulation(net):
            emulated = grads()
    gaps = {"emulated": emulated}
    if X.is_cuda:
        cudnn, matmul = (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        )
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        try:
            gaps["cuda"] = grads()
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = (
                cudnn,
                matmul,
            )
    net.zero_grad(set_to_none=True)
    out = {}
    for name, g in gaps.items():
        out[f"{name} max abs"] = (g - exact).abs().max().item()
        out[f"{name} relative"] = ((g - exact).norm() / exact.norm()).item()
    return out
