"""How many BLAS threads a training run uses, and how the C allocator treats the step's temporary arrays.

OpenBLAS hands even tiny products and eigendecompositions to all its threads; on a 2-core machine that makes a
65 x 65 ``syevx`` or a 257 x 64 product 5-10x slower than on one thread, and small problems are nothing but such
calls. Large layers (MNIST-sized) do gain from threads. The switch costs about a millisecond, so it is made once
per run, from the size of one step's work, never per operation.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util

from threadpoolctl import threadpool_limits

# D * S * M below which a step is a sequence of small BLAS calls that run fastest on a single thread.
SINGLE_THREAD_WORK = 20_000_000


def blas_threads(n_params: int, samples: int, batch_size: int):
    """Context manager limiting BLAS to one thread for small steps; leaves the default otherwise."""
    if n_params * samples * batch_size < SINGLE_THREAD_WORK:
        return threadpool_limits(limits=1, user_api="blas")
    return contextlib.nullcontext()


# glibc's mallopt parameters, and the largest mmap threshold it accepts on 64-bit systems
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep and reuse freed blocks of up to 32 MB rather than handing them back to the system.

    A step makes dozens of short-lived arrays of a few hundred kilobytes (block Lanczos works on D x (L + 2)
    blocks). By default glibc may return such memory as soon as it is freed, and every new array then faults its
    pages in again; on a virtual machine that cost more than the arithmetic: a SLANG step at the 14-50-1 shape with
    L = 32 took 7.5-9.4 ms of CPU time (varying from run to run) and 6.6-6.7 ms with the memory kept. Process-wide,
    so only entry points call it (the ``slang`` command, the benchmarks that time what it does); freed memory up to
    ``TRIM_THRESHOLD`` stays with the process. Returns whether the allocator accepted the settings (False off glibc).
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
