"""Data at scale: every pass over the rows in blocks, input without end, signals during long passes, and sizes
checked before they are allocated.

Memory is measured in two ways that do not depend on the machine: the peak that ``tracemalloc`` sees (NumPy reports
its arrays to it, so it counts every array and Python object, and no library's private buffers), and, for the command
line, the difference between the peak resident memory of two runs that differ only in the size of the data.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from slangcli import evaluation
from slangcli.models import MLP
from slangcli.posteriors import LowRankGaussian
from slangcli.readers import read_table

MB = 1 << 20


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
