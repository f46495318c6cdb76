"""``--tune``: k-fold cross-validation on the training rows only, reproducible, stored with the run."""

from __future__ import annotations

import numpy as np
import pytest

from slangcli import tuning
from slangcli.errors import ConfigError
from slangcli.workflow import DataOptions, fit


def _regression_csv(write_file, name, n, seed, test_shift=0.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 * rng.standard_normal(n) + test_shift
    lines = ["a,b,y"] + [f"{a:.6f},{b:.6f},{t:.6f}" for (a, b), t in zip(X, y)]
    return write_file(name, "\n".join(lines) + "\n")


KW = dict(method="slang", hyper={"rank": 1, "samples": 2}, batch_size=10, epochs=3, seed=4, eval_samples=20,
          likelihood="gaussian", tune="prior-precision,noise-precision", tune_folds=3)


def test_tuning_never_reads_test_rows(write_file):
    """The same training file with two very different test files: identical search, identical choice."""
    train = _regression_csv(write_file, "train.csv", 45, seed=1)
    test_a = _regression_csv(write_file, "test_a.csv", 20, seed=2)
    test_b = _regression_csv(write_file, "test_b.csv", 20, seed=3, test_shift=50.0)
    runs = [fit(DataOptions(path=str(train), test=str(t)), **KW) for t in (test_a, test_b)]
    assert runs[0].config["tuning"] == runs[1].config["tuning"]
    assert runs[0].metrics["test"]["rmse"] != runs[1].metrics["test"]["rmse"]  # the test data did differ
    record = runs[0].config["tuning"]
    assert record["best"]["noise-precision"] == runs[0].model.noise_precision
    assert runs[0].config["prior_precision"] == record["best"]["prior-precision"]
    n_candidates = len(tuning.GRIDS["prior-precision"]) + len(tuning.GRIDS["noise-precision"]) - 1
    # the sweeps, then two midpoints per precision
    assert n_candidates <= len(record["candidates"]) <= n_candidates + 2 * 2
    best = max(record["candidates"], key=lambda c: c["mean_loglik"])
    assert best["values"] == {**best["values"], **record["best"]}


def test_tuning_chooses_the_noise_level_of_the_data(write_file):
    """Targets with noise std 0.3 (tau ~ 1 / 0.09 / var(y) on the standardised scale, about 10): the search
    must not end at either edge of the noise grid."""
    train = _regression_csv(write_file, "train.csv", 60, seed=5)
    run = fit(DataOptions(path=str(train)), **dict(KW, tune="noise-precision", epochs=20))
    tau = run.model.noise_precision
    grid = tuning.GRIDS["noise-precision"]
    assert grid[0] < tau < grid[-1], tau


def test_folds_partition_the_training_rows():
    folds = tuning.fold_indices(23, 4, seed=1)
    assert sorted(np.concatenate(folds).tolist()) == list(range(23))
    assert [len(f) for f in folds] == [6, 6, 6, 5]
    assert all(np.array_equal(a, b) for a, b in zip(folds, tuning.fold_indices(23, 4, seed=1)))


@pytest.mark.parametrize("text,likelihood,message", [
    ("temperature", "gaussian", "unknown hyperparameter"),
    ("noise-precision", "bernoulli", "regression"),
    ("prior-precision,prior-precision", "gaussian", "twice"),
])
def test_bad_tune_options(text, likelihood, message):
    with pytest.raises(ConfigError, match=message):
        tuning.parse_tune(text, likelihood)


def test_too_many_folds():
    with pytest.raises(ConfigError, match="--tune-folds"):
        tuning.fold_indices(5, 6, seed=0)
