"""Process start-up before NumPy and SciPy load: one BLAS thread under a small address-space limit.

OpenBLAS (NumPy and SciPy each bundle one) reserves a buffer per thread when it loads. Under a tight
``RLIMIT_AS`` (``ulimit -v 200000``) SciPy's copy failed to start its threads and spun at 100 % CPU inside
``import scipy`` for good; with one thread it loads. So when the limit is below ``SMALL_ADDRESS_SPACE`` and the
user has not chosen thread counts, they are set to one here, before any BLAS library is loaded. Below
``MIN_ADDRESS_SPACE`` the libraries cannot load at all: the package then defers its imports (the API's names raise
ImportError with :func:`too_small_address_space`'s message) and the command line refuses with that message before
importing them. Nothing here imports NumPy.
"""

from __future__ import annotations

import os

SMALL_ADDRESS_SPACE = 2 << 30  # bytes
# below this the first BLAS call cannot get its work buffer even with one thread: OpenBLAS then retries forever
# (spinning at 100 % CPU, deaf to SIGTERM) or gives up with its own message; measured: 300 MB hangs, 400 MB works
MIN_ADDRESS_SPACE = 384 << 20
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def address_space_limit() -> int | None:
    """The soft ``RLIMIT_AS`` in bytes, or None when unlimited (or not a POSIX system)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def memory_limit() -> int | None:
    """The most bytes this process can hold: the smaller of the machine's physical memory and the address-space
    limit (None when neither is known). A count of draws whose arrays exceed it is refused before they are drawn."""
    limits = [address_space_limit()]
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        pass
    known = [limit for limit in limits if limit is not None and limit > 0]
    return min(known) if known else None


def too_small_address_space() -> str | None:
    """What to say when the address-space limit is below ``MIN_ADDRESS_SPACE`` (None otherwise): below it NumPy,
    SciPy and h5py cannot even load (a MemoryError or an ImportError from deep inside their imports, under
    ``ulimit -v 200000``), and the first BLAS call would spin forever."""
    limit = address_space_limit()
    if limit is None or limit >= MIN_ADDRESS_SPACE:
        return None
    return (f"the address-space limit (ulimit -v) of {limit >> 20} MB is below the {MIN_ADDRESS_SPACE >> 20} MB "
            "slang needs")


def limit_threads_under_small_memory() -> bool:
    """Set the BLAS thread counts to 1 when the address space is limited below ``SMALL_ADDRESS_SPACE`` (and they
    are not set already); returns whether it did."""
    soft = address_space_limit()
    if soft is None or soft >= SMALL_ADDRESS_SPACE:
        return False
    changed = False
    for name in THREAD_VARIABLES:
        if name not in os.environ:
            os.environ[name] = "1"
            changed = True
    return changed


# 2^20 cycles, about 0.4 ms at this project's machines' 2.4 GHz (OpenBLAS accepts exponents 4 to 30; its default, 28,
# is about 0.1 s)
IDLE_SPIN_EXPONENT = 20


def short_idle_spin() -> bool:
    """Let OpenBLAS's idle threads sleep after about 0.4 ms of waiting instead of 0.1 s, unless the user set
    ``OPENBLAS_THREAD_TIMEOUT``; only effective before NumPy loads. Returns whether it set it.

    For the command line only (its process is slang's; a library user's BLAS is theirs to tune): the ``slang``
    command's entry point, ``slangcli.__main__.main``, calls it before it imports the command line, which loads
    NumPy. Each OpenBLAS (NumPy and SciPy load one each) starts its threads when it loads and on every
    multi-threaded call, and they spin for the timeout before sleeping: on two cores ``import slangcli.cli`` took
    0.90 s of CPU for 0.70 s of wall time (0.59 s with one thread), and a default UCI fit about 0.3 s of CPU more
    than with one thread. With this setting: 0.64 s to import and no measurable change in the step time of a
    multi-threaded 784-400-400-10 SLANG step (``benchmarks/step_time.py``), where the calls follow each other
    within the spin."""
    import sys

    if "OPENBLAS_THREAD_TIMEOUT" in os.environ or "numpy" in sys.modules:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(IDLE_SPIN_EXPONENT)
    return True
