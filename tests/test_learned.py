"""Learned noise and prior precisions (slangcli.training.learned): the closed-form updates are the ELBO's optima, they
recover the truth on Bayesian linear regression, and a fit that learns them resumes bit for bit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slangcli.data.prepare import prepare
from slangcli.data.sources import DataOptions
from slangcli.errors import ConfigError, Interrupted
from slangcli.gaussian.posteriors import DiagonalGaussian, FullGaussian
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.runfile.io import read_run, write_run
from slangcli.training import learned
from slangcli.training.checkpoints import Checkpointing
from slangcli.training.fitting import _planned_precisions, fit, fit_prepared, resume


def test_squared_residual_inverts_the_gaussian_nll():
    rng = np.random.default_rng(0)
    f, y = rng.standard_normal((3, 7, 1)), rng.standard_normal(7)
    for tau in (0.3, 1.0, 250.0):
        model = MLP((2, 1), likelihood="gaussian", noise_precision=tau)
        nll, _ = model.nll_and_delta(f, y)
        assert learned.squared_residual(float(nll.mean()), tau) == pytest.approx(np.mean((f[..., 0] - y) ** 2),
                                                                                 rel=1e-12)


def test_noise_optimum_maximises_the_expected_log_likelihood():
    s = 0.37  # E_q[r^2] per example
    tau = learned.noise_optimum(s)
    elbo = lambda t: 0.5 * math.log(t) - 0.5 * t * s  # noqa: E731  (per example, up to constants)
    assert tau == pytest.approx(1 / s)
    assert elbo(tau) > elbo(tau * 1.01) and elbo(tau) > elbo(tau / 1.01)


@pytest.mark.parametrize("kind", ["diagonal", "full"])
def test_prior_optimum_is_the_minimum_of_the_kl_per_weight_matrix(kind):
    model = MLP((3, 4, 1), likelihood="gaussian")
    rng = np.random.default_rng(1)
    D = model.n_params
    mean = rng.standard_normal(D)
    if kind == "diagonal":
        q = DiagonalGaussian(mean=mean, log_sigma=rng.normal(-1, 0.3, D))
    else:
        A = rng.standard_normal((D, D))
        q = FullGaussian.from_precision(mean, A @ A.T + D * np.eye(D))
    problem = Problem(model, model.prior_precision(1.0, 1e-5), 10)
    best = learned.prior_optimum(q.mean, q.marginal_variances(), model)
    tuned = learned.with_weight_precisions(problem, best)
    kl = q.kl_to_prior(tuned.prior_precision)
    # the ELBO depends on the prior only through -KL: each layer's precision is a stationary minimum
    for layer in range(2):
        for factor in (0.98, 1.02):
            moved = best.copy()
            moved[layer] *= factor
            assert q.kl_to_prior(learned.with_weight_precisions(problem, moved).prior_precision) > kl
    # biases keep their precision
    bias = model.layout.bias_mask()
    np.testing.assert_array_equal(tuned.prior_precision[bias], problem.prior_precision[bias])


def _blr(n=1500, p=4, sd=0.5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.3 + sd * rng.standard_normal(n)
    return X, y


def _em_fixed_point(X, y, bias_precision=1e-5, rounds=500):
    """The exact variational EM fixed point of Bayesian linear regression (q the exact Gaussian posterior):
    tau = N / E_q[sum r^2], lambda = P / E_q[|w|^2], alternated to convergence."""
    N, P = X.shape
    Xb = np.hstack([X, np.ones((N, 1))])
    tau, lam = 1.0, 1.0
    gram, xy = Xb.T @ Xb, Xb.T @ y
    for _ in range(rounds):
        cov = np.linalg.inv(tau * gram + np.diag([lam] * P + [bias_precision]))
        mu = tau * cov @ xy
        r2 = np.sum((y - Xb @ mu) ** 2) + np.sum(cov * gram)
        tau, lam = N / r2, P / (np.sum(mu[:P] ** 2) + np.trace(cov[:P, :P]))
    return tau, lam


def _noise_optimum_at(posterior, X, y):
    """``N / E_q[sum r^2]`` of a linear model's posterior on ``(X, y)``, densely."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    cov = posterior.cov_times(np.eye(Xb.shape[1]))
    return len(X) / (np.sum((y - Xb @ posterior.mean) ** 2) + np.einsum("nd,de,ne->", Xb, cov, Xb))


