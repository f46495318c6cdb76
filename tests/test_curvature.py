"""Curvature and expectation building blocks of the baselines: Gauss-Newton factors of ``slangcli.models``,
per-sample gradient sums, and the Gaussian expectation of sigmoid' in ``slangcli.gaussian.quadrature``.

What is checked:

- ``output_hessian_root``: ``R R^T`` equals the central-difference Hessian of the NLL in the outputs f;
- ``ggn_factors``: ``G G^T`` equals the dense ``sum_si J_si^T H_si J_si`` (J by central differences of the
  outputs), for every likelihood, with and without hidden layers;
- for a model without hidden layer the GGN is the exact Hessian of the summed NLL in theta (central differences of
  the gradient); for a tanh MLP it is not (negative control: the Hessian has the extra second-order term);
- ``sample_sums`` equals the per-sample column sums of the dense G;
- ``expect_sigmoid_grad`` against adaptive quadrature, and the identities the exact-VI gradients rely on,
  ``d/dm E[softplus] = E[sigmoid]`` and ``d/dv E[softplus] = E[sigmoid'] / 2``, by central differences.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import scipy.special

from slangcli.gaussian.quadrature import expect_sigmoid, expect_sigmoid_grad, expect_softplus
from slangcli.models import MLP

LIKELIHOODS = ["bernoulli", "categorical", "gaussian"]
H = 1e-5


def _model(hidden, likelihood):
    k = 3 if likelihood == "categorical" else 1
    return MLP((3, *hidden, k), "tanh", likelihood, noise_precision=2.5)


def _setup(hidden, likelihood, S=2, N=4, seed=0):
    rng = np.random.default_rng(seed)
    model = _model(hidden, likelihood)
    theta = 0.7 * rng.standard_normal((S, model.n_params))
    X = rng.standard_normal((N, 3))
    if likelihood == "bernoulli":
        y = rng.integers(0, 2, N).astype(float)
    elif likelihood == "categorical":
        y = rng.integers(0, 3, N)
    else:
        y = rng.standard_normal(N)
    return model, theta, X, y


def _output_jacobians(model, theta, X):
    """``J : (S, N, K, D)``, central differences of the outputs f in theta (all perturbations in one pass)."""
    S, D = theta.shape
    E = H * np.eye(D)
    pert = np.concatenate([theta[:, None] + E, theta[:, None] - E], axis=1).reshape(S * 2 * D, D)
    f = model.forward(pert, X)[0].reshape(S, 2, D, X.shape[0], -1)
    return ((f[:, 0] - f[:, 1]) / (2 * H)).transpose(0, 2, 3, 1)


def _output_hessians(model, theta, X):
    """Dense ``H_si : (S, N, K, K)`` written from the formulas, independently of ``output_hessian_root``."""
    f = model.forward(theta, X)[0]
    if model.likelihood == "bernoulli":
        p = scipy.special.expit(f)
        return (p * (1 - p))[..., None]
    if model.likelihood == "gaussian":
        return np.full((*f.shape, 1), model.noise_precision)
    p = scipy.special.softmax(f, axis=-1)
    return np.einsum("snk,kl->snkl", p, np.eye(f.shape[-1])) - p[..., :, None] * p[..., None, :]


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_output_hessian_root_squares_to_the_nll_hessian_in_f(likelihood):
    """``R R^T`` vs central differences of ``dNLL/df`` (the delta of ``nll_and_delta``) in f."""
    model, theta, X, y = _setup((4,), likelihood)
    f = model.forward(theta, X)[0]
    K = f.shape[-1]
    R = model.output_hessian_root(f)
    fd = np.empty((*f.shape, K))
    for k in range(K):
        e = np.zeros(K)
        e[k] = H
        fd[..., k] = (model.nll_and_delta(f + e, y)[1] - model.nll_and_delta(f - e, y)[1]) / (2 * H)
    np.testing.assert_allclose(R @ np.swapaxes(R, -1, -2), fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("hidden", [(), (4,), (4, 3)], ids=["linear", "1-hidden", "2-hidden"])
def test_ggn_factors_equal_dense_gauss_newton(hidden, likelihood):
    """``G G^T == sum_si J_si^T H_si J_si`` (J by central differences), and the column count is ``S N K``."""
    model, theta, X, _ = _setup(hidden, likelihood, seed=1)
    fg = model.ggn_factors(theta, X)
    G = fg.dense()
    K = model.sizes[-1] if likelihood == "categorical" else 1
    assert G.shape == (model.n_params, theta.shape[0] * X.shape[0] * K)
    J = _output_jacobians(model, theta, X)
    Hout = _output_hessians(model, theta, X)
    dense = np.einsum("snkd,snkl,snle->de", J, Hout, J)
    np.testing.assert_allclose(G @ G.T, dense, rtol=0, atol=1e-8 * np.abs(dense).max())


def _fd_hessian_of_total_nll(model, theta, X, y):
    """Central differences of the summed per-example gradients ``sum_i g_i`` at one weight vector."""
    D = theta.size
    Hm = np.empty((D, D))
    for j in range(D):
        e = np.zeros(D)
        e[j] = H
        gp = model.per_example_grads((theta + e)[None], X, y)[1].sum()
        gm = model.per_example_grads((theta - e)[None], X, y)[1].sum()
        Hm[:, j] = (gp - gm) / (2 * H)
    return 0.5 * (Hm + Hm.T)


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_ggn_of_a_linear_model_is_the_exact_hessian(likelihood):
    """Without hidden layers the outputs are linear in theta, so ``J^T H J`` is the whole Hessian: for logistic
    regression ``sum_i p_i (1 - p_i) x~_i x~_i^T``."""
    model, theta, X, y = _setup((), likelihood, S=1, N=6, seed=2)
    G = model.ggn_factors(theta, X).dense()
    exact = _fd_hessian_of_total_nll(model, theta[0], X, y)
    np.testing.assert_allclose(G @ G.T, exact, rtol=0, atol=1e-8 * np.abs(exact).max())
    if likelihood == "bernoulli":
        Xb = np.hstack([X, np.ones((6, 1))])
        p = scipy.special.expit(Xb @ theta[0])
        np.testing.assert_allclose(G @ G.T, Xb.T @ ((p * (1 - p))[:, None] * Xb), rtol=1e-12, atol=1e-14)


def test_ggn_of_an_mlp_is_not_the_hessian():
    """Negative control: with a tanh hidden layer the Hessian adds ``sum_k dNLL/df_k d^2 f_k / dtheta^2``, so the
    GGN differs from it by much more than the finite-difference error."""
    model, theta, X, y = _setup((4,), "bernoulli", S=1, N=6, seed=3)
    G = model.ggn_factors(theta, X).dense()
    exact = _fd_hessian_of_total_nll(model, theta[0], X, y)
    gap = np.abs(G @ G.T - exact).max() / np.abs(exact).max()
    assert gap > 1e-2, f"GGN unexpectedly equals the Hessian of an MLP (relative gap {gap:.2g})"


@pytest.mark.parametrize("hidden", [(), (4,)], ids=["linear", "1-hidden"])
def test_sample_sums_are_per_sample_column_sums(hidden):
    """``sample_sums()[s] == sum_i g_si`` (columns ``s N .. s N + N - 1`` of G)."""
    model, theta, X, y = _setup(hidden, "categorical", S=3, N=5, seed=4)
    _, fg = model.per_example_grads(theta, X, y)
    G = fg.dense().reshape(model.n_params, 3, 5)
    np.testing.assert_allclose(fg.sample_sums(), G.sum(axis=2).T, rtol=1e-12, atol=1e-13)


# ------------------------------------------------------------------------------------------------ quadrature
def _adaptive(fn, m, s):
    """``E[fn(f)]``, ``f ~ N(m, s^2)``, by adaptive quadrature split at 0 and m (a reference, not fast)."""
    def integrand(f):
        return fn(f) * np.exp(-0.5 * ((f - m) / s) ** 2) / (s * np.sqrt(2 * np.pi))
    lo, hi = min(m - 40 * s, -40.0), max(m + 40 * s, 40.0)
    cuts = sorted({lo, 0.0, m, hi})
    return sum(scipy.integrate.quad(integrand, a, b, epsabs=1e-15, epsrel=1e-13, limit=400)[0]
               for a, b in zip(cuts[:-1], cuts[1:]))


# (m, s) on both sides of the Gauss-Hermite / split Gauss-Legendre switch at s = 2
POINTS = [(-6.0, 0.1), (0.3, 1.0), (2.0, 1.99), (2.0, 2.01), (-1.5, 5.0), (4.0, 30.0), (0.0, 100.0)]


def test_expect_sigmoid_grad_matches_adaptive_quadrature():
    m, s = np.array(POINTS).T
    got = expect_sigmoid_grad(m, s**2)
    ref = [_adaptive(lambda f: scipy.special.expit(f) * scipy.special.expit(-f), mi, si) for mi, si in POINTS]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-13)


def test_softplus_expectation_derivatives():
    """``d/dm E[softplus] = E[sigmoid]`` and ``d/dv E[softplus] = E[sigmoid'] / 2`` (central differences in m
    and in v = s^2), the identities behind the exact-VI gradients."""
    m, s = np.array(POINTS).T
    v = s**2
    hm, hv = 1e-5, 1e-5 * v
    dm = (expect_softplus(m + hm, v) - expect_softplus(m - hm, v)) / (2 * hm)
    dv = (expect_softplus(m, v + hv) - expect_softplus(m, v - hv)) / (2 * hv)
    np.testing.assert_allclose(dm, expect_sigmoid(m, v), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dv, 0.5 * expect_sigmoid_grad(m, v), rtol=1e-6, atol=1e-9)
