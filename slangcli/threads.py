"""How many BLAS threads a training run uses.

OpenBLAS hands even tiny products and eigendecompositions to all its threads; on a 2-core machine that makes a
65 x 65 ``syevx`` or a 257 x 64 product 5-10x slower than on one thread, and small problems are nothing but such
calls. Large layers (MNIST-sized) do gain from threads. The switch costs about a millisecond, so it is made once
per run, from the size of one step's work, never per operation.
"""

from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_limits

# D * S * M below which a step is a sequence of small BLAS calls that run fastest on a single thread.
SINGLE_THREAD_WORK = 20_000_000


def blas_threads(n_params: int, samples: int, batch_size: int):
    """Context manager limiting BLAS to one thread for small steps; leaves the default otherwise."""
    if n_params * samples * batch_size < SINGLE_THREAD_WORK:
        return threadpool_limits(limits=1, user_api="blas")
    return contextlib.nullcontext()