@pytest.mark.parametrize("method,hyper", [("full-ef", {}), ("slang", {"rank": 2}), ("bbb", {}), ("ivon", {})])
def test_learned_precisions_recover_bayesian_linear_regression(method, hyper):
    X, y = _blr()
    prepared = prepare(X, y, likelihood="gaussian")
    y_std = (y - y.mean()) / y.std()
    tau_em, lam_em = _em_fixed_point(X, y_std)
    true_tau = y.std() ** 2 / 0.5**2  # the generating noise on the standardised scale
    run = fit_prepared(prepared, method=method, hyper=hyper, noise_precision="auto", prior_precision="auto",
                       epochs=15, batch_size=50, eval_samples=20)
    tau = run.model.noise_precision
    assert tau == pytest.approx(true_tau, rel=0.1)
    assert tau == pytest.approx(tau_em, rel=0.05)
    assert run.history["prior_precision"][-1, 0] == pytest.approx(lam_em, rel=0.1)
    # the trajectory is stored, one record per epoch; the run's model carries the optimum at the final posterior
    assert run.history["noise_precision"].shape == (15,)
    assert tau == pytest.approx(_noise_optimum_at(run.posterior, X, y_std), rel=1e-10)
    assert run.config["learned"] == {"given": {"noise_precision": "auto", "prior_precision": "auto"},
                                     "noise_precision": True, "prior_precision": True}
    np.testing.assert_array_equal(run.prior_precision[:4], run.history["prior_precision"][-1, 0])


def test_run_file_keeps_the_trajectory(tmp_path):
    X, y = _blr(n=200)
    np.savetxt(tmp_path / "d.csv", np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    run = fit(DataOptions(path=str(tmp_path / "d.csv")), likelihood="gaussian", method="mf-ef",
              noise_precision="auto", prior_precision="auto", epochs=3, batch_size=50, eval_samples=20)
    write_run(tmp_path / "r.h5", run)
    back = read_run(tmp_path / "r.h5")
    for name in ("learned_step", "noise_precision", "prior_precision"):
        np.testing.assert_array_equal(back.history[name], run.history[name])
    assert back.model.noise_precision == run.model.noise_precision


def test_exact_solver_learns_the_prior_by_variational_em():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, 3))
    y = (X @ np.array([1.5, -1.0, 0.5]) + 0.5 * rng.standard_normal(300) > 0).astype(float)
    run = fit_prepared(prepare(X, y), method="exact-mf", prior_precision="auto", eval_samples=20)
    q = run.posterior
    lam = learned.prior_optimum(q.mean, q.marginal_variances(), run.model)
    assert lam[0] == pytest.approx(run.prior_precision[0], rel=1e-3)
    assert run.metrics["solver"]["prior_rounds"] > 1


def test_auto_is_refused_for_the_bias_and_nonsense_is_refused():
    X, y = _blr(n=50)
    prepared = prepare(X, y, likelihood="gaussian")
    with pytest.raises(ConfigError, match="--bias-prior-precision"):
        fit_prepared(prepared, bias_prior_precision="auto", epochs=1)
    with pytest.raises(ConfigError, match="--noise-precision must be positive and finite or auto"):
        fit_prepared(prepared, noise_precision="often", epochs=1)
    # held to the range of the prior precisions, as a run file holds them: at 1e300 the fit failed in a
    # linear-algebra routine and the message blamed --lr, at 1e-300 it exited 0 blaming its length
    for value in (1e300, 1e-300):
        with pytest.raises(ConfigError, match=r"^--noise-precision must lie between 1e-150 and 1e\+150"):
            fit_prepared(prepared, noise_precision=value, epochs=1)


