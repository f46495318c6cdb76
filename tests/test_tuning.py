"""``--tune``: k-fold cross-validation on the training rows only, reproducible, stored with the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import binary_problem, csv_text

import slangcli
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError
from slangcli.training import tuning
from slangcli.training.fitting import fit


def _regression_csv(write_file, name, n, seed, test_shift=0.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 * rng.standard_normal(n) + test_shift
    lines = ["a,b,y"] + [f"{a:.6f},{b:.6f},{t:.6f}" for (a, b), t in zip(X, y)]
    return write_file(name, "\n".join(lines) + "\n")


KW = dict(method="slang", hyper={"rank": 1, "samples": 2}, batch_size=10, epochs=3, seed=4, eval_samples=20,
          likelihood="gaussian", noise_precision=1.0, tune="prior-precision,noise-precision", tune_folds=3)


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


@pytest.mark.parametrize("likelihood,sizes", [("bernoulli", (3, 4, 1)), ("categorical", (3, 4, 3)),
                                              ("gaussian", (3, 4, 1)), ("bernoulli", (3, 1))])
def test_a_candidates_score_is_the_predictive_of_slang_evaluate(likelihood, sizes):
    """A fold's held-out score is what ``slang evaluate`` reports for its posterior on those rows with
    ``SCORE_SAMPLES`` weight samples: the one predictive (``predict.classify``, ``metrics.regression_scores``), not a
    second implementation. A classifier's is scored on evaluate's draws for the same seed; a regression's on the
    fold's own stream (the one the UCI protocol's searches were recorded with), which evaluate takes as well."""
    from slangcli.gaussian.posteriors import DiagonalGaussian
    from slangcli.models import MLP
    from slangcli.predictive import metrics
    from slangcli.predictive.evaluation import score

    rng = np.random.default_rng(3)
    model = MLP(sizes, likelihood=likelihood, noise_precision=4.0)
    posterior = DiagonalGaussian(mean=rng.standard_normal(model.n_params), log_sigma=np.full(model.n_params, -1.0))
    X = rng.standard_normal((25, 3))
    y = X[:, 0] if likelihood == "gaussian" else rng.integers(0, sizes[-1] if sizes[-1] > 1 else 2, 25)
    got = tuning.heldout_loglik(model, posterior, X, y, seed=11, rng=np.random.default_rng(5))
    if likelihood == "gaussian":
        scores = metrics.regression_scores(posterior, model, X, y, samples=tuning.SCORE_SAMPLES,
                                           rng=np.random.default_rng(5))
    else:
        scores = score(model, posterior, None, X_train=None, y_train=None, X_test=X, y_test=y,
                       samples=tuning.SCORE_SAMPLES, seed=11)["test"]
    # (to rounding: evaluate sets its BLAS threads for the size; other draws would differ in the second digit)
    assert got == pytest.approx(scores["loglik"] if likelihood == "gaussian" else -scores["nll"], rel=1e-12)


# ------------------------------------------------------------------------------------ a stop request reaches tuning


def _stop_after(polls: int):
    """A stop request that turns true at its ``polls``-th poll; ``calls`` counts the polls."""
    calls = []

    def stop():
        calls.append(1)
        return len(calls) >= polls

    stop.calls = calls
    return stop


@pytest.mark.parametrize("kw,says", [
    # the search's SLANG fits run stacked (slangcli.methods.slang_stacked)
    (dict(method="slang", hidden="4", tune="prior-precision", likelihood="bernoulli"), "while tuning"),
    # one fit per candidate (train.run)
    (dict(method="bbb", hidden="4", tune="prior-precision,lr", likelihood="bernoulli"), "while tuning"),
    # regression learns the noise precision (auto) before the search, by a fit on every training row
    (dict(method="slang", hyper={"rank": 1}, tune="prior-precision", likelihood="gaussian", noise_precision="auto"),
     "learns the precisions"),
])
def test_a_stop_request_interrupts_tuning_within_a_step(write_file, kw, says):
    """The fit's stop request (its signal handler's) is polled after every step of every fit the search runs: the
    search raises Interrupted a step after it turns true, instead of finishing and stopping the final fit."""
    from slangcli.errors import Interrupted
    from slangcli.training.checkpoints import Checkpointing

    train = _regression_csv(write_file, "train.csv", 60, seed=5)
    if kw["likelihood"] == "bernoulli":
        train = write_file("train.csv", csv_text(*binary_problem(n=60, seed=5)))
    stop = _stop_after(25)
    written = []
    with pytest.raises(Interrupted) as info:
        fit(DataOptions(path=str(train)), batch_size=10, epochs=30, seed=1, tune_folds=3, eval_samples=10,
            checkpointing=Checkpointing(write=written.append, stop=stop), **kw)
    assert says in str(info.value) and "not checkpointed" in info.value.hint
    assert not info.value.checkpointed and not written
    assert len(stop.calls) <= 27, len(stop.calls)  # a poll or two after the stop, not the rest of the search


def test_a_search_stopped_between_rounds_raises(write_file):
    """A stop request already true before the search starts: nothing is trained."""
    from slangcli.errors import Interrupted
    from slangcli.methods import METHODS
    from slangcli.models import MLP

    model = MLP((2, 1), likelihood="gaussian")
    X = np.random.default_rng(0).standard_normal((30, 2))
    with pytest.raises(Interrupted, match="after 0 candidates scored"):
        tuning.search(tuning.Search(("prior-precision",), folds=3), values={"prior-precision": 1.0,
                      "noise-precision": 1.0}, build=lambda v: (model, model.prior_precision(v["prior-precision"],
                      1e-5)), method=METHODS["slang"], hyper=METHODS["slang"].Hyper(rank=1), X=X, y=X[:, 0],
                      seed=0, batch_size=10, epochs=2, stop=lambda: True)


# the command line: a signal during --tune exits 128 + its number within about a second, leaving nothing


def _slang(args, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "slangcli", *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _read_until(proc, text: str, timeout: float = 120) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no line with {text!r}: " + "".join(seen))


@pytest.mark.parametrize("sig,args,wait_for", [
    # one fit per candidate; the signal after the first round's progress lines, with two rounds and the final
    # fit still to run (about as long again as the first round)
    (signal.SIGTERM, ["--method", "bbb", "--tune", "prior-precision,lr", "--tune-rounds", "1", "--epochs", "300"],
     "slang: tuning "),
    # stacked SLANG fits; the signal in the first round
    (signal.SIGINT, ["--tune", "prior-precision", "--epochs", "150"], "slang: change the task"),
], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_tune_exits_at_once(tmp_path, sig, args, wait_for):
    (tmp_path / "data.csv").write_text(csv_text(*binary_problem(n=200, seed=1)))
    proc = _slang(["fit", "data.csv", "-o", "out.h5", "--hidden", "8", "--no-progress", *args], tmp_path)
    seen = _read_until(proc, wait_for)
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + sig, seen + err
    assert took < 4.0, (took, err)  # the rest of the search takes several times that
    assert "interrupted while tuning" in err and "nothing written" in err and "not checkpointed" in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


def test_the_tuned_values_said_give_the_same_fit_again():
    """The note said 'tuned --prior-precision 0.00316228' (six digits): a fit with the value as said was another
    posterior. Every digit is said now, and that fit is the tuned one, bit for bit."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=80) > 0).astype(int)
    said = []
    tuned = slangcli.fit(X, y, epochs=3, tune="prior-precision", tune_folds=2, tune_epochs=1, notify=said.append)
    (line,) = [s for s in said if s.startswith("tuned ")]
    flag, value = line.split()[1:]
    assert flag == "--prior-precision" and value == repr(float(value))
    again = slangcli.fit(X, y, epochs=3, prior_precision=float(value))
    np.testing.assert_array_equal(again.posterior.mean, tuned.posterior.mean)
