"""Run files holding a k-tied posterior (``ktied-gaussian``, format 1.2): exact round trip of a trained-style
(positive factors, no floor) and a compressed-style (signed factors, positive floor) posterior on a two-layer
network, and rejection of every corruption with a one-line ``FormatError`` naming the file."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest

from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import KTiedGaussian
from slangcli.models import MLP
from slangcli.runfile.io import FORMAT_VERSION, read_run, write_run

SIZES = (3, 4, 1)  # the fitted_run fixture's 3 features, a hidden layer of 4, one output
MODEL = MLP(SIZES)


def _posterior(signed: bool) -> KTiedGaussian:
    rng = np.random.default_rng(0 if signed else 1)
    draw = (lambda *s: rng.standard_normal(s)) if signed else (lambda *s: rng.uniform(0.05, 0.5, s))
    return KTiedGaussian(mean=rng.standard_normal(MODEL.n_params), U=(draw(3, 2), draw(4, 1)),
                         V=(draw(4, 2), draw(1, 1)), bias_log_sigma=rng.uniform(-2, 0, 5),
                         floor=np.array([1e-4, 2e-4]) if signed else np.zeros(2), sizes=SIZES)


def _write(fitted_run, tmp_path, signed):
    run = dataclasses.replace(fitted_run, model=MODEL, prior_precision=MODEL.prior_precision(1.0, 1e-5),
                              posterior=_posterior(signed),
                              compression={"rank": 2, "source": {"sha256": "ab" * 32}} if signed else {},
                              compression_arrays={"singular_values_0": np.arange(3.0)} if signed else {})
    path = tmp_path / f"ktied-{signed}.h5"
    write_run(path, run)
    return run, path


@pytest.mark.parametrize("signed", [False, True])
def test_round_trip_is_exact(fitted_run, tmp_path, signed):
    run, path = _write(fitted_run, tmp_path, signed)
    back = read_run(path)
    post, orig = back.posterior, run.posterior
    assert isinstance(post, KTiedGaussian) and post.sizes == SIZES and post.ranks == (2, 1)
    for name in ("mean", "bias_log_sigma", "floor"):
        assert getattr(post, name).tobytes() == getattr(orig, name).tobytes(), name
    for a, b in zip((*post.U, *post.V), (*orig.U, *orig.V)):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert back.compression == run.compression
    assert back.compression_arrays.keys() == run.compression_arrays.keys()
    with h5py.File(path, "r") as f:
        g = f["posterior"]
        assert g.attrs["encoding-type"] == "ktied-gaussian" and g.attrs["encoding-version"] == FORMAT_VERSION
        assert sorted(g) == ["U_0", "U_1", "V_0", "V_1", "bias_log_sigma", "floor", "mean"]
        assert ("compression" in f) == signed


def _replace(name, fn):
    def corrupt(f):
        value = fn(f[f"posterior/{name}"][()])
        del f[f"posterior/{name}"]
        f["posterior"].create_dataset(name, data=value)
    return corrupt


def _with(index, value):
    def fn(a):
        a = np.array(a, dtype=float)
        a[index] = value
        return a
    return fn


def _delete(name):
    return lambda f: f["posterior"].__delitem__(name)


def _add(name, value):
    return lambda f: f["posterior"].create_dataset(name, data=value)


CASES = [  # (signed source, corruption, message)
    (False, _replace("U_0", lambda a: a[:2]), "/posterior/U_0 has shape (2, 2), expected (3, k) with k >= 1"),
    (False, _replace("V_1", lambda a: a.ravel()), "/posterior/V_1 has shape (1,), expected (1, k)"),
    (False, _replace("U_1", lambda a: np.zeros((4, 0))), "/posterior/U_1 has shape (4, 0)"),
    (False, _replace("V_0", lambda a: np.hstack([a, a])), "U_0 and V_0 have different ranks (2 and 4)"),
    (False, _replace("U_0", _with((1, 1), np.nan)), "/posterior/U_0 holds non-finite values"),
    (False, _replace("V_0", _with((0, 0), -0.1)), "U_0 and V_0 must be positive where the layer has no floor"),
    (False, _replace("U_1", lambda a: np.full_like(a, 1e-200)), "U_1 V_1^T gives standard deviations"),
    (False, _replace("U_0", lambda a: np.full_like(a, 1e140)), "U_0 V_0^T gives standard deviations"),
    (False, _replace("floor", _with(0, -1e-3)), "/posterior/floor must be >= 0"),
    (False, _replace("floor", lambda a: a[:1]), "/posterior/floor has shape (1,), expected (2,)"),
    (False, _replace("bias_log_sigma", _with(0, 400.0)), "/posterior/bias_log_sigma must lie in [-300, 300]"),
    (False, _replace("bias_log_sigma", lambda a: a[:-1]), "/posterior/bias_log_sigma has shape (4,), expected (5,)"),
    (False, _replace("mean", lambda a: a[:-1]), "/posterior/mean has shape"),
    (False, _replace("U_0", lambda a: a.astype("S8")), "/posterior/U_0 is not numeric"),
    (False, _delete("V_1"), "missing dataset /posterior/V_1"),
    (False, _delete("floor"), "missing dataset /posterior/floor"),
    (False, _add("U_2", np.ones((1, 1))), "/posterior/U_2 does not belong to the model's 2 layers"),
    (True, _replace("floor", lambda a: np.zeros_like(a)), "must be positive where the layer has no floor"),
    (True, _replace("floor", _with(1, np.inf)), "/posterior/floor holds non-finite values"),
]


@pytest.mark.parametrize("signed,corrupt,expected", CASES)
def test_corrupted_contents_are_format_errors(fitted_run, tmp_path, signed, corrupt, expected):
    _, path = _write(fitted_run, tmp_path, signed)
    with h5py.File(path, "r+") as f:
        corrupt(f)
    with pytest.raises(FormatError) as info:
        read_run(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert expected in message, message


def test_a_compression_group_of_a_newer_major_version_is_refused(fitted_run, tmp_path):
    _, path = _write(fitted_run, tmp_path, True)
    with h5py.File(path, "r+") as f:
        f["compression"].attrs["encoding-version"] = "2.0"
    with pytest.raises(FormatError, match="written by slang file format 2.0"):
        read_run(path)


@pytest.mark.parametrize("signed", [False, True])
def test_control_the_uncorrupted_files_read(fitted_run, tmp_path, signed):
    _, path = _write(fitted_run, tmp_path, signed)
    assert read_run(path).posterior.sigma().min() > 0
