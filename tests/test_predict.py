"""Predictive uncertainty (``slangcli.predictive.predict``, ``slangcli.predictive.mixture``) and calibration (``slangcli.predictive.metrics``).

The decompositions are checked against direct computations on the same weight samples (drawn again from
``metrics.weight_samples``, then pushed through the network in one pass with ``scipy.stats.entropy``): the code under
test accumulates over sample chunks and row blocks, the reference does neither. Mixture quantiles are checked
against the CDF at the returned point and against quantiles of draws from the mixture; ECE and coverage against
hand-worked examples.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats

from slangcli.data.sources import load_inputs
from slangcli.errors import DataError
from slangcli.gaussian.posteriors import DiagonalGaussian, FullGaussian, LowRankGaussian
from slangcli.gaussian.quadrature import bernoulli_entropy, expect_bernoulli_entropy, expect_sigmoid
from slangcli.models import MLP
from slangcli.predictive import metrics
from slangcli.predictive import mixture
from slangcli.predictive import predict as P
from slangcli.predictive.tables import percent
from slangcli.predictive.evaluation import evaluate, predict

from conftest import binary_problem, csv_text


def _posterior(kind: str, D: int, seed: int = 0, scale: float = 0.3):
    """A posterior of each kind with a random mean and a covariance of size about ``scale^2``."""
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(D)
    if kind == "lowrank":
        return LowRankGaussian(mean=mean, U=rng.standard_normal((D, 3)) / scale, d=np.full(D, 1.0 / scale**2))
    if kind == "diagonal":
        return DiagonalGaussian(mean=mean, log_sigma=np.log(scale * rng.uniform(0.5, 1.5, D)))
    A = rng.standard_normal((D, D))
    return FullGaussian.from_precision(mean, (A @ A.T / D + np.eye(D)) / scale**2)


def _all_samples(posterior, seed, samples):
    return np.concatenate(list(metrics.weight_samples(posterior, seed, samples)))


# ------------------------------------------------------------------------------------------------ quadrature


@pytest.mark.parametrize("m", [-30.0, -4.0, 0.0, 0.7, 6.0])
@pytest.mark.parametrize("s", [0.05, 1.0, 2.0, 2.5, 10.0, 80.0])
def test_expected_bernoulli_entropy_matches_adaptive_quadrature(m, s):
    def integrand(f):
        return bernoulli_entropy(f) * scipy.stats.norm.pdf(f, m, s)

    # split at the entropy's peak and at the Gaussian's, where adaptive quadrature needs the points
    points = sorted({0.0, m})
    expected = scipy.integrate.quad(integrand, m - 40 * s, m + 40 * s, points=points, epsabs=1e-14, limit=400)[0]
    np.testing.assert_allclose(expect_bernoulli_entropy(np.array([m]), np.array([s * s]))[0], expected,
                               rtol=0, atol=1e-11)


def test_bernoulli_entropy_is_the_entropy_of_the_sigmoid_and_stays_finite():
    f = np.array([-800.0, -40.0, -3.0, 0.0, 2.0, 40.0, 800.0])
    p = scipy.special.expit(f)
    direct = scipy.special.entr(p) + scipy.special.entr(1 - p)
    got = bernoulli_entropy(f)
    np.testing.assert_allclose(got[2:5], direct[2:5], rtol=1e-13)
    np.testing.assert_allclose(got[[0, 6]], 0.0, atol=1e-300)
    # symmetric, and the tails keep their digits (1 - p would round to 1 at f = 40)
    np.testing.assert_array_equal(bernoulli_entropy(-f), got)
    np.testing.assert_allclose(got[1], 41 * np.exp(-40.0), rtol=1e-12)
    np.testing.assert_allclose(bernoulli_entropy(np.array([0.0])), np.log(2.0), rtol=1e-15)


# ------------------------------------------------------------------------------------------------ classification


@pytest.mark.parametrize("likelihood,outputs", [("categorical", 3), ("bernoulli", 1)])
@pytest.mark.parametrize("kind", ["lowrank", "diagonal", "full"])
def test_classification_decomposition_matches_direct_monte_carlo(likelihood, outputs, kind):
    model = MLP((4, 5, outputs), activation="tanh", likelihood=likelihood)
    posterior = _posterior(kind, model.n_params)
    X = np.random.default_rng(1).standard_normal((23, 4)) * 2.0
    # 150 samples: two full chunks of 64 and a partial one
    got = P.classify(posterior, model, X, samples=150, seed=7)
    assert got["predictive"] == "mc"

    theta = _all_samples(posterior, 7, 150)
    assert theta.shape == (150, model.n_params)
    f = model.forward(theta, X)[0]
    if likelihood == "bernoulli":
        p1 = scipy.special.expit(f[..., 0])
        p = np.stack([1.0 - p1, p1], axis=-1)
    else:
        p = scipy.special.softmax(f, axis=-1)
    probs = p.mean(axis=0)
    total = scipy.stats.entropy(probs, axis=-1)
    aleatoric = scipy.stats.entropy(p, axis=-1).mean(axis=0)

    np.testing.assert_allclose(got["probs"], probs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got["entropy_total"], total, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got["entropy_aleatoric"], aleatoric, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got["entropy_epistemic"], total - aleatoric, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(got["entropy_total"], got["entropy_aleatoric"] + got["entropy_epistemic"],
                               rtol=1e-13, atol=1e-15)
    assert (got["entropy_epistemic"] >= 0).all()
    assert (got["entropy_total"] <= np.log(p.shape[-1]) + 1e-12).all()
    # a wide posterior on inputs of size 2: the samples disagree, so the epistemic part is far from zero
    assert got["entropy_epistemic"].max() > 0.05


def test_classification_is_the_same_whatever_the_chunking(monkeypatch):
    model = MLP((4, 6, 3), activation="relu", likelihood="categorical")
    posterior = _posterior("lowrank", model.n_params, seed=2)
    X = np.random.default_rng(3).standard_normal((17, 4))
    whole = P.classify(posterior, model, X, samples=70, seed=1)
    # row chunks of one example: metrics.row_chunks splits a forward pass at ACTIVATION_BUDGET activations
    monkeypatch.setattr(metrics, "ACTIVATION_BUDGET", 1)
    chunked = P.classify(posterior, model, X, samples=70, seed=1)
    for name in ("probs", "entropy_total", "entropy_aleatoric", "entropy_epistemic"):
        np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-13, atol=1e-15)


def test_seed_decides_the_samples():
    model = MLP((4, 5, 3), activation="tanh", likelihood="categorical")
    posterior = _posterior("diagonal", model.n_params)
    X = np.random.default_rng(1).standard_normal((5, 4))
    a, b = (P.classify(posterior, model, X, samples=20, seed=s)["probs"] for s in (4, 4))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, P.classify(posterior, model, X, samples=20, seed=5)["probs"])


@pytest.mark.parametrize("kind", ["lowrank", "diagonal", "full"])
def test_inputs_whose_logit_variance_overflows_get_the_limit_of_the_predictive(kind):
    """A row scaled by 1e155 and more: its logit's variance overflows. A full or diagonal posterior then predicted
    p = 0.5 with exit 0, a low-rank one NaN (refused). The predictive tends to Phi(m / sqrt(v)), which is scale
    free: the probabilities at 1e200 equal those at 1e150, where nothing overflows, and at 1e300."""
    model = MLP((3, 1), likelihood="bernoulli")
    posterior = _posterior(kind, model.n_params, scale=1.5)
    x = np.array([[1.0, -0.5, 2.0], [-3.0, 1.0, 0.1]])
    at = {e: P.classify(posterior, model, x * 10.0**e)["probs"] for e in (150, 200, 300)}
    m, v = metrics.logit_moments(posterior, x * 1e150)
    assert np.isfinite(v).all()
    np.testing.assert_allclose(at[150][:, 1], scipy.stats.norm.cdf(m / np.sqrt(v)), rtol=1e-12)
    for e in (200, 300):
        np.testing.assert_allclose(at[e], at[150], rtol=1e-12)
    assert not np.allclose(at[150][:, 1], 0.5)


@pytest.mark.parametrize("kind", ["lowrank", "diagonal", "full"])
def test_logistic_regression_uses_quadrature_and_agrees_with_sampled_logits(kind):
    """The quadrature split equals, within Monte-Carlo error, the split estimated from 200 000 draws of the
    Gaussian logit ``f ~ N(m, v)`` (a one-dimensional check of the whole route, for every posterior kind)."""
    model = MLP((3, 1), likelihood="bernoulli")
    posterior = _posterior(kind, model.n_params, scale=1.5)
    X = np.array([[0.0, 0.0, 0.0], [1.0, -0.5, 2.0], [3.0, 1.0, -1.0]])
    got = P.classify(posterior, model, X)
    assert got["predictive"] == "quadrature"
    m, v = metrics.logit_moments(posterior, X)
    f = m + np.sqrt(v) * np.random.default_rng(0).standard_normal((200_000, 1))
    p1 = scipy.special.expit(f).mean(axis=0)
    aleatoric = bernoulli_entropy(f).mean(axis=0)
    np.testing.assert_allclose(got["probs"][:, 1], p1, atol=3e-3)
    np.testing.assert_allclose(got["entropy_aleatoric"], aleatoric, atol=3e-3)
    np.testing.assert_allclose(got["probs"].sum(axis=1), 1.0, rtol=1e-12)
    assert (got["entropy_epistemic"] >= 0).all()


def test_logistic_regression_probabilities_equal_evaluate(fitted_run, tmp_path):
    """predict's probabilities are evaluate's quadrature probabilities, bit for bit, and give its test NLL."""
    data = tmp_path / "new.csv"
    data.write_text(csv_text(*binary_problem(n=30, seed=5, offset=5.0, scale=3.0)))
    X, target, _, _ = load_inputs(fitted_run, str(data))
    m, v = metrics.logit_moments(fitted_run.posterior, X)
    expected = np.column_stack([expect_sigmoid(-m, v), expect_sigmoid(m, v)])  # the exact predictive
    got = predict(fitted_run, "run.h5", str(data))
    np.testing.assert_array_equal(got.arrays["probabilities"], expected)

    scores = evaluate(fitted_run, "run.h5", str(data))
    codes = (got.arrays["target"] == "yes").astype(int)
    nll = -np.mean(np.log(got.arrays["probabilities"][np.arange(len(codes)), codes]))
    np.testing.assert_allclose(nll, scores["test"]["nll"], rtol=1e-13)
    assert got.info["predictive"] == "quadrature" and got.info["samples"] is None


# ------------------------------------------------------------------------------------------------ regression


def test_regression_split_matches_the_sample_moments(monkeypatch):
    model = MLP((3, 6, 1), activation="tanh", likelihood="gaussian", noise_precision=2.0)
    posterior = _posterior("lowrank", model.n_params, seed=4)
    X = np.random.default_rng(5).standard_normal((11, 3))
    # a row block of 3 examples: the samples are drawn again for each block and must be the same every time
    monkeypatch.setattr(P, "BLOCK_BUDGET", 3 * 130)
    got = P.regress(posterior, model, X, samples=130, seed=2, level=0.9, target_mean=10.0, target_scale=3.0)

    f = 10.0 + 3.0 * model.forward(_all_samples(posterior, 2, 130), X)[0][..., 0]  # (S, N), original units
    aleatoric = 3.0 / np.sqrt(2.0)
    np.testing.assert_allclose(got["mean"], f.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(got["std_epistemic"], f.std(axis=0), rtol=1e-10)
    np.testing.assert_allclose(got["std_aleatoric"], aleatoric, rtol=1e-15)
    np.testing.assert_allclose(got["std_total"] ** 2, aleatoric**2 + f.var(axis=0), rtol=1e-12)

    # the total variance is that of draws from the mixture (4000 noise draws per weight sample): seeded, with a
    # tolerance of about five standard errors of a variance estimate from 520 000 draws
    draws = f[None] + aleatoric * np.random.default_rng(6).standard_normal((4000, *f.shape))
    draws = draws.reshape(-1, f.shape[1])
    np.testing.assert_allclose(got["std_total"] ** 2, draws.var(axis=0), rtol=0.01)
    np.testing.assert_allclose(got["mean"], draws.mean(axis=0), atol=0.02)

    # the interval is the mixture's, in original units
    sigma = aleatoric
    np.testing.assert_allclose(mixture.cdf(got["lower"], f, sigma), 0.05, atol=1e-13)
    np.testing.assert_allclose(mixture.cdf(got["upper"], f, sigma), 0.95, atol=1e-13)


@pytest.mark.parametrize("kind", ["lowrank", "diagonal", "full"])
def test_linear_regression_epistemic_variance_is_the_posterior_quadratic_form(kind):
    """Without a hidden layer ``f = x~^T theta``, so the epistemic variance is ``x~^T Sigma x~``: a check of the
    sampling route for every posterior kind (4000 samples, seeded; relative standard error about 2 %)."""
    model = MLP((3, 1), likelihood="gaussian", noise_precision=4.0)
    posterior = _posterior(kind, model.n_params, seed=1)
    X = np.random.default_rng(2).standard_normal((6, 3))
    got = P.regress(posterior, model, X, samples=4000, seed=0)
    _, v = metrics.logit_moments(posterior, X)
    np.testing.assert_allclose(got["std_epistemic"] ** 2, v, rtol=0.1)
    np.testing.assert_allclose(got["std_aleatoric"], 0.5, rtol=1e-15)


# ------------------------------------------------------------------------------------------------ data without target


def test_targetless_file_whose_header_names_the_target_is_refused(fitted_run, write_file):
    # the run was trained on a, b, c -> label; this file has lost column c and kept the label
    missing = write_file("m.csv", "a,b,label\n1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match=r"m\.csv:1: column 'c' is missing \(the model's 3 features are 'a', 'b', "
                                        r"'c'\)$"):
        load_inputs(fitted_run, str(missing))
    # other header names are not taken by position: columns are matched by name, so they are refused, naming both
    renamed = write_file("r.csv", "p,q,r\n1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match=r"r\.csv:1: columns 'a', 'b', 'c' are missing \(the model's 3 features are "
                                        r"'a', 'b', 'c'; its other columns: 'p', 'q', 'r'\)$"):
        load_inputs(fitted_run, str(renamed))


def test_interval_columns_are_named_by_their_level_in_percent():
    """A level of 0.999999999999 named its columns lower_100 and upper_100."""
    assert [percent(c) for c in (0.95, 0.5, 0.999, 0.999999999999)] == ["95", "50", "99.9", "99.9999999999"]


def test_a_many_class_predictive_holds_its_softmax_within_the_budget(monkeypatch):
    """The rows of a forward pass were chunked by the widest layer alone; a 200-class model's softmax holds some
    seven arrays of samples x rows x classes, and scoring 200 rows peaked at about 1 GB, 7 times the budget. The
    chunks now count those temporaries (here the budget made 2 MB: the peak stays within twice it)."""
    import tracemalloc

    monkeypatch.setattr(metrics, "ACTIVATION_BUDGET", 1 << 18)
    model = MLP((10, 200), likelihood="categorical")
    rng = np.random.default_rng(0)
    posterior = DiagonalGaussian.from_precision(rng.normal(size=model.n_params), np.full(model.n_params, 4.0))
    X = rng.normal(size=(300, 10))
    tracemalloc.start()
    try:
        got = P.classify(posterior, model, X, samples=64, seed=0, predictive="mc")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 8 * metrics.ACTIVATION_BUDGET + got["probs"].nbytes * 3, peak
    np.testing.assert_allclose(got["probs"].sum(axis=1), 1.0, rtol=1e-12)


def test_passes_of_weight_draws_report_their_progress_and_draw_the_same():
    """Within ``scoring_progress`` each pass of weight draws reports the draws done, chunk by chunk, then None;
    its draws are those drawn without it, bit for bit (the display must not change a score)."""
    from slangcli.gaussian.posteriors import DiagonalGaussian
    from slangcli.predictive import metrics

    q = DiagonalGaussian(mean=np.arange(3.0), log_sigma=np.zeros(3))
    plain = np.concatenate(list(metrics.weight_samples(q, 7, 150)))
    calls = []

    def start(total):
        calls.append(("start", total))
        return calls.append

    with metrics.scoring_progress(start):
        shown = np.concatenate(list(metrics.weight_samples(q, 7, 150)))
        list(metrics._sample_chunks(q, np.random.default_rng(0), 70))
    np.testing.assert_array_equal(shown, plain)
    assert calls == [("start", 150), 64, 128, 150, None, ("start", 70), 64, 70, None]
    list(metrics.weight_samples(q, 7, 150))  # outside the context: nothing reported
    assert len(calls) == 9


def test_the_bar_shows_a_pass_of_weight_draws_only_once_it_is_slow(monkeypatch):
    from slangcli.cli import output

    with output.progress_bar(True, "fit") as bar:
        monkeypatch.setattr(output, "SCORING_DELAY", 3600.0)
        report = bar.scoring(100)
        report(50)
        assert bar._progress.tasks == []  # a quick pass: no bar
        report(None)
        monkeypatch.setattr(output, "SCORING_DELAY", 0.0)
        report = bar.scoring(100)
        report(50)
        (task,) = bar._progress.tasks
        assert task.total == 100 and task.completed == 50
        report(None)
        assert bar._progress.tasks == []
