"""A new posterior kind is its own class and one registry line: the test-only isotropic Gaussian
(``tests/toy_posterior.py``), registered here, is written to a run file, read back, sampled, gives its standard
deviations and is scored by ``slang evaluate``, with no change to slang."""

from __future__ import annotations

import dataclasses
import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from slangcli.cli import main
from slangcli.errors import FormatError
from slangcli.gaussian.posteriors import POSTERIORS
from slangcli.runfile.io import POSTERIOR_NAMES, read_run, write_run
from toy_posterior import IsotropicGaussian

D = 4  # the fitted_run fixture: 3 features and a bias


@pytest.fixture
def isotropic(monkeypatch):
    monkeypatch.setitem(POSTERIORS, "isotropic", IsotropicGaussian)  # the one registry line
    return IsotropicGaussian


@pytest.fixture
def toy_run(fitted_run):
    posterior = IsotropicGaussian(mean=np.array([0.5, -1.0, 0.25, 0.0]), log_sigma=np.array([np.log(0.3)]))
    return dataclasses.replace(fitted_run, posterior=posterior)


def test_the_toy_kind_round_trips_through_a_run_file(isotropic, toy_run, tmp_path):
    path = tmp_path / "toy.h5"
    write_run(path, toy_run)
    with h5py.File(path, "r") as f:
        assert f["posterior"].attrs["encoding-type"] == "isotropic-gaussian"
        assert sorted(f["posterior"]) == ["log_sigma", "mean"]

    back = read_run(path).posterior
    assert type(back) is IsotropicGaussian
    assert back.mean.tobytes() == toy_run.posterior.mean.tobytes()
    assert back.log_sigma.tobytes() == toy_run.posterior.log_sigma.tobytes()
    assert POSTERIOR_NAMES[type(back)] == "isotropic-gaussian"
    np.testing.assert_allclose(back.std(), np.full(D, 0.3), rtol=1e-15)
    theta = back.sample(np.random.default_rng(0), 20_000)
    assert theta.shape == (20_000, D) and theta.flags.c_contiguous
    # 20 000 draws: the sample mean is within 4 standard errors (0.3 / sqrt(20 000) = 0.0021)
    np.testing.assert_allclose(theta.mean(axis=0), back.mean, rtol=0, atol=4 * 0.3 / np.sqrt(20_000))
    np.testing.assert_allclose(theta.std(axis=0), back.std(), rtol=0.02, atol=0)


def test_the_reader_checks_the_toy_kind_with_its_own_messages(isotropic, toy_run, tmp_path):
    path = tmp_path / "toy.h5"
    write_run(path, toy_run)
    with h5py.File(path, "r+") as f:
        del f["posterior/log_sigma"]
        f["posterior"].create_dataset("log_sigma", data=np.array([400.0]))
    with pytest.raises(FormatError, match=r"toy\.h5: /posterior/log_sigma must lie in \[-300, 300\]$"):
        read_run(path)


def test_without_its_registry_line_the_kind_is_refused_by_name(isotropic, toy_run, tmp_path, monkeypatch):
    path = tmp_path / "toy.h5"
    write_run(path, toy_run)
    monkeypatch.delitem(POSTERIORS, "isotropic")
    with pytest.raises(FormatError, match="/posterior has unknown encoding-type 'isotropic-gaussian'"):
        read_run(path)


def test_slang_evaluate_scores_a_run_of_the_toy_kind(isotropic, toy_run, tmp_path):
    path = tmp_path / "toy.h5"
    write_run(path, toy_run)
    done = CliRunner().invoke(main, ["evaluate", str(path), "--samples", "50", "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    # logistic regression: the quadrature predictive, from the kind's quadratic forms x^T Sigma x
    assert out["predictive"] == "quadrature"
    test = out["metrics"]["test"]
    assert test["n"] == 10 and np.isfinite(test["nll"]) and 0 <= test["accuracy"] <= 1
    assert np.isfinite(out["metrics"]["train"]["neg_elbo_per_example"])  # with the kind's KL to the prior
