"""DDP communication hooks by hand: what DDP hands a hook, and gradients sent in 16 bits.

Used in: chapter 10.

``model.register_comm_hook(state, hook)`` replaces what DDP does with each
bucket of gradients (chapter 6's buckets) once the bucket is full. DDP calls
``hook(state, bucket)`` with a ``GradBucket``: ``bucket.buffer()`` is the
bucket's flat gradient buffer (``bucket.gradients()`` are views into it,
``bucket.parameters()`` their parameters, ``bucket.index()`` its number,
``bucket.is_last()`` whether it is the last this step). The hook must
return a ``torch.futures.Future`` whose value is a tensor of the buffer's
size: the **averaged** gradients, which DDP copies into each ``.grad``.

:func:`mean_hook` is DDP's own all-reduce written as a hook (divided by N
first, as torch's ``allreduce_hook`` does). :func:`cast_hook` sends the
bucket in another dtype (``torch.float16`` or
``torch.bfloat16``): half the bytes of fp32 (a quarter of fp64), for a
rounding of each gradient to 11 (fp16) or 8 (bf16) significant bits.
It divides by the world size *before* the sum, in the narrow dtype, as
torch's ``fp16_compress_hook`` does, so that a sum of N fp16 values cannot
overflow where each one did not; the arithmetic is the same, so the result
is the same, bit for bit (``tests/slowlinks/test_exact.py``).
"""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ..core.checks import check_choice

__all__ = [
    "check_bucket",
    "mean_hook",
    "cast_hook",
    "fp16_hook",
    "bf16_hook",
    "HOOKS",
    "torch_hook",
]


def _done(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    """A future that already holds ``tensor``: these hooks work synchronously."""
    future = torch.futures.Future()
    future.set_result(tensor)
    return future


def check_bucket(bucket) -> torch.Tensor:
    """The bucket's buffer; a ``TypeError`` saying how to use a hook for anything else."""
    if not isinstance(bucket, dist.GradBucket):
        raise TypeError(
            f"a communication hook gets a GradBucket from DDP, got {type(bucket).__name__}: "
            f"wrap the model in DistributedDataParallel and call "
            f"model.register_comm_hook(state, hook)"
        )
    return bucket.buffer()


def mean_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default: the bucket's gradients divided by N, then summed over the ranks."""
    buffer = check_bucket(bucket).div_(dist.get_world_size())
    dist.all_reduce(buffer)
    return _done(buffer)


def cast_hook(
    state, bucket: dist.GradBucket, dtype: torch.dtype = torch.float16
) -> torch.futures.Future[torch.Tensor]:
    """The bucket sent as ``dtype``: divided by N, summed, cast back into the buffer."""
    buffer = check_bucket(bucket)
    narrow = buffer.to(dtype).div_(dist.get_world_size())  # a new tensor: 2 bytes a value
    dist.all_reduce(narrow)
    return _done(buffer.copy_(narrow))


def fp16_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """:func:`cast_hook` in fp16 (DDP wants a plain function: a ``partial`` has no name)."""
    return cast_hook(state, bucket, torch.float16)


def bf16_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """:func:`cast_hook` in bf16."""
    return cast_hook(state, bucket, torch.bfloat16)


# Name: (the hook written here, torch's hook with the same arithmetic).
HOOKS = {
    "mean": (mean_hook, default_hooks.allreduce_hook),
    "fp16": (fp16_hook, default_hooks.fp16_compress_hook),
    "bf16": (bf16_hook, default_hooks.bf16_compress_hook),
}


def torch_hook(name: str):
    """torch's hook for one of :data:`HOOKS` (``"mean"``, ``"fp16"``, ``"bf16"``)."""
    check_choice(name, "hook", HOOKS)
    return HOOKS[name][1]
