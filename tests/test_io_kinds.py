"""Run files holding the diagonal and full posterior kinds (``slangcli.runfile.io``, format 1.1): exact round trip, the
encoding-type names, and rejection of corrupted contents with one-line ``FormatError`` messages."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest

from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import DiagonalGaussian, FullGaussian, LowRankGaussian
from slangcli.runfile.io import read_run, write_run

D = 4  # the fitted_run fixture: 3 features and a bias


def _diagonal():
    rng = np.random.default_rng(0)
    return DiagonalGaussian(mean=rng.standard_normal(D), log_sigma=rng.uniform(-2.0, 0.5, D))


def _full():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((D, D))
    return FullGaussian.from_precision(rng.standard_normal(D), A @ A.T + np.eye(D))


def _write(fitted_run, tmp_path, kind):
    posterior = _diagonal() if kind == "diagonal" else _full()
    path = tmp_path / f"{kind}.h5"
    write_run(path, dataclasses.replace(fitted_run, posterior=posterior))
    return kind, posterior, path


@pytest.fixture(params=["diagonal", "full"])
def kind_file(request, fitted_run, tmp_path):
    return _write(fitted_run, tmp_path, request.param)


def test_round_trip_is_exact(kind_file):
    kind, posterior, path = kind_file
    back = read_run(path).posterior
    assert type(back) is type(posterior)
    for f in dataclasses.fields(posterior):
        a, b = getattr(back, f.name), getattr(posterior, f.name)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f.name
    with h5py.File(path, "r") as h:
        assert h["posterior"].attrs["encoding-type"] == f"{kind}-gaussian"
        assert sorted(h["posterior"]) == sorted(f.name for f in dataclasses.fields(posterior))


def _message(path) -> str:
    with pytest.raises(FormatError) as info:
        read_run(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message


def _set(name, fn):
    def corrupt(f):
        value = fn(f[f"posterior/{name}"][()])
        del f[f"posterior/{name}"]
        f["posterior"].create_dataset(name, data=value)
    return corrupt


def _with(index, value):
    def fn(a):
        a = a.copy()
        a[index] = value
        return a
    return fn


DIAGONAL_CASES = [
    (_set("log_sigma", _with(1, np.nan)), "/posterior/log_sigma holds non-finite values"),
    (_set("log_sigma", _with(2, 400.0)), "/posterior/log_sigma must lie in [-300, 300]"),
    (_set("log_sigma", _with(0, -1e4)), "/posterior/log_sigma must lie in [-300, 300]"),
    (_set("log_sigma", lambda a: a[:-1]), "/posterior/log_sigma has shape (3,), expected (4,)"),
    (_set("mean", lambda a: np.vstack([a, a])), "/posterior/mean has shape (2, 4), expected (4,)"),
    (lambda f: f["posterior"].__delitem__("log_sigma"), "missing dataset /posterior/log_sigma"),
]
FULL_CASES = [
    (_set("chol", _with((0, 2), 0.1)), "/posterior/chol must be lower triangular"),
    (_set("chol", _with((1, 1), 0.0)), "/posterior/chol must have a positive diagonal"),
    (_set("chol", _with((3, 3), -1.0)), "/posterior/chol must have a positive diagonal"),
    (_set("chol", _with((2, 1), np.inf)), "/posterior/chol holds non-finite values"),
    (_set("chol", lambda a: a[:, :3]), "/posterior/chol has shape (4, 3), expected (4, 4)"),
    (_set("chol", lambda a: a.astype("S8")), "/posterior/chol is not numeric"),
    (lambda f: f["posterior"].__delitem__("chol"), "missing dataset /posterior/chol"),
]


@pytest.mark.parametrize("kind,corrupt,expected", [("diagonal", *case) for case in DIAGONAL_CASES]
                         + [("full", *case) for case in FULL_CASES])
def test_corrupted_contents_are_format_errors(fitted_run, tmp_path, kind, corrupt, expected):
    _, _, path = _write(fitted_run, tmp_path, kind)
    with h5py.File(path, "r+") as f:
        corrupt(f)
    assert expected in _message(path)


def test_control_the_uncorrupted_files_read(kind_file):
    """The corruption cases start from files that read (so each failure above is due to its corruption)."""
    _, posterior, path = kind_file
    assert read_run(path).posterior.mean.shape == (D,)


def test_every_posterior_kind_brings_its_encoding_std_and_parameter_count():
    """A posterior kind describes itself: its run-file encoding and datasets, its marginal standard deviations
    (against the dense covariance where one exists) and its variational parameter count; the run file reads
    each registered kind with the kind's own ``from_group``."""
    from slangcli.gaussian.posteriors import POSTERIORS
    from slangcli.runfile.io import POSTERIOR_NAMES, POSTERIOR_READERS

    rng = np.random.default_rng(0)
    D = 6
    low = LowRankGaussian(rng.normal(size=D), rng.normal(size=(D, 2)), rng.uniform(1, 2, D))
    dense = np.linalg.inv(low.U @ low.U.T + np.diag(low.d))
    np.testing.assert_allclose(low.std(), np.sqrt(np.diag(dense)), rtol=1e-12)
    assert low.n_variational_params() == D * 4
    for cls in POSTERIORS.values():
        assert POSTERIOR_NAMES[cls] == cls.encoding
        assert POSTERIOR_READERS[cls.encoding] == cls.from_group
