"""The run-time policies of ``slangcli.threads``, and the start-up settings of ``slangcli._startup``."""

import os
import platform
import subprocess
import sys

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


def _python(code: str, **env) -> str:
    """stdout of ``code`` in a fresh interpreter, with ``env`` added to (or, for None values, removed from) the
    environment."""
    environ = {k: v for k, v in os.environ.items() if k not in env}
    environ.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                          check=True).stdout.strip()


# the slang command run to completion in-process, then what its environment holds
_AFTER_COMMAND = """
import os, sys
from slangcli.__main__ import main
sys.argv = ["slang", "--version"]
try:
    main()
except SystemExit:
    pass
print("timeout", os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
"""


def test_the_command_lets_idle_blas_threads_sleep_and_the_library_does_not():
    """The ``slang`` entry point sets ``OPENBLAS_THREAD_TIMEOUT`` before NumPy loads, unless the user set it;
    importing the package or its command line does not (a library user's BLAS is theirs), and importing the
    package loads no NumPy (which the entry point needs, to come first)."""
    version, timeout = _python(_AFTER_COMMAND, OPENBLAS_THREAD_TIMEOUT=None).splitlines()
    assert version.startswith("slang, version") and timeout == "timeout 20"  # the command ran, then the setting
    assert _python(_AFTER_COMMAND, OPENBLAS_THREAD_TIMEOUT="25").splitlines()[-1] == "timeout 25"
    assert _python("import os, slangcli.cli; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))",
                   OPENBLAS_THREAD_TIMEOUT=None) == "None"
    assert _python("import sys, slangcli; print('numpy' in sys.modules, callable(slangcli.fit))") == "False True"
    # once NumPy is loaded, its OpenBLAS has read the environment: nothing is set
    assert _python("import numpy, os; from slangcli import _startup; print(_startup.short_idle_spin(), "
                   "os.environ.get('OPENBLAS_THREAD_TIMEOUT'))", OPENBLAS_THREAD_TIMEOUT=None) == "False None"
