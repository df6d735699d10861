"""Batch sizes: the checks every loader shares, and a global batch split over ranks.

Used in: chapters 1, 3 and 5 (and every later chapter through them).
"""

from __future__ import annotations

__all__ = ["check_batch_size", "rank_batch_size", "check_batch_fits"]


def check_batch_size(batch_size: int, name: str = "batch_size") -> int:
    """``batch_size`` if it is a positive integer; ``ValueError`` naming ``name`` else."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"{name} must be a positive integer, got {batch_size!r}")
    return batch_size


def _check_even_split(global_batch: int, world_size: int) -> None:
    check_batch_size(global_batch, "global_batch")
    check_batch_size(world_size, "world_size")
    if global_batch < world_size or global_batch % world_size:
        suggestion = max(1, global_batch // world_size) * world_size
        raise ValueError(
            f"global batch {global_batch} does not split evenly over {world_size} "
            f"ranks; choose a multiple of {world_size}, e.g. {suggestion}"
        )


def rank_batch_size(global_batch: int, world_size: int) -> int:
    """Each rank's minibatch, ``global_batch / world_size``: it must be a whole number.

    With unequal local batches, averaging the ranks' mean gradients would
    weigh samples unequally; rather than weigh them, we refuse.
    """
    _check_even_split(global_batch, world_size)
    return global_batch // world_size


def check_batch_fits(batch: int, share: int, world_size: int, name: str = "per_rank_batch") -> int:
    """``batch`` if this rank's ``share`` of the training set holds at least one such batch.

    A loader would otherwise hand out one short batch per epoch, and the run
    would train on fewer samples per step than it was asked for, silently.
    """
    if batch > share:
        raise ValueError(
            f"{name} {batch} is larger than each rank's share of the training set "
            f"({share} samples over {world_size} rank(s)): pass at most {share} per rank, "
            f"a global batch of at most {share * world_size}, or use more data"
        )
    return batch
