"""Models: LeNet, the small-image ResNet-18 of d2l, and the ConvNet of a DDP job script.

Used in: every chapter (chapter 1 introduces them; chapter 5 adds ``lenet-bn``,
LeNet with BatchNorm, for its tests of buffers).

All of them take ``(N, 1, 28, 28)`` images and return ``(N, 10)`` logits.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F

from .checks import check_int, check_module

__all__ = [
    "check_parameters",
    "lenet",
    "lenet_bn",
    "Residual",
    "resnet18",
    "ConvNet",
    "get_model",
    "MODELS",
    "count_parameters",
]


def lenet(num_classes: int = 10) -> nn.Sequential:
    """LeNet-5 with ReLU and max-pooling (d2l's LeNet, with the modern activations).

    The sigmoid/average-pool original trains far more slowly; with ReLU a
    couple of epochs on a few thousand digits already reach high accuracy,
    which keeps the ``ci`` profile short. Weights start Xavier-uniform, biases
    at zero, as in d2l's training functions.
    """
    check_int(num_classes, "num_classes")
    net = nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, num_classes),
    )
    for layer in net:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return net


def lenet_bn(num_classes: int = 10) -> nn.Sequential:
    """:func:`lenet` with a ``BatchNorm2d`` after each convolution: a small model with buffers.

    Its running means and variances are buffers, updated by every training
    forward pass; chapter 5 tests with it what ResNet-18 (too slow on a CPU
    for tests) would show, that DDP keeps buffers equal only as of its
    broadcast at the start of each forward pass.
    """
    net = lenet(num_classes)
    layers = list(net)
    return nn.Sequential(
        *layers[:1], nn.BatchNorm2d(6), *layers[1:4], nn.BatchNorm2d(16), *layers[4:]
    )


def _check_block(in_channels: int, out_channels: int, stride: int) -> None:
    for value, name in (
        (in_channels, "in_channels"),
        (out_channels, "out_channels"),
        (stride, "stride"),
    ):
        check_int(value, name)


class Residual(nn.Module):
    """A ResNet residual block: two 3x3 convolutions with BatchNorm, plus the input.

    With ``use_1x1conv`` the shortcut is a strided 1x1 convolution so that
    channels and resolution can change. Same layers, in the same order, as
    ``d2l.Residual`` (which builds them lazily).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        use_1x1conv: bool = False,
        stride: int = 1,
    ):
        _check_block(in_channels, out_channels, stride)
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.conv3 = nn.Conv2d(in_channels, out_channels, 1, stride=stride) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def _check_resnet(num_classes: int, in_channels: int) -> None:
    check_int(num_classes, "num_classes")
    check_int(in_channels, "in_channels")


def resnet18(num_classes: int = 10, in_channels: int = 1) -> nn.Sequential:
    """d2l's ResNet-18 for small images: a 3x3 stem with stride 1 and no max-pooling.

    Same parameter shapes, count and order as
    ``d2l.resnet18(num_classes, in_channels)``,
    but built eagerly (no lazy modules), so it can be replicated or wrapped
    before it has seen any data.
    """
    _check_resnet(num_classes, in_channels)

    def stage(c_in: int, c_out: int, first: bool) -> nn.Sequential:
        if first:
            return nn.Sequential(Residual(c_in, c_out), Residual(c_out, c_out))
        return nn.Sequential(
            Residual(c_in, c_out, use_1x1conv=True, stride=2), Residual(c_out, c_out)
        )

    net = nn.Sequential(
        nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
    )
    net.add_module("resnet_block1", stage(64, 64, first=True))
    net.add_module("resnet_block2", stage(64, 128, first=False))
    net.add_module("resnet_block3", stage(128, 256, first=False))
    net.add_module("resnet_block4", stage(256, 512, first=False))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


class ConvNet(nn.Module):
    """The MNIST ConvNet of the DDP job script seed (3 convolutions, 2 dense layers).

    One change: it returns logits. The script applied ``softmax`` before
    ``CrossEntropyLoss``, which applies ``log_softmax`` itself, so the loss saw
    a doubly squashed output and learned slowly.
    """

    def __init__(self, num_classes: int = 10):
        check_int(num_classes, "num_classes")
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.conv3 = nn.Conv2d(64, 64, 3, 1)
        self.pool = nn.MaxPool2d(2, 2)
        self.dense1 = nn.Linear(576, 64)
        self.dense2 = nn.Linear(64, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = self.pool(F.relu(self.conv1(X)))
        X = self.pool(F.relu(self.conv2(X)))
        X = F.relu(self.conv3(X))
        X = torch.flatten(X, 1)
        return self.dense2(F.relu(self.dense1(X)))


MODELS = {
    "lenet": lenet,
    "resnet18": resnet18,
    "convnet": ConvNet,
    "lenet-bn": lenet_bn,
}


def get_model(name: str, num_classes: int = 10) -> nn.Module:
    """A fresh model by name: ``"lenet"``, ``"resnet18"``, ``"convnet"``, ``"lenet-bn"``."""
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    check_int(num_classes, "num_classes")
    return MODELS[name](num_classes)


def count_parameters(net: nn.Module) -> int:
    """Number of trainable scalars in ``net``."""
    check_module(net)
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def check_parameters(params: Iterable) -> Iterable:
    """``params`` if it is an iterable of parameters (``net.parameters()``), not the model."""
    if isinstance(params, nn.Module) or not isinstance(params, Iterable):
        raise TypeError(
            f"params must be an iterable of parameters, got {type(params).__name__}: "
            f"pass net.parameters()"
        )
    return params
