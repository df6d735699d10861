"""TensorBoard: scalars written by rank 0, and read back from the event files.

Used in: chapter 5.

Only rank 0 writes: every rank computes the same averaged numbers, and
several writers in one directory would produce several interleaved runs.
View the logs with ``tensorboard --logdir DIR``; :func:`read_scalars` reads
them back in Python, which is how the chapter (and the tests) check what
was written.
"""

from __future__ import annotations

from pathlib import Path

from ..core.checks import check_int

__all__ = ["open_writer", "read_scalars", "event_files"]


def _check_writer(log_dir: str | Path | None, rank: int) -> None:
    check_int(rank, "rank", 0)
    if log_dir is not None and Path(log_dir).exists() and not Path(log_dir).is_dir():
        raise NotADirectoryError(
            f"log dir {log_dir} exists and is not a directory; choose a directory"
        )


def open_writer(log_dir: str | Path | None, rank: int):
    """A ``SummaryWriter`` on ``log_dir`` for rank 0; ``None`` on other ranks or no dir.

    The import happens here, so processes that never log never load
    TensorBoard.
    """
    _check_writer(log_dir, rank)
    if log_dir is None or rank != 0:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir))


def event_files(log_dir: str | Path) -> list[Path]:
    """The TensorBoard event files under ``log_dir``."""
    if not Path(log_dir).is_dir():  # rglob would find none, as in a folder without logs
        raise FileNotFoundError(
            f"log_dir {str(log_dir)!r} is not a folder: pass the log_dir the run wrote "
            f"to (open_writer, --log-dir)"
        )
    return sorted(Path(log_dir).rglob("events.out.tfevents.*"))


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar under ``log_dir``: ``{tag: [(step, value), ...]}``, steps in order.

    Uses TensorBoard's own reader (``EventAccumulator``), keeping every point.
    """
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    if not event_files(log_dir):
        raise FileNotFoundError(
            f"no TensorBoard event files under {log_dir}; train with "
            f"log_dir={str(log_dir)!r} (or --log-dir) first"
        )
    scalars: dict[str, list[tuple[int, float]]] = {}
    for run in sorted({f.parent for f in event_files(log_dir)}):
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            points = [(e.step, e.value) for e in acc.Scalars(tag)]
            scalars.setdefault(tag, []).extend(points)
    return {tag: sorted(points) for tag, points in sorted(scalars.items())}
