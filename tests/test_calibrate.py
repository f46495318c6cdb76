"""``slang fit --calibrate F``: split-conformal intervals (regression) and prediction sets (classification).

The guarantee is tested where the posterior predictive's own intervals are far too narrow (a noise precision fixed
100 times too high): their 90 % coverage is near 0.2, the calibrated intervals' near 0.9. For n calibration rows the
coverage of new rows, conditional on the calibration rows, is Beta(k, n + 1 - k) with k = ceil((n + 1) c) (Vovk
2012); the test rows' coverage is then beta-binomial. Each test states the slack it allows below the level and checks
with scipy that a correct implementation falls below ``c - slack`` with probability under 1e-6 (``_false_failure``),
while the uncorrected intervals miss by far more than the slack.

Also: the quantile rule ceil((n + 1) c) on hand-worked numbers (with a level whose binary value would round it up),
the infinite case, that a fit without ``--calibrate`` is unchanged (values recorded from the code before the option
existed, and the same bits as a fit of the rows left), that the calibration rows are not trained on, that predict and
evaluate agree through the command line, the API, the estimator and the run file, and the refusals.
"""

from __future__ import annotations

import json
import math

import h5py
import numpy as np
import pytest
from scipy.stats import betabinom

import slangcli
from slangcli import SLANGRegressor
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError, DataError, Interrupted
from slangcli.predictive import conformal
from slangcli.runfile.io import FORMAT_VERSION, read_run, write_run
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import fit, resume

from test_cli import assert_error, assert_ok, invoke, parse_one_json_object


def _csv(path, X, y, names=None):
    """``X`` and ``y`` as a CSV file with a header row, the target last (numbers to 17 digits: read back exactly)."""
    names = names or [f"x{j}" for j in range(X.shape[1])]
    with open(path, "w") as f:
        f.write(",".join([*names, "y"]) + "\n")
        for x, t in zip(X, y):
            f.write(",".join([*(repr(float(v)) for v in x), str(t) if isinstance(t, str) else repr(float(t))]) + "\n")
    return path


def _false_failure(n: int, m: int, level: float, slack: float, above: bool = False) -> float:
    """The probability that split conformal with ``n`` calibration rows covers fewer than ``(level - slack) m`` of
    ``m`` test rows (with ``above``, or more than ``(level + slack) m``): the beta-binomial tails, for exchangeable
    rows and continuous scores (ties only raise the coverage, and make the upper tail heavier)."""
    k = conformal.rank(n, level)
    low = float(betabinom.cdf(math.ceil((level - slack) * m) - 1, m, k, n + 1 - k))
    return low + (float(betabinom.sf(math.floor((level + slack) * m), m, k, n + 1 - k)) if above else 0.0)


def _regression(n, seed):
    """A noisy linear rule: residual standard deviation 1 against a target standard deviation of about 1.4."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, X @ [1.0, -0.5] + rng.standard_normal(n)


def _classes(n, seed):
    """Three overlapping classes in two features."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    centres = np.array([[0.0, 0.0], [1.2, 0.0], [0.0, 1.2]])
    return centres[labels] + rng.standard_normal((n, 2)), np.array(["a", "b", "c"])[labels]


# ------------------------------------------------------------------------------------------------ the rule itself


def test_the_quantile_is_the_ceil_n_plus_1_c_th_smallest_score():
    scores = np.arange(1, 10) / 10.0  # n = 9: 0.1, ..., 0.9
    assert conformal.rank(9, 0.9) == 9 and conformal.quantile(scores, 0.9) == 0.9
    assert conformal.rank(9, 0.8) == 8 and conformal.quantile(scores, 0.8) == 0.8
    assert conformal.rank(9, 0.5) == 5 and conformal.quantile(scores, 0.5) == 0.5
    # (n + 1) c = 9.5: the 10th of 9 scores does not exist, so no finite interval has the guarantee
    assert conformal.rank(9, 0.95) == 10 and conformal.quantile(scores, 0.95) == math.inf
    assert conformal.least_rows(0.95) == 19 and conformal.least_rows(0.9) == 9
    assert conformal.rank(19, 0.95) == 19 and conformal.rank(18, 0.95) == 19
    # the level as written: 100 * 0.55 is 55.00000000000001 in binary, and ceil of it 56; the rule says 55
    assert 100 * 0.55 > 55 and conformal.rank(99, 0.55) == 55
    assert conformal.rank(24, 0.28) == 7


