"""Two ways to serve minibatches: the classic ``DataLoader``, and device-resident tensors.

Used in: every chapter (chapter 1 introduces and measures both).

* :func:`data_loader`, the classic ``torch.utils.data.DataLoader``: index one
  sample at a time in Python, convert it, collate a batch, copy it over;
* :class:`DeviceLoader`: the whole split stored once as tensors on the device,
  each minibatch one indexing operation with a seeded permutation.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from .batches import check_batch_size
from .checks import check_data, check_not_empty
from .data import Data, ImageSet

__all__ = ["data_loader", "DeviceLoader", "load_iters"]


def data_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
) -> DataLoader:
    """The classic iterator: a ``DataLoader`` whose shuffling is seeded by ``seed``."""
    _check_loader(dataset, batch_size)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(seed),
    )


def _check_loader(dataset: Dataset, batch_size: int) -> None:
    check_batch_size(batch_size)
    check_not_empty(dataset, "dataset", "give a data set with samples")


class DeviceLoader:
    """Minibatches from a split held whole on ``device``, reshuffled every epoch.

    The split is converted and copied once; each epoch draws a permutation
    from a generator seeded with ``seed`` (so runs repeat exactly), gathers the
    split in that order with one indexing operation, and serves slices of it:
    one large gather instead of a small one per minibatch (for the length of an
    epoch the split is held twice).
    """

    def __init__(
        self,
        dataset: ImageSet,
        batch_size: int,
        device: torch.device | str = "cpu",
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        _check_loader(dataset, batch_size)
        self.X, self.y = dataset.tensors(device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        n, b = len(self.y), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self):
        X, y = self.X, self.y
        if self.shuffle:
            order = torch.randperm(len(y), generator=self.generator).to(X.device)
            X, y = X[order], y[order]  # this epoch's order, gathered once
        b = self.batch_size
        for start in range(0, len(self) * b, b):
            yield X[start : start + b], y[start : start + b]


def load_iters(
    data: Data,
    batch_size: int,
    device: torch.device | str = "cpu",
    *,
    resident: bool = True,
    seed: int = 0,
):
    """``(train_iter, test_iter)``: two :class:`DeviceLoader` or two ``DataLoader``.

    The training iterator is shuffled with ``seed``; the test iterator is not.
    """
    check_data(data)
    if resident:
        return (
            DeviceLoader(data.train, batch_size, device, seed=seed),
            DeviceLoader(data.test, batch_size, device, shuffle=False),
        )
    return (
        data_loader(data.train, batch_size, seed=seed),
        data_loader(data.test, batch_size, shuffle=False),
    )
