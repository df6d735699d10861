"""The options of a DDP run, filled in from the profile and checked once.

Used in: chapter 5 (chapters 6-8 reuse it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.batches import check_batch_size, rank_batch_size
from ..core.checks import check_choice, check_int, check_positive
from ..core.lr import linear_lr
from ..core.models import MODELS
from ..core.profiles import get_profile
from ..core.training import check_lr

__all__ = ["linear_lr", "DDPConfig"]  # linear_lr: chapter 5 shows core.lr's rule here


@dataclass(frozen=True)
class DDPConfig:
    """The options of :func:`train_ddp`; ``None`` means "the profile's"."""

    profile: str | None = None
    model: str | None = None
    global_batch: int | None = None
    per_rank_batch: int | None = None
    epochs: int | None = None
    lr: float | None = None
    scale_lr: bool = False  # multiply lr by the world size (linear_lr)
    log_dir: str | None = None  # TensorBoard, written by rank 0
    checkpoint: str | None = None  # written by rank 0, atomically
    seed: int = 0
    max_steps: int | None = None  # stop early
    checks: bool = True  # run the detectors at the end
    # DDP looks for parameters that forward does not use, after every forward pass:
    # an extra traversal of the autograd graph each step. Off: they raise first.
    find_unused_parameters: bool = False
    precision: str | None = None  # fp32, bf16, fp16, auto, or fp64 for checks (MathMode)
    channels_last: bool | None = None
    clip: float | None = None  # clip the gradient's global norm to this before each step
    verbose: bool = False

    def resolve(self, world_size: int) -> DDPConfig:
        """Every size filled in from the profile and checked; ``ValueError`` if bad."""
        profile = get_profile(self.profile)
        self._check(world_size)
        batch = self.per_rank_batch or rank_batch_size(
            self.global_batch or profile.batch_size, world_size
        )
        lr = self.lr or profile.lr
        return replace(
            self,
            profile=profile.name,
            model=self.model or profile.processes.model,
            per_rank_batch=batch,
            global_batch=batch * world_size,
            epochs=self.epochs or profile.processes.epochs,
            lr=linear_lr(lr, world_size) if self.scale_lr else lr,
            precision=self.precision or profile.processes.precision,
            channels_last=(
                profile.channels_last if self.channels_last is None else self.channels_last
            ),
        )

    def _check(self, world_size: int) -> None:
        """Every option that is set must be valid; ``None`` means the profile's."""
        check_int(world_size, "world_size")
        for name in ("epochs", "max_steps", "per_rank_batch", "global_batch"):
            if getattr(self, name) is not None:
                check_batch_size(getattr(self, name), name)
        if self.lr is not None:
            check_lr(self.lr)
        if self.clip is not None:
            check_positive(self.clip, "clip", "the largest gradient norm, or None not to clip")
        if self.global_batch is not None and self.per_rank_batch is not None:
            raise ValueError("give global_batch or per_rank_batch, not both")
        if self.model is not None:
            check_choice(self.model, "model", MODELS)
        check_int(self.seed, "seed", 0, "torch takes seeds below 2**64", 2**64 - 1)
        for name in ("scale_lr", "checks", "verbose", "find_unused_parameters"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