def test_intervals_and_sets_hand_worked():
    lower, upper = conformal.intervals(np.array([1.0, -2.0]), np.array([0.5, 2.0]), 1.5)
    np.testing.assert_array_equal(lower, [0.25, -5.0])
    np.testing.assert_array_equal(upper, [1.75, 1.0])
    lower, upper = conformal.intervals(np.array([1.0]), np.array([0.5]), math.inf)
    assert lower[0] == -math.inf and upper[0] == math.inf
    probs = np.array([[0.7, 0.2, 0.1], [0.4, 0.35, 0.25]])
    # q = 0.7: the classes with p_k >= 0.3
    np.testing.assert_array_equal(conformal.sets(probs, 0.7), [[1, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(conformal.sets(probs, math.inf), [[1, 1, 1], [1, 1, 1]])
    # the scores: |y - mean| / std_total, 1 - p(true class)
    calibration = {"n": 3, "scores": np.array([0.2, 0.5, 0.9])}
    out = conformal.coverage_metrics(slangcli.fit(np.eye(4), [0, 1, 0, 1], iterations=1).model, calibration,
                                     np.array([0.1, 0.6, 0.3, 0.95]), probs=np.array([[0.5, 0.5]] * 4),
                                     levels=(0.5,))
    # rank(3, 0.5) = 2: q = 0.5; scores <= 0.5: 2 of 4; every set {k : 1 - 0.5 <= 0.5} holds both classes
    assert out == {"calibrated_set_coverage": {"0.5": 0.5}, "calibrated_set_size": {"0.5": 2.0}, "calibration_n": 3,
                   "calibrated_infinite": []}


# ------------------------------------------------------------------------------------------------ the guarantee


@pytest.fixture(scope="module")
def narrow_regression(tmp_path_factory):
    """A linear regression whose noise precision is fixed 100 times too high (its noise standard deviation 0.1
    against the residuals' 0.6, on the standardised scale), fitted with --calibrate 0.5 on 4000 rows (2000
    calibration rows) and scored on 20000 test rows of the same distribution: its test RMSE is the noise's, 1."""
    directory = tmp_path_factory.mktemp("narrow")
    train, test = _csv(directory / "train.csv", *_regression(4000, 1)), _csv(directory / "test.csv", *_regression(
        20000, 2))
    run = directory / "run.h5"
    result = invoke("fit", train, "-o", run, "--test", test, "--method", "full-hessian", "--noise-precision", "100",
                    "--iterations", "300", "--batch-size", "100", "--eval-samples", "100", "--seed", "3",
                    "--calibrate", "0.5", "--json")
    assert_ok(result)
    return {"run": run, "train": train, "test": test, "fitted": parse_one_json_object(result.stdout),
            "stderr": result.stderr}


def test_calibrated_intervals_cover_where_the_bayesian_ones_do_not(narrow_regression):
    """n = 2000, m = 20000: the calibrated 90 % intervals' coverage is 0.9 within 0.04 (falling outside has
    probability 1e-7), the 95 % ones' 0.95 within 0.03 (2e-7); the posterior predictive's own are near 0.2 and
    0.25."""
    test = narrow_regression["fitted"]["metrics"]["test"]
    assert test["calibration_n"] == 2000 and test["n"] == 20000 and test["rmse"] < 1.05
    for level, slack in ((0.9, 0.04), (0.95, 0.03)):
        key = f"{level:g}"
        assert _false_failure(2000, 20000, level, slack, above=True) < 1e-6
        # the uncorrected intervals fail this test by far: it can tell a correction from none
        assert test["coverage"][key] < 0.35 < level - slack
        assert abs(test["calibrated_coverage"][key] - level) < slack, test
    assert "calibration rows (split conformal)" in narrow_regression["stderr"]


def test_calibrated_prediction_sets_cover(tmp_path):
    """Three overlapping classes, softmax regression: n = 1000 calibration rows, m = 6000 test rows; set coverage at
    least 0.9 - 0.055 and 0.95 - 0.045 (each missed with probability under 1e-6), sets of more than one class on
    average and larger at 0.95 than at 0.9; predict's sets are {k : 1 - p_k <= q} with the run's q."""
    train, test = _csv(tmp_path / "train.csv", *_classes(2000, 3)), _csv(tmp_path / "test.csv", *_classes(6000, 4))
    run = tmp_path / "run.h5"
    result = invoke("fit", train, "-o", run, "--test", test, "--iterations", "100", "--batch-size", "100",
                    "--eval-samples", "50", "--calibrate", "0.5", "--json")
    assert_ok(result)
    metrics = parse_one_json_object(result.stdout)["metrics"]["test"]
    for level, slack in ((0.9, 0.055), (0.95, 0.045)):
        assert _false_failure(1000, 6000, level, slack) < 1e-6
        assert metrics["calibrated_set_coverage"][f"{level:g}"] >= level - slack, metrics
    sizes = metrics["calibrated_set_size"]
    assert 1.0 < sizes["0.9"] < sizes["0.95"] <= 3.0
    stored = read_run(run)
    assert stored.calibration["score"] == "one_minus_true_class_probability"
    assert stored.calibration["scores"][0] >= 0 and stored.calibration["scores"][-1] <= 1

    out = tmp_path / "p.h5"
    result = invoke("predict", run, test, "-o", out, "--interval", "0.9", "--samples", "50", "--seed", "0")
    assert_ok(result)
    assert "calibrated 90% prediction set holds its true label with probability at least 0.9" in result.stderr
    with h5py.File(out, "r") as f:
        probs, sets, size = f["probabilities"][()], f["calibrated_set"][()], f["calibrated_set_size"][()]
    q = stored.calibration["scores"][conformal.rank(1000, 0.9) - 1]
    np.testing.assert_array_equal(sets, (1 - probs <= q).astype(int))
    np.testing.assert_array_equal(size, sets.sum(axis=1))
    csv_out = tmp_path / "p.csv"
    assert_ok(invoke("predict", run, test, "-o", csv_out, "--interval", "0.9", "--samples", "50"))
    header = csv_out.read_text().splitlines()[0].split(",")
    assert [h for h in header if h.startswith("calibrated")] == [
        "calibrated_set_90_a", "calibrated_set_90_b", "calibrated_set_90_c", "calibrated_set_size_90"]


def test_predict_writes_the_calibrated_interval_of_the_quantile_rule(narrow_regression, tmp_path):
    """Predictions of the regression run: ``calibrated_upper - mean = q std_total`` with q the ceil((n + 1) c)-th
    smallest stored score, at predict's --interval; the guarantee stated once with n."""
    stored = read_run(narrow_regression["run"])
    scores = stored.calibration["scores"]
    assert stored.calibration["n"] == 2000 and np.all(np.diff(scores) >= 0)
    out = tmp_path / "p.h5"
    result = invoke("predict", narrow_regression["run"], narrow_regression["test"], "-o", out, "--interval", "0.8",
                    "--samples", "100", "--seed", "3")
    assert_ok(result)
    lines = [line for line in result.stderr.splitlines() if "conformal" in line]
    assert len(lines) == 1 and "2000 calibration rows" in lines[0] and "at least 0.8" in lines[0]
    assert "Monte-Carlo difference" not in lines[0]  # the fit's own samples and seed
    q = scores[math.ceil(2001 * 0.8) - 1]
    with h5py.File(out, "r") as f:
        mean, std = f["mean"][()], f["std_total"][()]
        np.testing.assert_allclose(f["calibrated_upper"][()] - mean, q * std, rtol=1e-12)
        np.testing.assert_allclose(mean - f["calibrated_lower"][()], q * std, rtol=1e-12)
        assert f["calibrated_upper"].attrs["level"] == 0.8
    # another predictive than the calibration's is named as such
    result = invoke("predict", narrow_regression["run"], narrow_regression["test"], "-o", tmp_path / "q.csv",
                    "--samples", "20")
    assert_ok(result)
    assert "the guarantee holds up to their Monte-Carlo difference" in result.stderr


def test_evaluate_agrees_with_the_fit_and_the_api(narrow_regression):
    """evaluate with the fit's samples and seed gives the fit's calibrated coverage; FitResult.score on the same
    rows as arrays gives evaluate's."""
    result = invoke("evaluate", narrow_regression["run"], "--samples", "100", "--seed", "3", "--json")
    assert_ok(result)
    evaluated = parse_one_json_object(result.stdout)["metrics"]["test"]
    fitted = narrow_regression["fitted"]["metrics"]["test"]
    assert evaluated["calibrated_coverage"] == fitted["calibrated_coverage"]
    assert evaluated["calibrated_infinite"] == []  # enough calibration rows for both levels
    assert "coverage of calibrated 95% interval" in result.stderr
    assert "Monte-Carlo difference" not in result.stderr  # the fit's own samples and seed
    # by default evaluate uses the fit's samples and seed too: the same scores
    default = invoke("evaluate", narrow_regression["run"], "--json")
    assert parse_one_json_object(default.stdout)["metrics"]["test"] == evaluated
    assert (evaluated["rmse"], evaluated["loglik"]) == (fitted["rmse"], fitted["loglik"])
    # another predictive than the calibration's: it says so (the README promised it; only predict did)
    other = invoke("evaluate", narrow_regression["run"], "--samples", "1000", "--seed", "0")
    assert_ok(other)
    assert ("slang: calibrated coverage: the calibration scores used the fit's predictive (100 samples, seed 3) and "
            "these predictions 1000 samples, seed 0: the guarantee holds up to their Monte-Carlo difference "
            "(--samples 100 --seed 3 gives the fit's own)") in other.stderr
    X, y = _regression(20000, 2)
    loaded = slangcli.load(narrow_regression["run"])
    scored = loaded.score(X, y, samples=100, seed=3)
    assert scored["calibrated_coverage"] == evaluated["calibrated_coverage"]
    assert loaded.score(X, y) == scored


# ------------------------------------------------------------------------------------------------ what is trained


def test_the_calibration_rows_are_held_out_of_the_fit():
    """The rows held out are not trained on: the calibrated fit is, bit for bit, the fit of the rows left (as a
    fit without --calibrate), and records their number."""
    X, y = _regression(40, 5)
    kwargs = dict(hidden=3, iterations=12, seed=5, eval_samples=20, batch_size=8)
    calibrated = slangcli.fit(X, y, calibrate=0.25, **kwargs)
    index = calibrated.calibration["index"]
    assert calibrated.calibration["n"] == len(index) == 10 and calibrated.calibration["fraction"] == 0.25
    kept = np.setdiff1d(np.arange(40), index)
    alone = slangcli.fit(X[kept], y[kept], **kwargs)
    np.testing.assert_array_equal(calibrated.posterior.mean, alone.posterior.mean)
    assert calibrated.run.data["train"]["rows"] == 40 and calibrated.run.data["train"]["rows_used"] == 30
    assert calibrated.metrics["train"]["n"] == 30
    assert calibrated.config["calibrate"] == 0.25 and "calibrate" not in alone.config
    # another seed holds out other rows
    assert not np.array_equal(slangcli.fit(X, y, calibrate=0.25, **{**kwargs, "seed": 6}).calibration["index"],
                              index)


def test_a_split_holds_out_from_its_training_part(tmp_path):
    """With --test-fraction the calibration rows come from the split's training rows: the three parts are disjoint
    and cover the file, and /data/train_index lists the rows trained on."""
    train = _csv(tmp_path / "d.csv", *_regression(40, 6))
    run = tmp_path / "r.h5"
    assert_ok(invoke("fit", train, "-o", run, "--test-fraction", "0.25", "--calibrate", "0.2", "--iterations", "3",
                     "--eval-samples", "10"))
    stored = read_run(run)
    parts = [stored.arrays["train_index"], stored.arrays["test_index"], stored.calibration["index"]]
    assert [len(p) for p in parts] == [24, 10, 6]
    assert sorted(np.concatenate(parts).tolist()) == list(range(40))
    assert stored.data["train"]["rows_used"] == 24


def test_a_resumed_calibrated_fit_equals_the_uninterrupted_one(tmp_path):
    """A calibrated fit stopped part-way and resumed holds out the same rows again (from the stored seed and
    fraction) and ends in the same posterior, calibration and scores."""
    data = _csv(tmp_path / "d.csv", *_regression(60, 13))
    opts = DataOptions(path=str(data), test_fraction=0.25)
    kwargs = dict(hidden="3", batch_size=8, epochs=4, seed=5, eval_samples=20, calibrate=0.2)
    reference = fit(opts, **kwargs)
    written, polls = [], []
    stopping = Checkpointing(write=written.append, every_steps=5, stop=lambda: polls.append(1) or len(polls) > 7)
    with pytest.raises(Interrupted):
        fit(opts, **kwargs, checkpointing=stopping)
    path = tmp_path / "ck.h5"
    write_run(path, written[-1])
    resumed = resume(read_run(path), str(path))
    np.testing.assert_array_equal(resumed.posterior.mean, reference.posterior.mean)
    for name in ("scores", "index"):
        np.testing.assert_array_equal(resumed.calibration[name], reference.calibration[name])
    assert resumed.metrics["test"] == reference.metrics["test"] and resumed.config == reference.config


# values recorded from this fit before --calibrate existed (slang at 577418d)
BEFORE_ARRAYS = [0.3478416052530567, 2.1363046143889757, 0.0467764465642953, -1.164625758945903,
                 -2.0130084283409544, -0.5745790548194202, -0.7477757969510213, -0.5354241244113698,
                 -0.7017409885008171, 0.3825607547141762, -0.8475579721700552, -0.8611215348630398,
                 0.43383396510526534]
BEFORE_FILE = [0.4045426899194102, 0.7777663221871094, 0.2229241708246524, -0.8056183134420516,
               -0.9695646860263881, -0.42337636727583816, -0.662651212361713, 0.08114662129025908,
               -0.3216078323083, 0.22069935674194985, -0.7873248542158793, -0.25057214112837695,
               0.582894599226061]


def _before_data():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(30, 2))
    return X, X @ [1.0, -2.0] + 0.5 * np.sin(3 * X[:, 0]) + rng.normal(0, 0.3, 30)


def test_a_fit_without_calibrate_is_unchanged(tmp_path):
    """The posterior a fit without --calibrate gives is the one it gave before the option existed (to the last
    digits: 1e-9 leaves room for another BLAS's rounding, and none for another permutation, initialisation or set
    of rows), through the API and through a file with a --test-fraction split; its run file has no calibration.
    (With the defaults of then for the options that came later: the hidden biases' prior and the noise model.)"""
    X, y = _before_data()
    result = slangcli.fit(X, y, hidden=3, iterations=12, seed=5, eval_samples=20, batch_size=8,
                          hidden_bias_prior_precision=1e-5, noise_model="constant")
    np.testing.assert_allclose(result.posterior.mean, BEFORE_ARRAYS, rtol=1e-9)
    assert result.calibration is None and "calibrate" not in result.config
    assert result.run.data["train"]["rows_used"] == 30
    data = tmp_path / "g.csv"
    np.savetxt(data, np.column_stack([X, y]), fmt="%.17g", delimiter=",", header="a,b,y", comments="")
    run = tmp_path / "g.h5"
    assert_ok(invoke("fit", data, "-o", run, "--hidden", "3", "--iterations", "12", "--seed", "5", "--eval-samples",
                     "20", "--batch-size", "8", "--test-fraction", "0.25", "--hidden-bias-prior-precision", "1e-5",
                     "--noise-model", "constant"))
    stored = read_run(run)
    np.testing.assert_allclose(stored.posterior.mean, BEFORE_FILE, rtol=1e-9)
    assert stored.metrics["test"]["coverage"] == {"0.5": 0.625, "0.9": 1.0, "0.95": 1.0}
    assert not any(key.startswith("calibrat") for key in stored.metrics["test"])
    with h5py.File(run, "r") as f:
        assert "calibration" not in f and f.attrs["encoding-version"] == FORMAT_VERSION


# ------------------------------------------------------------------------------------------------ the doors


def test_csv_api_estimator_and_run_file_agree(tmp_path):
    """A calibrated fit through the API, saved: slang predict on a CSV of the same rows, FitResult.predict and
    SLANGRegressor.predict_interval (the same fit) give the same calibrated bounds; inspect shows the calibration."""
    X, y = _regression(60, 7)
    result = slangcli.fit(X, y, calibrate=0.3, iterations=20, seed=2, eval_samples=30)
    run = tmp_path / "api.h5"
    result.save(run)
    rows = _csv(tmp_path / "rows.csv", X[:15], y[:15])
    out = tmp_path / "p.csv"
    assert_ok(invoke("predict", run, rows, "-o", out, "--samples", "30", "--seed", "2", "--interval", "0.9"))
    table = np.genfromtxt(out, delimiter=",", names=True)
    api = result.predict(X[:15], samples=30, seed=2, interval=0.9)
    np.testing.assert_allclose(table["calibrated_lower_90"], api.calibrated_lower, rtol=1e-11)
    np.testing.assert_allclose(table["calibrated_upper_90"], api.calibrated_upper, rtol=1e-11)
    assert api.info["calibration"]["n"] == 18 and api.info["calibration"]["level"] == 0.9
    loaded = slangcli.load(run).predict(X[:15], samples=30, seed=2, interval=0.9)
    np.testing.assert_array_equal(loaded.calibrated_upper, api.calibrated_upper)
    lower, upper = _estimator_interval(X, y)
    assert lower.shape == upper.shape == (15,) and np.all(lower < upper)

    result_inspect = invoke("inspect", run, "--json")
    assert_ok(result_inspect)
    shown = parse_one_json_object(result_inspect.stdout)["calibration"]
    assert shown["n"] == 18 and shown["fraction"] == 0.3 and set(shown["quantiles"]) == {"0.9", "0.95"}
    assert shown["quantiles"]["0.95"] is None  # 18 rows: too few for 95 % (19)
    text = invoke("inspect", run)
    assert_ok(text)
    assert "calibrated 18 rows held out (--calibrate 0.3, seed 2)" in text.stderr


def _estimator_interval(X, y):
    """SLANGRegressor(calibrate=0.3).predict_interval equals its result_'s calibrated bounds."""
    estimator = SLANGRegressor(calibrate=0.3, random_state=2, predict_samples=30, epochs=2)
    estimator.fit(X, y)
    lower, upper = estimator.predict_interval(X[:15], level=0.9)
    p = estimator.result_.predict(X[:15], samples=30, seed=2, interval=0.9)
    np.testing.assert_array_equal(lower, p.calibrated_lower)
    np.testing.assert_array_equal(upper, p.calibrated_upper)
    with pytest.raises(ValueError, match="predict_interval needs a fit with calibrate=F"):
        SLANGRegressor(epochs=1).fit(X, y).predict_interval(X)
    return lower, upper


def test_too_few_calibration_rows_give_infinite_intervals_and_say_so(tmp_path):
    """8 calibration rows: ceil(9 x 0.95) = 9 > 8, so the calibrated 95 % bounds are infinite, and predict says
    why; at 0.8 (rank 8) they are finite."""
    data = _csv(tmp_path / "d.csv", *_regression(40, 8))
    run = tmp_path / "r.h5"
    fitted = invoke("fit", data, "-o", run, "--calibrate", "0.2", "--iterations", "3", "--eval-samples", "10")
    assert_ok(fitted)
    assert read_run(run).calibration["n"] == 8
    # the fit warns at once; evaluate marks the levels whose coverage of 1 is that of -inf..inf
    too_few = ("8 calibration rows are too few for finite calibrated intervals at 90% (9 rows) and 95% (19 rows): "
               "they are -inf to inf, and their coverage of 1 says nothing")
    assert f"slang: warning: {too_few} (a larger --calibrate, or more rows, gives finite ones)" in fitted.stderr
    evaluated = invoke("evaluate", run, data, "--json")
    assert_ok(evaluated)
    test = parse_one_json_object(evaluated.stdout)["metrics"]["test"]
    assert test["calibrated_infinite"] == ["0.9", "0.95"] and test["calibrated_coverage"] == {"0.9": 1.0, "0.95": 1.0}
    assert f"slang: calibrated coverage: {too_few}" in evaluated.stderr
    assert "coverage of calibrated 95% interval (infinite)" in evaluated.stderr
    with pytest.warns(UserWarning, match="too few for finite calibrated intervals"):
        slangcli.fit(*_regression(40, 8), calibrate=0.2, iterations=3, eval_samples=10)
    out = tmp_path / "p.csv"
    result = invoke("predict", run, data, "-o", out)
    assert_ok(result)
    assert "8 calibration rows are too few for a finite calibrated 95% interval with a guarantee (that takes at " \
           "least 19): its bounds are -inf and inf" in result.stderr
    table = np.genfromtxt(out, delimiter=",", names=True)
    assert np.all(table["calibrated_lower_95"] == -np.inf) and np.all(table["calibrated_upper_95"] == np.inf)
    result = invoke("predict", run, data, "-o", tmp_path / "q.csv", "--interval", "0.8")
    assert_ok(result)
    assert np.all(np.isfinite(np.genfromtxt(tmp_path / "q.csv", delimiter=",", names=True)["calibrated_upper_80"]))


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.2", "nan"])
def test_calibrate_outside_zero_one_is_a_usage_error(tmp_path, value):
    data = _csv(tmp_path / "d.csv", *_regression(20, 9))
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--calibrate", value)
    assert_error(result, 2, "--calibrate")
    assert not (tmp_path / "r.h5").exists()


def test_calibrate_outside_zero_one_is_refused_in_python():
    X, y = _regression(20, 9)
    for value in (0, 1, 1.5):
        with pytest.raises(ConfigError, match="^calibrate must lie strictly between 0 and 1"):
            slangcli.fit(X, y, calibrate=value)
    with pytest.raises(ValueError, match="calibrate must lie strictly between 0 and 1"):
        SLANGRegressor(calibrate=1.0).fit(X, y)
    # not a number: the type is what is wrong, not the range (a string said "must lie strictly between")
    for value in (True, "0.2"):
        with pytest.raises(ConfigError, match="^calibrate must be a number strictly between 0 and 1, got "):
            slangcli.fit(X, y, calibrate=value)
    with pytest.raises(ValueError, match=r"calibrate'\] must be a number|calibrate must be a number"):
        SLANGRegressor(calibrate="0.2").fit(X, y)


@pytest.mark.parametrize("fraction, says", [("0.01", "holds out 0 and trains on 20"),
                                            ("0.99", "holds out 20 and trains on 0")])
def test_too_few_rows_for_either_side(tmp_path, fraction, says):
    data = _csv(tmp_path / "d.csv", *_regression(20, 9))
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--calibrate", fraction)
    assert_error(result, 1, f"d.csv: --calibrate {fraction} of 20 training rows {says}",
                 "split conformal needs at least 1 row on each side")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]
    with pytest.raises(DataError, match=f"X: calibrate {fraction} of 20 training rows {says}"):
        slangcli.fit(*_regression(20, 9), calibrate=float(fraction))


def test_a_label_only_among_the_calibration_rows_is_refused(tmp_path):
    X, labels = _classes(30, 10)
    # a row seed 0 holds out (the first 6 of stream 8's permutation): the only one with its label
    labels = labels.astype(object)
    labels[np.random.default_rng([0, 8]).permutation(30)[0]] = "rare"
    data = _csv(tmp_path / "d.csv", X, labels)
    result = invoke("fit", data, "-o", tmp_path / "r.h5", "--calibrate", "0.2", "--iterations", "2")
    assert_error(result, 1, "the label 'rare' is among the rows --calibrate holds out but not among the training "
                            "rows left")


@pytest.fixture(scope="module")
def calibrated_file(tmp_path_factory):
    directory = tmp_path_factory.mktemp("calibrated")
    data = _csv(directory / "d.csv", *_regression(40, 11))
    run = directory / "r.h5"
    assert_ok(invoke("fit", data, "-o", run, "--test-fraction", "0.25", "--calibrate", "0.3", "--iterations", "3",
                     "--eval-samples", "10"))
    return run


def _set_summary(key, value):
    def change(g):
        summary = json.loads(g.attrs["summary"])
        summary[key] = value
        g.attrs["summary"] = json.dumps(summary)
    return change


def _replace(name, make):
    def change(g):
        values = make(g[name][()])
        del g[name]
        g.create_dataset(name, data=values)
    return change


CORRUPTIONS = {
    "unsorted scores": (_replace("scores", lambda s: s[::-1].copy()), "/calibration/scores must be sorted ascending"),
    "negative score": (_replace("scores", lambda s: s - s[-1] - 1), "/calibration/scores must be sorted ascending"),
    "non-finite score": (_replace("scores", lambda s: np.r_[s[:-1], np.inf]),
                         "/calibration/scores holds non-finite values"),
    "too few scores": (_replace("scores", lambda s: s[:-1]), "/calibration/scores has shape"),
    "no index": (lambda g: g.__delitem__("index"), "missing dataset /calibration/index"),
    "repeated row": (_replace("index", lambda i: np.r_[i[:-1], i[0]]), "/calibration/index must list 9 distinct rows"),
    "a trained row": (lambda g: _replace("index", lambda i: np.r_[i[:-1], g.file["data/train_index"][0]])(g),
                      "/calibration/index and /data/train_index share 1 row(s)"),
    "a row beyond": (_replace("index", lambda i: np.r_[i[:-1], 40]), "/calibration/index must list 9 distinct rows"),
    "another task's score": (_set_summary("score", "one_minus_true_class_probability"),
                             "/calibration attribute 'summary' lacks 'score'"),
    "fraction 1": (_set_summary("fraction", 1), "lacks 'fraction'"),
    "n not a count": (_set_summary("n", "6"), "lacks 'n'"),
    "no summary": (lambda g: g.attrs.__delitem__("summary"), "/calibration lacks the 'summary' attribute"),
    "wrong type": (lambda g: g.attrs.__setitem__("encoding-type", "metrics"),
                   "/calibration has encoding-type 'metrics', expected 'calibration'"),
    "newer major version": (lambda g: g.attrs.__setitem__("encoding-version", "2.0"),
                            "written by slang file format 2.0 (/calibration)"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_a_corrupted_calibration_group_is_one_line_naming_file_and_object(calibrated_file, tmp_path, case):
    change, says = CORRUPTIONS[case]
    path = tmp_path / "bad.h5"
    path.write_bytes(calibrated_file.read_bytes())
    with h5py.File(path, "r+") as f:
        change(f["calibration"])
    for command in (["evaluate", path], ["inspect", path], ["predict", path, "x.csv", "-o", tmp_path / "o.csv"]):
        assert_error(invoke(*command), 1, f"{path}: ", says)
    assert not (tmp_path / "o.csv").exists()


def test_a_file_of_format_1_4_reads_as_before(tmp_path):
    """An uncalibrated run whose groups say 1.4 (as slang wrote them before) reads and predicts; a 1.5 file without
    /calibration is an uncalibrated run."""
    X, y = _regression(20, 12)
    run = tmp_path / "old.h5"
    slangcli.fit(X, y, iterations=2, eval_samples=5).save(run)
    with h5py.File(run, "r+") as f:
        f.visit(lambda name: f[name].attrs.__setitem__("encoding-version", "1.4")
                if "encoding-version" in f[name].attrs else None)
        f.attrs["encoding-version"] = "1.4"
    data = _csv(tmp_path / "d.csv", X, y)
    result = invoke("predict", run, data, "-o", tmp_path / "p.csv")
    assert_ok(result)
    assert "conformal" not in result.stderr
    assert "calibrated" not in (tmp_path / "p.csv").read_text().splitlines()[0]
    assert read_run(run).calibration == {}


def test_a_mixture_of_members_is_calibrated_with_the_mixture_predictive():
    """--members and --calibrate together: the stored scores are those of the mixture's predictive (the one predict
    uses), on the held-out rows, and the members trained on the other rows."""
    X, y = _regression(60, 7)
    kwargs = dict(hidden=3, iterations=15, seed=2, eval_samples=40, batch_size=8)
    result = slangcli.fit(X, y, calibrate=0.25, members=2, **kwargs)
    assert result.posterior.n_members == 2
    index = result.calibration["index"]
    out = result.predict(X[index], samples=40, seed=2)
    np.testing.assert_allclose(result.calibration["scores"], np.sort(np.abs(y[index] - out.mean) / out.std_total),
                               rtol=1e-12)
    kept = np.setdiff1d(np.arange(60), index)
    alone = slangcli.fit(X[kept], y[kept], members=2, **kwargs)
    for a, b in zip(result.posterior.members, alone.posterior.members):
        np.testing.assert_array_equal(a.mean, b.mean)
