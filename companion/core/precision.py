"""Precision: exact fp32, float64 for checks, what TF32 does, and mixed precision for speed.

Used in: chapters 1 (the fast baseline) and 2, and the float64 checks of chapters 5 and 6.

On NVIDIA GPUs since Ampere, cuDNN convolutions run in **TF32** by default
(``torch.backends.cudnn.allow_tf32`` is ``True``): the inputs of each
convolution are rounded to 10 explicit mantissa bits (fp32 has 23), and the
products are accumulated in fp32. Results move by about 1e-4 relative, far
more than the reordering of fp32 sums that data parallelism causes (about
1e-7), so a check that compares a parallel method with one device on a GPU
must switch TF32 off: :func:`strict_fp32`.

Exact fp32 still depends on CPU threads: one process's reductions split across them
differently, one ulp can flip a max-pool or ReLU decision, and the gap grows. Checks
against one process therefore compute in float64 (``MathMode("fp64")``).

:func:`tf32_emulation` reproduces that rounding with ordinary fp32 operations,
on any device, so the size of the effect can be measured without a GPU.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch
from torch import nn
from torch.nn.utils import parametrize

from .checks import check_batch, check_instance, check_module, check_tensor
from .devices import _as_device, model_device

__all__ = [
    "strict_fp32",
    "round_to_tf32",
    "tf32_emulation",
    "gradient_gap",
    "PRECISIONS",
    "best_precision",
    "check_fp32",
    "CHECK_PRECISION",
    "check_exact",
    "MathMode",
    "amp_train_step",
]

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


PRECISIONS = ("fp32", "bf16", "fp16")  # to train in
CHECK_PRECISION = "fp64"  # float64 weights and inputs: for equivalence checks, never picked


def best_precision(device: torch.device | str) -> str:
    """The fast choice for ``device``: bf16 on GPUs of compute capability 8.0+ (A100,
    H100, RTX 30xx on), fp16 with loss scaling on older GPUs (Colab's T4), fp32 on
    the CPU, where autocast rarely pays."""
    device = _as_device(device)
    if device.type != "cuda":
        return "fp32"
    if (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"device {device} is not here ({torch.cuda.device_count()} GPU(s) visible): "
            f"pass 'cpu' or a GPU that torch.cuda.device_count() counts"
        )
    major, _ = torch.cuda.get_device_capability(device)
    return "bf16" if major >= 8 else "fp16"


def check_fp32(precision: str, where: str) -> str:
    """``"fp32"`` if ``precision`` is fp32; else a ``ValueError`` saying what ``where`` supports."""
    if precision != "fp32":
        raise ValueError(
            f"{where} computes in fp32 only, got precision={precision!r}: pass "
            f"precision='fp32' (or use a profile whose precision is fp32, e.g. 'cpu')"
        )
    return precision


def check_exact(precision: str, where: str) -> str:
    """``precision`` if fp32 or fp64 (no autocast); else a ``ValueError`` saying what to pass."""
    if precision not in ("fp32", CHECK_PRECISION):
        raise ValueError(f"{where} computes in fp32 or fp64 only, got precision={precision!r}: "
                         f"pass precision='fp64' for an equivalence check, or 'fp32'")
    return precision


def _inputs_to_float64(module: nn.Module, args: tuple) -> tuple:
    """A forward pre-hook: floating-point inputs become float64 (``MathMode("fp64")``)."""
    return tuple(a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


_inputs_to_float64.casts_inputs = True  # check_batch lets float32 batches in


class MathMode:
    """How a training step computes: ``precision`` and the memory layout.

    ``"fp32"``: plain fp32 (TF32 as torch's defaults allow). ``"bf16"`` and
    ``"fp16"``: forward and loss under ``torch.autocast`` to that type; fp16
    also scales the loss (``torch.amp.GradScaler``) so small gradients do not
    underflow. ``channels_last`` stores images and convolution weights in
    NHWC order, the layout tensor cores read fastest. ``"auto"`` is
    :func:`best_precision`. ``"fp64"`` (:data:`CHECK_PRECISION`, never ``"auto"``'s
    choice) is for equivalence checks: :meth:`place` makes weights and inputs float64.
    """

    def __init__(self, precision: str, device, channels_last: bool = False):
        device = torch.device(device)
        precision = best_precision(device) if precision == "auto" else precision
        if precision not in (*PRECISIONS, CHECK_PRECISION):
            raise ValueError(f"precision must be one of {PRECISIONS}, 'auto' or "
                             f"{CHECK_PRECISION!r} (float64, for checks), got {precision!r}")
        self.precision, self.channels_last = precision, channels_last
        self.device_type = device.type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        scale = precision == "fp16"
        self.scaler = torch.amp.GradScaler(device.type) if scale else None

    @property
    def plain(self) -> bool:
        """fp32 or fp64 in the default layout: ``train_step`` computes exactly this."""
        return self.precision in ("fp32", CHECK_PRECISION) and not self.channels_last

    def __repr__(self) -> str:
        layout = ", channels_last" if self.channels_last else ""
        return f"{self.precision}{layout}"

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def place(self, net: nn.Module, device: torch.device | str) -> nn.Module:
        """``net`` moved to ``device``, in channels-last layout if the mode says so;
        under fp64 in float64, casting its floating inputs to float64 (a pre-hook)."""
        net.to(device)
        if self.precision == CHECK_PRECISION:
            net.double()
            if _inputs_to_float64 not in net._forward_pre_hooks.values():
                net.register_forward_pre_hook(_inputs_to_float64)
        return net.to(memory_format=torch.channels_last) if self.channels_last else net

    def layout(self, t: torch.Tensor) -> torch.Tensor:
        if self.channels_last and t.dim() == 4:
            return t.contiguous(memory_format=torch.channels_last)
        return t

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, with the loss scaled first under fp16."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; under fp16 the scaler unscales, skips overflows, updates."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()


def amp_train_step(net, X, y, loss_fn, optimizer, mode: MathMode) -> torch.Tensor:
    """``train_step`` in ``mode``: forward and loss under autocast; fp16 scales the loss."""
    _check_amp_step(net, X, y, loss_fn, mode)
    optimizer.zero_grad(set_to_none=True)
    device = model_device(net)
    with mode.autocast():
        y_hat = net(mode.layout(X.to(device, non_blocking=True)))
        loss = loss_fn(y_hat, y.to(y_hat.device, non_blocking=True))
    mode.backward(loss)
    mode.step(optimizer)
    return loss.detach().float()


def _check_amp_step(net, X, y, loss_fn, mode: MathMode) -> None:
    check_batch(check_module(net), X, y, loss_fn)
    check_instance(mode, "mode", MathMode, "pass MathMode(profile.precision, device)")