@pytest.mark.parametrize("method,hyper", [("slang", {"rank": 2}), ("bbb", {}), ("ivon", {})])
@pytest.mark.parametrize("stop_after", [7, 16])  # 8 steps per epoch
def test_resume_with_learned_precisions_is_bit_exact(tmp_path, method, hyper, stop_after):
    X, y = _blr(n=80, seed=4)
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    opts = DataOptions(path=str(data), test_fraction=0.2)
    kw = dict(method=method, hyper=dict(hyper, samples=3), hidden="4", likelihood="gaussian", batch_size=8,
              epochs=5, seed=5, eval_samples=20, noise_precision="auto", prior_precision="auto")
    reference = fit(opts, **kw)
    written, polls = [], []
    with pytest.raises(Interrupted):
        fit(opts, **kw, checkpointing=Checkpointing(write=written.append, every_steps=5,
                                                    stop=lambda: polls.append(1) or len(polls) > stop_after))
    write_run(tmp_path / "ck.h5", written[-1])
    resumed = resume(read_run(tmp_path / "ck.h5"), str(tmp_path / "ck.h5"))
    assert resumed.model.noise_precision == reference.model.noise_precision
    np.testing.assert_array_equal(resumed.prior_precision, reference.prior_precision)
    np.testing.assert_array_equal(resumed.posterior.mean, reference.posterior.mean)
    for name in ("nll", "learned_step", "noise_precision", "prior_precision"):
        np.testing.assert_array_equal(resumed.history[name], reference.history[name], err_msg=name)


def test_tune_starts_from_the_learned_values():
    X, y = _blr(n=120, seed=6)
    notes = []
    run = fit_prepared(prepare(X, y, likelihood="gaussian"), method="mf-ef", noise_precision="auto",
                       prior_precision="auto", epochs=3, batch_size=20, eval_samples=20, tune="noise-precision",
                       tune_folds=2, notify=notes.append)
    learned_note = [n for n in notes if n.startswith("learned before tuning")]
    assert learned_note
    start = float(learned_note[0].split("noise precision ")[1].split(",")[0])
    grid = run.config["tuning"]["grids"]["noise-precision"]
    assert any(abs(v - start) <= 1e-3 * start for v in grid)
    # the tuned noise precision is fixed in the final fit; the prior precision goes on being learned
    assert run.config["learned"]["noise_precision"] is False and run.config["learned"]["prior_precision"] is True
    assert "noise_precision" not in run.history and "prior_precision" in run.history


def test_noise_warmup_takes_tau_from_the_posterior_mean_then_from_em():
    """During a network's warm-up tau is the residual precision of the posterior mean on the training rows, set at
    each epoch end (its initial value before the first), whatever the sampled residuals say; after the warm-up the
    EM update takes over from the sampled residuals, starting its average afresh."""
    from types import SimpleNamespace

    rng = np.random.default_rng(3)
    model = MLP((2, 3, 1), likelihood="gaussian", noise_precision=1.0)
    X, y = rng.standard_normal((12, 2)), rng.standard_normal(12)
    mu = 0.3 * rng.standard_normal(model.n_params)
    method = SimpleNamespace(posterior=lambda state: SimpleNamespace(mean=mu))
    learner = learned.Learner(Problem(model, model.prior_precision(1.0, 1.0), 12), noise=True, window=4, warmup=8,
                              data=(X, y))
    f, _ = model.forward(mu[None], X)
    of_mean = 1 / np.mean((f[0, :, 0] - y) ** 2)
    assert abs(of_mean - 1) > 0.1
    for t in range(1, 9):  # sampled residuals of a wide q: the EM update would give tau ~ 0.01
        learner.after_step(method, SimpleNamespace(t=t), {"nll": 50.0}, epoch_end=t % 4 == 0, record=False)
        assert learner.problem.model.noise_precision == (1.0 if t < 4 else pytest.approx(of_mean, rel=1e-12))
    learner.after_step(method, SimpleNamespace(t=9), {"nll": 0.7}, epoch_end=False, record=False)
    assert learner.problem.model.noise_precision == pytest.approx(1 / learned.squared_residual(0.7, of_mean))


