"""The run-time policies of ``slangcli.threads``."""

import platform

import pytest

from slangcli import threads


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_keep_freed_memory_is_accepted_by_glibc():
    """glibc takes both settings (it refuses an mmap threshold above its 32 MB maximum, which would make the call
    a silent no-op)."""
    assert threads.keep_freed_memory()
    assert threads.MMAP_THRESHOLD <= 32 << 20


def test_blas_threads_single_thread_for_small_steps():
    from threadpoolctl import threadpool_info

    with threads.blas_threads(n_params=100, samples=2, batch_size=10):
        assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")
