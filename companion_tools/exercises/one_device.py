"""Chapter 1's exercise checker: an evaluation that counts every test sample once.

``check_evaluate(fn)`` runs ``fn(net, data_iter) -> accuracy`` (the arguments of
``companion.core.evaluate_accuracy``) on a test set of 1,000 samples served in
batches of 256, so that the last batch is smaller, with a net that holds a
BatchNorm layer and dropout and is left in training mode, as after an epoch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .verdicts import Verdicts, attempt

__all__ = ["check_evaluate"]

N_TEST, BATCH, RIGHT = 1000, 256, 700  # the net is right on the first 700 samples only


def _net_and_batches() -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3)
    )
    X = torch.randn(N_TEST, 16, generator=g)
    net.train(True)
    with torch.no_grad():
        net(X)  # running statistics that are not those of any one batch
        net.eval()
        predicted = net(X).argmax(dim=1)
    net.train(True)
    y = torch.where(torch.arange(N_TEST) < RIGHT, predicted, (predicted + 1) % 3)
    return net, [(X[i : i + BATCH], y[i : i + BATCH]) for i in range(0, N_TEST, BATCH)]


def check_evaluate(fn: Callable, quiet: bool = False) -> Verdicts:
    """Check ``fn(net, data_iter)``: the fraction of all samples right, in eval mode,
    with the net's mode and buffers as they were. ``data_iter`` is a list of batches."""
    if not callable(fn):
        raise TypeError(f"check_evaluate needs your evaluation function, got {fn!r}")
    net, batches = _net_and_batches()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    got, problem = attempt(fn, net, batches)
    verdicts = Verdicts(
        f"{getattr(fn, '__name__', 'fn')} on {N_TEST:,} samples in batches "
        f"of {BATCH} (the last one {N_TEST % BATCH})",
        quiet,
    )
    verdicts.add(
        "returns a number between 0 and 1",
        not problem and isinstance(got, (int, float)) and 0 <= got <= 1,
        problem or f"got {got!r}",
    )
    verdicts.add(
        "every sample counts once (not a mean of the batches' accuracies)",
        abs(float(got) - RIGHT / N_TEST) < 1e-9 if verdicts.cases[-1][1] else False,
        "want the samples right over all samples, in eval mode: count both, divide once",
    )
    verdicts.add(
        "the net is back in training mode",
        net.training,
        "remember net.training and restore it after evaluating",
    )
    same = all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    verdicts.add(
        "BatchNorm's running statistics are unchanged",
        same,
        "evaluate in eval mode (net.eval()), without gradients",
    )
    return verdicts
