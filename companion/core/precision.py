"""Precision: exact fp32, float64 for checks, and mixed precision for speed.

Used in: chapters 1 (the fast baseline) and 2, and the float64 checks of chapters 5 and 6.

What TF32 does to fp32 on a GPU, and how to switch it off, is :mod:`.tf32`.
Exact fp32 still depends on CPU threads: one process's reductions split across them
differently, one ulp can flip a max-pool or ReLU decision, and the gap grows. Checks
against one process therefore compute in float64 (``MathMode("fp64")``).
:class:`MathMode` holds one run's choice (fp32, bf16 or fp16 autocast, memory
layout) and its one loss-scaling branch.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from .checks import check_batch, check_instance, check_module
from .devices import _as_device, model_device

__all__ = [
    "PRECISIONS",
    "best_precision",
    "check_fp32",
    "CHECK_PRECISION",
    "check_exact",
    "MathMode",
    "amp_train_step",
]


PRECISIONS = ("fp32", "bf16", "fp16")  # to train in
CHECK_PRECISION = "fp64"  # float64 weights and inputs: for equivalence checks, never picked


def _check_visible_gpu(device: torch.device) -> None:
    if (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"device {device} is not here ({torch.cuda.device_count()} GPU(s) visible): "
            f"pass 'cpu' or a GPU that torch.cuda.device_count() counts"
        )


def best_precision(device: torch.device | str) -> str:
    """The fast choice for ``device``: bf16 on GPUs of compute capability 8.0+ (A100,
    H100, RTX 30xx on), fp16 with loss scaling on older GPUs (Colab's T4), fp32 on
    the CPU, where autocast rarely pays."""
    device = _as_device(device)
    if device.type != "cuda":
        return "fp32"
    _check_visible_gpu(device)
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
        raise ValueError(
            f"{where} computes in fp32 or fp64 only, got precision={precision!r}: "
            f"pass precision='fp64' for an equivalence check, or 'fp32'"
        )
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
            raise ValueError(
                f"precision must be one of {PRECISIONS}, 'auto' or "
                f"{CHECK_PRECISION!r} (float64, for checks), got {precision!r}"
            )
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
