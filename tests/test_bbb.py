"""Bayes by Backprop (``slangcli.methods.bbb``).

- For fixed noise ``eps`` the reparameterised objective ``F_eps(mu, log_sigma) = c sum_si NLL_i(mu + sigma eps_s)
  + KL(q || prior)`` is a deterministic function whose gradient ``bbb.gradient`` must return exactly: checked by
  central differences along random directions, for an MLP with each likelihood.
- Unbiasedness at a known optimum: for Bayesian linear regression (Gaussian likelihood with noise precision tau,
  prior precision lambda) the mean-field optimum is known in closed form. With ``P = tau X~^T X~ + diag(lambda)``
  the expected negative log joint is the quadratic ``(theta - mu*)^T P (theta - mu*) / 2 + const``, so
  ``-ELBO(m, s) = (m - mu*)^T P (m - mu*) / 2 + sum_j P_jj s_j^2 / 2 - sum_j log s_j + const``, minimised by
  ``m = mu* = P^{-1} tau X~^T y`` (the exact posterior mean) and ``s_j^2 = 1 / P_jj``. There the gradient estimates
  average to zero; at a point off the optimum they do not (negative control).
- Recovery: Adam on minibatch estimates reaches that optimum (iterate average, statistical tolerance).
- One Adam step by hand, and a smoke run of an MLP through the training loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli import streams
from slangcli.errors import ConfigError
from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods import METHODS, bbb
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.training import loop as train

N, P, TAU = 200, 3, 4.0


def _linear_regression(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    y = X @ np.array([1.0, -0.5, 0.3]) + 0.2 + rng.standard_normal(N) / np.sqrt(TAU)
    model = MLP((P, 1), likelihood="gaussian", noise_precision=TAU)
    problem = Problem(model, model.prior_precision(1.0, 0.5), N)
    Xb = np.hstack([X, np.ones((N, 1))])
    prec = TAU * Xb.T @ Xb + np.diag(problem.prior_precision)
    mu_star = np.linalg.solve(prec, TAU * Xb.T @ y)
    return problem, X, y, mu_star, -0.5 * np.log(np.diag(prec))


def _state(mu, log_sigma):
    D = mu.size
    return bbb.State(mu=mu, log_sigma=log_sigma, m=np.zeros((2, D)), v=np.zeros((2, D)), t=0)


def _objective(problem, X, y, mu, log_sigma, eps):
    """``F_eps``: the minibatch estimate of -ELBO at fixed noise, written from its definition."""
    c = problem.n_data / (X.shape[0] * eps.shape[0])
    lam = problem.prior_precision
    theta = mu + np.exp(log_sigma) * eps
    var = np.exp(2 * log_sigma)
    kl = 0.5 * np.sum(lam * var + lam * mu**2 - 1.0 - np.log(lam * var))
    return c * problem.model.nll(theta, X, y).sum() + kl


@pytest.mark.parametrize("likelihood", ["bernoulli", "categorical", "gaussian"])
def test_gradient_is_the_pathwise_derivative(likelihood):
    rng = np.random.default_rng(1)
    k = 3 if likelihood == "categorical" else 1
    model = MLP((3, 5, k), "tanh", likelihood, noise_precision=2.0)
    D = model.n_params
    problem = Problem(model, model.prior_precision(1.5, 0.3), 50)
    X = rng.standard_normal((8, 3))
    y = {"bernoulli": rng.integers(0, 2, 8).astype(float), "categorical": rng.integers(0, 3, 8),
         "gaussian": rng.standard_normal(8)}[likelihood]
    mu, log_sigma = 0.5 * rng.standard_normal(D), rng.uniform(-2.0, -0.5, D)
    eps = rng.standard_normal((4, D))
    grad, nll = bbb.gradient(_state(mu, log_sigma), eps, problem, X, y)
    np.testing.assert_allclose(nll, model.nll(mu + np.exp(log_sigma) * eps, X, y), rtol=1e-14, atol=0)
    h = 1e-6
    for _ in range(3):
        v = rng.standard_normal((2, D))
        numeric = (_objective(problem, X, y, mu + h * v[0], log_sigma + h * v[1], eps)
                   - _objective(problem, X, y, mu - h * v[0], log_sigma - h * v[1], eps)) / (2 * h)
        analytic = float(np.sum(grad * v))
        assert analytic == pytest.approx(numeric, rel=1e-7, abs=1e-7), (analytic, numeric)


def _mean_gradient(problem, X, y, mu, log_sigma, n_batches=40, samples=100, seed=2):
    """Mean and standard error of the gradient estimate over ``n_batches`` independent estimates."""
    rng = np.random.default_rng(seed)
    grads = np.array([bbb.gradient(_state(mu, log_sigma), rng.standard_normal((samples, mu.size)), problem, X, y)[0]
                      for _ in range(n_batches)])
    return grads.mean(0), grads.std(0, ddof=1) / np.sqrt(n_batches)


def test_gradient_is_unbiased_at_the_mean_field_optimum():
    """Full batch: the mean gradient at ``(mu*, log s*)`` is within 4 standard errors of 0 (the mu part is exactly
    0 in expectation); 0.3 off in log sigma, where its expectation is e^0.6 - 1 = 0.82, it is more than 10 standard
    errors away."""
    problem, X, y, mu_star, ls_star = _linear_regression()
    mean, se = _mean_gradient(problem, X, y, mu_star, ls_star)
    assert np.all(np.abs(mean) <= 4 * se + 1e-9), (mean, se)
    mean, se = _mean_gradient(problem, X, y, mu_star, ls_star + 0.3)
    assert np.all(np.abs(mean[1]) > 10 * se[1]), (mean, se)


def test_recovers_the_exact_mean_field_posterior_of_linear_regression():
    """Adam (lr 0.01, S = 10, full batch) from ``init`` for 3000 steps; the average of the last 1500 iterates is
    within 0.05 posterior standard deviations of ``mu*`` and within 0.03 of ``log s*`` (measured errors about 0.01,
    the iterate noise of a constant learning rate)."""
    problem, X, y, mu_star, ls_star = _linear_regression(seed=3)
    hyper = bbb.Hyper(samples=10, lr=0.01)
    state = bbb.init(np.random.default_rng(4), problem, hyper)
    np.testing.assert_array_equal(state.log_sigma, np.log(0.01))
    mu_sum, ls_sum, n_avg = 0.0, 0.0, 1500
    for t in range(3000):
        state, _ = bbb.step(streams.derive_rng(5, streams.STEP, t), state, problem, X, y, hyper)
        if t >= 3000 - n_avg:
            mu_sum, ls_sum = mu_sum + state.mu, ls_sum + state.log_sigma
    sigma_star = np.exp(ls_star)
    np.testing.assert_allclose((mu_sum / n_avg - mu_star) / sigma_star, 0.0, rtol=0, atol=0.05)
    np.testing.assert_allclose(ls_sum / n_avg, ls_star, rtol=0, atol=0.03)
    # negative control: the starting point is far outside these tolerances
    assert np.abs(np.log(0.01) - ls_star).min() > 1.0


def test_first_adam_step_by_hand():
    """At t = 1 Adam's bias-corrected moments are ``g`` and ``g^2``: the step is ``lr g / (|g| + eps)``."""
    problem, X, y, _, _ = _linear_regression(seed=6)
    hyper = bbb.Hyper(samples=3, lr=0.02, eps=1e-3)
    state = bbb.init(np.random.default_rng(7), problem, hyper)
    new, info = bbb.step(np.random.default_rng(8), state, problem, X[:20], y[:20], hyper)
    eps = noise.standard_normal(np.random.default_rng(8), (3, state.mu.size))
    g, nll = bbb.gradient(state, eps, problem, X[:20], y[:20])
    # Adam's moments and step are float32 (reparam.MOMENT_DTYPE): the step is right to float32 rounding
    np.testing.assert_allclose(state.mu - new.mu, 0.02 * g[0] / (np.abs(g[0]) + 1e-3), rtol=1e-6)
    np.testing.assert_allclose(state.log_sigma - new.log_sigma, 0.02 * g[1] / (np.abs(g[1]) + 1e-3), rtol=1e-6)
    assert new.t == 1 and info["nll"] == pytest.approx(nll.mean(), rel=1e-14)


