"""Calibration metrics (``slangcli.predictive.metrics``): the expected calibration error of classification and the coverage of
central predictive intervals of regression, on hand-worked examples, and as ``slang evaluate`` and ``slang fit``
report them.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.models import MLP
from slangcli.predictive import metrics
from slangcli.predictive import mixture
from slangcli.runfile.io import read_run

from conftest import binary_problem, csv_text
from test_cli import FAST, assert_error, assert_ok, invoke, parse_one_json_object


def test_ece_hand_worked():
    """Five binary examples, five bins (0, .2], (.2, .4], (.4, .6], (.6, .8], (.8, 1]:

    p(y=1)   0.9   0.7   0.3   0.55  0.95
    y        1     0     0     1     1
    conf     0.9   0.7   0.7   0.55  0.95      (largest probability)
    correct  1     0     1     1     1         (prediction 1, 1, 0, 1, 1)
    bin      5     4     4     3     5

    bin 3: n = 1, conf 0.55,  acc 1    -> 1/5 * 0.45  = 0.09
    bin 4: n = 2, conf 0.70,  acc 0.5  -> 2/5 * 0.20  = 0.08
    bin 5: n = 2, conf 0.925, acc 1    -> 2/5 * 0.075 = 0.03
    ECE = 0.20
    """
    p1 = np.array([0.9, 0.7, 0.3, 0.55, 0.95])
    probs = np.column_stack([1 - p1, p1])
    y = np.array([1, 0, 0, 1, 1])
    out = metrics.calibration(probs, y, bins=5)
    np.testing.assert_allclose(out["ece"], 0.20, rtol=1e-12)
    cal = out["calibration"]
    np.testing.assert_allclose(cal["edges"], [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], rtol=1e-15)
    assert cal["bins"] == 5 and cal["count"] == [0, 0, 1, 2, 2]
    assert cal["confidence"][:2] == [None, None] and cal["accuracy"][:2] == [None, None]
    np.testing.assert_allclose(cal["confidence"][2:], [0.55, 0.7, 0.925], rtol=1e-12)
    np.testing.assert_allclose(cal["accuracy"][2:], [1.0, 0.5, 1.0], rtol=1e-15)
    # one bin: |accuracy - mean confidence| = |4/5 - 3.8/5| = 0.04
    np.testing.assert_allclose(metrics.calibration(probs, y, bins=1)["ece"], 0.04, rtol=1e-12)


def test_coverage_hand_worked():
    """Two weight samples f = -1, +1 and unit noise: F(y) = (Phi(y + 1) + Phi(y - 1)) / 2.

    y      F(y)                                     inside 50 %   90 %   95 %   (|F - 1/2| <= c/2)
    0      0.5                                      yes           yes    yes
    2      (Phi(3) + Phi(1)) / 2     = 0.91999      no            yes    yes
    3      (Phi(4) + Phi(2)) / 2     = 0.98861      no            no     no
    -1.5   (Phi(-0.5) + Phi(-2.5))/2 = 0.15738      no            yes    yes

    coverage: 50 % -> 1/4, 90 % -> 3/4, 95 % -> 3/4
    """
    y = np.array([0.0, 2.0, 3.0, -1.5])
    f = np.array([[-1.0] * 4, [1.0] * 4])
    pit = mixture.cdf(y, f, 1.0)
    np.testing.assert_allclose(pit, [0.5, 0.91999, 0.98861, 0.15738], atol=1e-5)
    assert metrics.coverage(pit) == {"0.5": 0.25, "0.9": 0.75, "0.95": 0.75}


def test_coverage_equals_the_fraction_inside_the_quantile_interval():
    rng = np.random.default_rng(3)
    f = rng.standard_normal((200, 300)) * rng.uniform(0.1, 2.0, 300) + rng.standard_normal(300)
    y = rng.standard_normal(300) * 2.0
    sigma = 0.6
    pit = mixture.cdf(y, f, sigma)
    got = metrics.coverage(pit, levels=(0.5, 0.9))
    for c in (0.5, 0.9):
        lower, upper = mixture.quantile((1 - c) / 2, f, sigma), mixture.quantile((1 + c) / 2, f, sigma)
        assert got[f"{c:g}"] == np.mean((lower <= y) & (y <= upper))


def test_regression_scores_report_coverage():
    model = MLP((3, 4, 1), activation="tanh", likelihood="gaussian", noise_precision=1.0)
    rng = np.random.default_rng(3)
    posterior = DiagonalGaussian(mean=rng.standard_normal(model.n_params), log_sigma=np.full(model.n_params, -1.5))
    X = np.random.default_rng(0).standard_normal((50, 3))
    y = model.forward(posterior.mean[None], X)[0][0, :, 0] + np.random.default_rng(1).standard_normal(50)
    out = metrics.regression_scores(posterior, model, X, y, samples=200, rng=np.random.default_rng(2))
    cov = out["coverage"]
    assert list(cov) == ["0.5", "0.9", "0.95"]
    assert 0.0 <= cov["0.5"] <= cov["0.9"] <= cov["0.95"] <= 1.0
    assert cov["0.95"] > 0.8  # the targets were drawn from (about) this predictive


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run files fitted through the CLI (2 epochs, 25 % test split): ``lr`` logistic regression on 40 binary rows,
    ``reg`` a 4-unit regression network on 40 rows of a smooth target."""
    d = tmp_path_factory.mktemp("calibration")
    data = d / "data.csv"
    data.write_text(csv_text(*binary_problem(seed=0)))
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 3))
    y = 20.0 + 5.0 * np.sin(X[:, 0]) + X[:, 1] + 0.3 * rng.standard_normal(40)
    reg = d / "reg.csv"
    reg.write_text("a,b,c,y\n" + "".join(",".join(f"{v:.6f}" for v in (*x, t)) + "\n" for x, t in zip(X, y)))
    out = {}
    network = ["--hidden", "4", "--method", "slang", "--likelihood", "gaussian", "--eval-samples", "50"]
    for name, source, extra in (("lr", data, []), ("reg", reg, network)):
        out[name] = d / f"{name}.h5"
        assert_ok(invoke("fit", source, "-o", out[name], *FAST, "--test-fraction", "0.25", *extra))
    return out


