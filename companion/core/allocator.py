"""Freed memory kept for reuse: steady CPU step times on Linux (glibc's malloc).

Used in: every chapter (the timed loops call :func:`keep_freed_memory` by name:
chapter 1's ``fit``, every rank's ``train_epochs``, each launched worker, the
benchmarks); chapter 1 measures what it changes. ``import companion`` changes
no setting of the process.

On the CPU, torch takes each step's activations and gradients from the C
library's ``malloc`` and hands them back at the end of the step. glibc's
``malloc`` serves a large block (over 128 KiB at first) with a fresh
``mmap`` and returns it to the operating system when it is freed, and it
trims the top of its heap back too. Each step then asks the kernel for the
same memory again, and the kernel zeroes every new page on first touch (a
*page fault*). glibc raises its threshold as it sees large blocks freed, so a
process can drift from this slow regime into the fast one, or stay slow,
depending on the order of its early allocations: the same LeNet step (batch
64, 2 threads) took about 4 ms in some processes and 6-9 ms in others, with
1,000-1,500 page faults per step in the slow ones and none in the fast.

:func:`keep_freed_memory` fixes both thresholds (``mallopt``): blocks up to
32 MiB come from the heap, and freed memory stays in the process for the
next step, as a caching allocator (jemalloc, tcmalloc, CUDA's) keeps it.
PyTorch's performance tuning guide recommends such an allocator for CPU
training for the same reason. The price is that a process keeps the memory of
its largest step until it ends. ``COMPANION_KEEP_FREED_MEMORY=0`` in the
environment leaves glibc's defaults. Other C libraries (macOS, Windows,
musl) are left as they are.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit: bigger blocks still mmap
TRIM_THRESHOLD = 1 << 30  # freed memory at the heap's top returned only beyond 1 GiB
OPT_OUT = "COMPANION_KEEP_FREED_MEMORY"


@functools.cache  # once per process: the setting is the process's
def keep_freed_memory() -> bool:
    """Ask glibc's ``malloc`` to keep freed memory for reuse; whether it now does.

    ``False`` where the C library is not glibc or ``COMPANION_KEEP_FREED_MEMORY=0``.
    """
    if os.environ.get(OPT_OUT, "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    kept = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and kept