def test_mlp_runs_through_the_training_loop():
    """A softmax MLP for 30 steps: finite, the loss falls, the posterior is a DiagonalGaussian of the state."""
    rng = np.random.default_rng(9)
    model = MLP((4, 8, 3), "relu", "categorical")
    X = rng.standard_normal((90, 4))
    y = np.argmax(X[:, :3], axis=1)
    problem = Problem(model, model.prior_precision(1.0, 1e-2), 90)
    state, history = train.run(METHODS["bbb"], bbb.Hyper(samples=2, lr=0.05), problem, X, y, seed=0,
                               batch_size=10, n_steps=90)
    assert history.nll[-1] < 0.7 * history.nll[0]
    post = bbb.posterior(state)
    assert isinstance(post, DiagonalGaussian)
    np.testing.assert_array_equal(post.log_sigma, state.log_sigma)


@pytest.mark.parametrize("field,value,text", [("lr", -1.0, "--lr"), ("beta1", 1.0, "--beta1"),
                                              ("beta2", -0.1, "--beta2"), ("eps", 0.0, "--eps"),
                                              ("init_std", 0.0, "--init-std"), ("samples", 0, "--samples")])
def test_hyperparameters_are_validated(field, value, text):
    with pytest.raises(ConfigError, match=text):
        bbb.Hyper(**{field: value})