def test_evaluate_reports_ece_and_its_bins(runs):
    result = invoke("evaluate", runs["lr"], "--bins", "10", "--json")
    assert_ok(result)
    test = parse_one_json_object(result.stdout)["metrics"]["test"]
    cal = test["calibration"]
    assert cal["bins"] == 10 and len(cal["edges"]) == 11 and len(cal["count"]) == 10
    assert sum(cal["count"]) == test["n"] == 10
    assert 0.0 <= test["ece"] <= 1.0
    # the ECE is the count-weighted gap of the listed bins
    gaps = [n * abs(a - c) for n, a, c in zip(cal["count"], cal["accuracy"], cal["confidence"]) if n]
    np.testing.assert_allclose(test["ece"], sum(gaps) / test["n"], rtol=1e-12)
    assert "ECE (10 bins)" in result.stderr and "mean confidence" in result.stderr
    assert_error(invoke("evaluate", runs["lr"], "--bins", "0"), 2)


def test_fit_stores_calibration(runs):
    assert read_run(runs["lr"]).metrics["test"]["calibration"]["bins"] == 15
    coverage = read_run(runs["reg"]).metrics["test"]["coverage"]
    assert list(coverage) == ["0.5", "0.9", "0.95"]


def test_evaluate_reports_regression_coverage(runs):
    result = invoke("evaluate", runs["reg"], "--samples", "100", "--json")
    assert_ok(result)
    coverage = parse_one_json_object(result.stdout)["metrics"]["test"]["coverage"]
    assert set(coverage) == {"0.5", "0.9", "0.95"}
    assert 0.0 <= coverage["0.5"] <= coverage["0.9"] <= coverage["0.95"] <= 1.0
    assert "coverage of 90% interval" in result.stderr
