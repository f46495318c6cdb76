"""Data at scale: every pass over the rows in blocks, input without end, signals during long passes, and sizes
checked before they are allocated.

Memory is measured in two ways that do not depend on the machine: the peak that ``tracemalloc`` sees (NumPy reports
its arrays to it, so it counts every array and Python object, and no library's private buffers), and, for the command
line, the difference between the peak resident memory of two runs that differ only in the size of the data.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from slangcli import evaluation
from slangcli.models import MLP
from slangcli.posteriors import LowRankGaussian
from slangcli.readers import read_table

MB = 1 << 20
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
# a limit on the address space of the commands that, before, read without end: they then fail (out of memory)
# instead of taking the machine's memory
LIMIT = 1 << 30


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def slang(*args, cwd, before="", **kw):
    """``python -m slangcli ARGS`` in ``cwd`` under ``LIMIT`` (``before``: Python run first in its process, to
    lower a limit); a Popen."""
    code = f"{before}from slangcli.__main__ import main; main(prog_name='slang')"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=cwd, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=ENV, preexec_fn=_limited, **kw)


def finished(proc, seconds=60):
    """``(exit code, stderr)`` of ``proc``, killed after ``seconds`` (exit code None)."""
    try:
        _, err = proc.communicate(timeout=seconds)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return None, err


def traced_peak(function, *args, **kwargs):
    """``(result, peak bytes)`` of ``function(*args, **kwargs)`` as tracemalloc sees it (beyond what was held
    before the call)."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        result = function(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - before


def _logistic_regression(n, seed=0):
    """A logistic-regression posterior of 1 feature and ``n`` rows of data for it."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 1))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(float)
    model = MLP((1, 1), likelihood="bernoulli")
    posterior = LowRankGaussian(mean=np.array([1.5, -0.2]), U=np.array([[2.0], [0.5]]), d=np.array([4.0, 9.0]))
    return model, posterior, X, y


def test_scoring_a_logistic_regression_takes_memory_of_the_data_not_of_rows_times_quadrature_nodes():
    """The final -ELBO and the test predictive of a logistic regression are one-dimensional quadratures per row:
    done over all rows at once they held rows x 96 nodes in several temporaries (15.7 GB for a fit of ten million
    rows); in blocks they hold a few vectors of the rows and one block's temporaries."""
    n = 400_000
    model, posterior, X, y = _logistic_regression(n)
    out, peak = traced_peak(evaluation.score, model, posterior, np.ones(2), X_train=X, y_train=y, X_test=X, y_test=y)
    assert 0.5 < out["test"]["accuracy"] <= 1 and np.isfinite(out["train"]["neg_elbo_per_example"])
    # a rows x 96 float64 temporary alone is 307 MB; the vectors of the rows take 3.2 MB each
    assert peak < 96 * MB, f"{peak / MB:.0f} MB"


@pytest.mark.parametrize("kind", ["csv", "libsvm"])
def test_reading_a_file_holds_its_table_and_a_block_of_text(tmp_path, kind):
    """200 000 rows of one feature and a label (a 3.2 MB table): read whole, split into lines and cells as Python
    strings, the file took 63 MB (CSV) and 79 MB (LIBSVM) at the peak; parsed a block at a time, the table (built
    from its blocks) and one block of text."""
    n = 200_000
    x = np.random.default_rng(0).standard_normal(n)
    if kind == "csv":
        text = "x,label\n" + "".join(f"{v:.6f},{int(v > 0)}\n" for v in x)
    else:
        text = "".join(f"{'+1' if v > 0 else '-1'} 1:{v:.6f}\n" for v in x)
    path = tmp_path / f"data.{kind}"
    path.write_text(text)
    table, peak = traced_peak(read_table, path)
    assert table.X.shape == (n, 1) and np.array_equal(table.X[:, 0], np.round(x, 6))
    data = table.X.nbytes + table.y.nbytes
    assert peak < 10 * data, f"{peak / MB:.1f} MB for a table of {data / MB:.1f} MB"


# ------------------------------------------------------------------------------------------ input without end


@pytest.mark.parametrize("data", ["/dev/urandom", "-"])
def test_a_device_as_data_is_refused(tmp_path, data):
    """/dev/urandom (or /dev/zero on standard input) never ends: read as data it took memory at 0.4 to 1 GB/s
    and ignored SIGINT and SIGTERM. It is refused before it is read, as it is as a run file."""
    with open("/dev/zero", "rb") as zero:
        code, err = finished(slang("fit", data, "-o", "run.h5", cwd=tmp_path, stdin=zero))
    name = "/dev/urandom: is a device" if data != "-" else "-: standard input is a device"
    assert code == 1 and err.startswith(f"slang: error: {name}, not a data file") and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["stdin", "fifo"])
def test_a_stream_without_end_is_refused_beyond_the_stream_limit(tmp_path, where):
    """``yes 1,2,0 | slang fit -`` and ``slang fit <(yes 1,2,0)`` read until memory ran out. A stream is read
    within STREAM_LIMIT bytes (1 GiB; lowered to 1 MiB here) and refused beyond it, with a pointer to a file."""
    before = "import slangcli.readers._common as c; c.STREAM_LIMIT = 1 << 20; "
    if where == "stdin":
        source = subprocess.Popen(["yes", "1,2,0"], stdout=subprocess.PIPE)
        proc = slang("fit", "-", "-o", "run.h5", cwd=tmp_path, before=before, stdin=source.stdout)
        source.stdout.close()
    else:
        os.mkfifo(tmp_path / "data.csv")
        source = subprocess.Popen("exec yes 1,2,0 > data.csv", shell=True, cwd=tmp_path, stderr=subprocess.DEVNULL)
        proc = slang("fit", "data.csv", "-o", "run.h5", cwd=tmp_path, before=before)
    try:
        code, err = finished(proc)
    finally:
        source.kill()
        source.wait()
    name, kind = ("-", "standard input") if where == "stdin" else ("data.csv", "a pipe")
    assert code == 1 and err == (f"slang: error: {name}: more than 1 MiB from {kind}, the most slang reads from a "
                                 "stream; write the data to a file and give its name\n"), err
    assert not (tmp_path / "run.h5").exists()
