"""Chapter 7's exercise checker: a method of your own in the study's table.

``check_method(method)`` takes a ``companion.study.Method`` (its ``run(spec)`` returns
one record per epoch) and trains it, as the study does, on 512 training images
of ``data`` (default: the offline MNIST sample) for two epochs, LeNet, a global
batch of 64, on 1 and 2 devices, beside the ``reference`` method (one device).
Each run must give one record per epoch, numbered from 1, with the device count
asked for and a positive time. A method in one process draws the reference's
global batches, so its last test accuracy must be within 0.02 of the reference's
(5 of 256 test images: the same batches and learning rate learn the same model, up
to fp32 rounding); a method with one process per device draws its own order (a
``DistributedSampler``), so after two short epochs it must only not be more than
0.15 below. Exercise 3: then run the study with your method,
``main(argv, catalog={**METHODS, "fused": yours})``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from companion.core import Data, load_data
from companion.study import Method, RunSpec, run_method, subset

from .verdicts import Verdicts, attempt

__all__ = ["check_method"]

EPOCHS, SAME_BATCHES, OWN_ORDER = 2, 0.02, 0.15


def _problem(records, spec: RunSpec, reference_acc: float, processes: bool) -> str:
    if not isinstance(records, list) or len(records) != spec.epochs:
        return f"want a list of {spec.epochs} records (one per epoch), got {records!r:.80}"
    if [r.epoch for r in records] != list(range(1, spec.epochs + 1)):
        return f"epochs numbered {[r.epoch for r in records]}, not 1 to {spec.epochs}"
    if any(r.n_devices != spec.n_devices for r in records):
        return f"records say {[r.n_devices for r in records]} devices, not {spec.n_devices}"
    if not all(r.sec_per_epoch > 0 for r in records):
        return "a record's seconds per epoch is not positive"
    acc = records[-1].test_acc
    if not (
        acc >= reference_acc - OWN_ORDER if processes else abs(acc - reference_acc) <= SAME_BATCHES
    ):
        return f"last test accuracy {acc:.3f}, the reference's {reference_acc:.3f}: more than " + (
            f"{OWN_ORDER} below" if processes else f"{SAME_BATCHES} apart"
        )
    return ""


def check_method(
    method: Method, data: Data | None = None, devices: Sequence[int] = (1, 2), quiet: bool = False
) -> Verdicts:
    """Your ``method`` on 1 and 2 devices against the study's reference."""
    if not isinstance(method, Method):
        raise TypeError(f"check_method needs a companion.study.Method, got {method!r:.80}")
    data = subset(data if data is not None else load_data("mnist-sample", verbose=False), 512, 256)
    spec = RunSpec(data, "lenet", 1, 64, lr=0.1, epochs=EPOCHS, seed=0, profile="ci")
    reference = run_method("reference", spec)[-1].test_acc
    name = getattr(method.run, "__name__", "run")
    verdicts = Verdicts(
        f"{name}: {EPOCHS} epochs of 512 images, LeNet, global batch 64, beside one device", quiet
    )
    for n in devices:
        records, problem = attempt(method.run, replace(spec, n_devices=n))
        if not problem:
            found, raised = attempt(
                _problem, records, replace(spec, n_devices=n), reference, method.processes
            )
            problem = raised or found
        verdicts.add(
            f"{n} device(s), one record per epoch, the reference's accuracy"
            + (" or near it" if method.processes else ""),
            not problem,
            problem,
        )
    return verdicts