def test_noise_warmup_is_a_tenth_of_a_network_fit(monkeypatch):
    """A network's fit warms up for a tenth of its steps (its learner takes tau from the posterior mean at the warm-up's
    epoch ends, over the training rows); a linear model (one optimum) and a solver do not; a fit that does not learn
    its noise precision has no warm-up."""
    assert learned.warmup_steps(MLP((3, 5, 1), likelihood="gaussian"), 1200) == 120
    assert learned.warmup_steps(MLP((3, 1), likelihood="gaussian"), 1200) == 0
    assert learned.warmup_steps(MLP((3, 5, 1), likelihood="gaussian"), None) == 0
    model = MLP((3, 5, 1), likelihood="gaussian")
    problem = Problem(model, model.prior_precision(1.0, 1.0), 10)
    assert learned.Learner(problem, noise=False, warmup=5, data=(np.zeros((10, 3)), np.zeros(10))).warmup == 0
    calls = []

    def mean_residual(model, mean, X, y):
        calls.append(len(X))
        return 0.01 * len(calls)

    monkeypatch.setattr(learned, "mean_residual", mean_residual)
    X, y = _blr(n=100, seed=8)
    run = fit_prepared(prepare(X, y, likelihood="gaussian"), method="slang", hyper={"rank": 1, "samples": 2},
                       hidden="5", noise_precision="auto", epochs=20, batch_size=10, eval_samples=20)
    # 20 epochs of 10 steps: the first two are the warm-up, tau set at their ends from the training rows' residuals
    assert calls == [100, 100]
    np.testing.assert_allclose(run.history["noise_precision"][:2], [100.0, 50.0])
    assert run.history["noise_precision"][2] != 50.0
    linear = fit_prepared(prepare(X, y, likelihood="gaussian"), method="slang", hyper={"rank": 1, "samples": 2},
                          noise_precision="auto", epochs=3, batch_size=10, eval_samples=20)
    assert calls == [100, 100] and linear.history["noise_precision"].shape == (3,)


def test_a_network_fit_gives_its_hidden_biases_their_own_prior():
    """``--hidden-bias-prior-precision`` (default 0.1) on the hidden layers' biases, ``--bias-prior-precision`` on
    the output's; a checkpoint recorded before the option existed resumes with its hidden biases at the output's."""
    X, y = _blr(n=60)
    prepared = prepare(X, y, likelihood="gaussian")
    run = fit_prepared(prepared, hidden=(3,), epochs=1, eval_samples=4)
    hidden, out = run.model.layout.layers
    np.testing.assert_array_equal(run.prior_precision[hidden.b], 0.1)
    np.testing.assert_array_equal(run.prior_precision[out.b], 1e-5)
    np.testing.assert_array_equal(run.prior_precision[hidden.W], 1.0)
    assert run.config["hidden_bias_prior_precision"] == 0.1
    given = fit_prepared(prepared, hidden=(3,), epochs=1, eval_samples=4, hidden_bias_prior_precision=7.0)
    np.testing.assert_array_equal(given.prior_precision[hidden.b], 7.0)

    config = {k: v for k, v in run.config.items() if k != "hidden_bias_prior_precision"}
    older = replace(run, config=config)
    _, lam = _planned_precisions(older, "old.h5")
    np.testing.assert_array_equal(lam[hidden.b], 1e-5)
    _, lam = _planned_precisions(run, "new.h5")
    np.testing.assert_array_equal(lam, run.prior_precision)


def test_a_network_stores_the_noise_optimum_at_its_final_posterior():
    # the running estimate of the last steps follows the minibatches' noise; the stored tau is N / E_q[sum r^2]
    # at the final posterior, here from 50 draws, against 4 000 draws of the same posterior
    X, y = _blr(n=300, p=3, sd=0.4, seed=3)
    y = y + 0.5 * np.sin(3 * X[:, 0])
    prepared = prepare(X, y, likelihood="gaussian")
    run = fit_prepared(prepared, method="slang", hyper={"rank": 2}, hidden=(8,), noise_precision="auto",
                       noise_model="constant", epochs=30, batch_size=32, eval_samples=20)
    y_std = (y - y.mean()) / y.std()
    theta = run.posterior.sample(np.random.default_rng(7), 4000)
    residual = np.mean((run.model.forward(theta, X)[0][..., 0] - y_std) ** 2)
    assert run.model.noise_precision == pytest.approx(1.0 / residual, rel=0.02)
    assert run.model.noise_precision == run.history["noise_precision"][-1]  # the last record is the value kept
    assert run.model.noise_precision != run.history["noise_precision"][-2]
