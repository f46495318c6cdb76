"""k-tied Normal posteriors and training (``slangcli.gaussian.posteriors.KTiedGaussian``, ``slangcli.methods.ktied``).

- The posterior is the diagonal Gaussian with ``sigma_{W_l} = max(U_l V_l^T, floor_l)``: every interface method
  equals that of the :class:`DiagonalGaussian` built from an independently written materialisation (an explicit
  sum of outer products), and its KL to the prior equals the closed form written out here.
- For fixed noise the reparameterised objective ``F_eps(mu, log U, log V, log sigma_b)`` (written from its
  definition, KL from the materialised sigma) is a deterministic function whose gradient ``ktied.gradient`` must
  return: central differences along random directions, with and without a KL weight.
- Capacity: with ``k = min(m, n)`` a positive matrix is exactly ``U V^T`` with positive factors (the construction
  in the module docstring); and Bayesian linear regression (one ``P x 1`` weight matrix, so ``k = 1 = min(m, n)``)
  recovers the closed-form mean-field optimum, the same one Bayes by Backprop reaches (``test_bbb``), within the
  same stated tolerance.
- Initialisation as in the paper's Appendix A.2, the rank clamp per layer, annealing, and a run through the loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli import streams
from slangcli.errors import ConfigError
from slangcli.gaussian import noise
from slangcli.gaussian.divergence import kl
from slangcli.gaussian.posteriors import DiagonalGaussian, KTiedGaussian
from slangcli.methods import METHODS, bbb, ktied
from slangcli.methods.base import Problem
from slangcli.methods.reparam import kl_weight
from slangcli.models import MLP
from slangcli.training import loop as train

N, P, TAU = 200, 3, 4.0


def _random_ktied(sizes, ranks, rng, floor=None, signed=False):
    model = MLP(sizes, likelihood="categorical")
    layers = list(zip(sizes[:-1], sizes[1:]))
    U = tuple((rng.standard_normal((m, k)) if signed else rng.uniform(0.05, 0.5, (m, k))) for (m, _), k in
              zip(layers, ranks))
    V = tuple((rng.standard_normal((n, k)) if signed else rng.uniform(0.05, 0.5, (n, k))) for (_, n), k in
              zip(layers, ranks))
    floor = np.zeros(len(layers)) if floor is None else np.asarray(floor, dtype=float)
    return KTiedGaussian(mean=rng.standard_normal(model.n_params), U=U, V=V,
                         bias_log_sigma=rng.uniform(-2, 0, sum(sizes[1:])), floor=floor, sizes=tuple(sizes))


def _materialise(post):
    """sigma : (D,) by explicit sums of outer products ``sum_k u_k v_k^T`` (not the class's ``U @ V.T``)."""
    parts, start = [], 0
    for u, v, f, (m, n) in zip(post.U, post.V, post.floor, zip(post.sizes[:-1], post.sizes[1:])):
        A = sum(np.outer(u[:, j], v[:, j]) for j in range(u.shape[1]))
        parts += [np.maximum(A, f).ravel(), np.exp(post.bias_log_sigma[start : start + n])]
        start += n
    return np.concatenate(parts)


@pytest.mark.parametrize("signed", [False, True])
def test_posterior_is_the_diagonal_gaussian_of_its_materialised_sigma(signed):
    rng = np.random.default_rng(0)
    post = _random_ktied((4, 3, 2), (2, 2), rng, floor=[1e-3, 2e-3] if signed else None, signed=signed)
    sigma = _materialise(post)
    assert (sigma > 0).all()
    if signed:
        assert np.any(sigma == 1e-3) and np.any(sigma == 2e-3)  # the floors are active somewhere
    diag = DiagonalGaussian(mean=post.mean, log_sigma=np.log(sigma))
    np.testing.assert_allclose(post.sigma(), sigma, rtol=1e-14, atol=0)
    np.testing.assert_allclose(post.marginal_variances(), sigma**2, rtol=1e-14, atol=0)
    X = rng.standard_normal((5, post.n_params))
    np.testing.assert_allclose(post.quadratic_forms(X), diag.quadratic_forms(X), rtol=1e-13, atol=0)
    W = rng.standard_normal((post.n_params, 3))
    np.testing.assert_allclose(post.cov_times(W), diag.cov_times(W), rtol=1e-13, atol=0)
    np.testing.assert_allclose(post.precision_terms()[0], 1 / sigma**2, rtol=1e-13, atol=0)
    assert post.precision_terms()[1].shape == (post.n_params, 0)
    assert post.precision_logdet() == pytest.approx(-2 * np.sum(np.log(sigma)), rel=1e-13)
    lam = rng.uniform(0.5, 2.0, post.n_params)
    closed = 0.5 * np.sum(lam * sigma**2 + lam * post.mean**2 - 1 - np.log(lam * sigma**2))
    assert post.kl_to_prior(lam) == pytest.approx(closed, rel=1e-12)
    a = post.sample(np.random.default_rng(3), 6)
    b = diag.sample(np.random.default_rng(3), 6)
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert abs(kl(post, diag)) < 1e-10 and abs(kl(diag, post)) < 1e-10
    other = DiagonalGaussian(mean=post.mean + 0.1, log_sigma=np.log(sigma) + 0.2)
    assert kl(post, other) == pytest.approx(kl(diag, other), rel=1e-12)
    assert kl(other, post) == pytest.approx(kl(other, diag), rel=1e-12)


# ------------------------------------------------------------------------------------------------ gradients
def _objective(problem, X, y, mu, log_scale, eps, state, beta):
    """``F_eps``: the minibatch -ELBO estimate at fixed noise, from its definition (materialising through the
    posterior class, KL in closed form)."""
    post = ktied.posterior(state._replace(mu=mu, log_scale=log_scale))
    sigma = _materialise(post)
    c = problem.n_data / (X.shape[0] * eps.shape[0])
    lam = problem.prior_precision
    kl_term = 0.5 * np.sum(lam * sigma**2 + lam * mu**2 - 1.0 - np.log(lam * sigma**2))
    return c * problem.model.nll(mu + sigma * eps, X, y).sum() + beta * kl_term


@pytest.mark.parametrize("likelihood,beta", [("categorical", 1.0), ("bernoulli", 1.0), ("gaussian", 0.3)])
def test_gradient_is_the_pathwise_derivative(likelihood, beta):
    rng = np.random.default_rng(1)
    k = 3 if likelihood == "categorical" else 1
    model = MLP((3, 5, 4, k), "tanh", likelihood, noise_precision=2.0)
    problem = Problem(model, model.prior_precision(1.5, 0.3), 50)
    X = rng.standard_normal((8, 3))
    y = {"bernoulli": rng.integers(0, 2, 8).astype(float), "categorical": rng.integers(0, 3, 8),
         "gaussian": rng.standard_normal(8)}[likelihood]
    state = ktied.init(rng, problem, ktied.Hyper(rank=2, init_std=0.3, init_noise=0.3))
    assert state.ranks == (2, 2, 1 if k == 1 else 2)
    state = state._replace(mu=0.5 * rng.standard_normal(model.n_params))
    eps = rng.standard_normal((4, model.n_params))
    g_mu, g_scale, nll = ktied.gradient(state, eps, problem, X, y, beta)
    h = 1e-6
    for _ in range(3):
        v_mu, v_s = rng.standard_normal(g_mu.size), rng.standard_normal(g_scale.size)
        numeric = (_objective(problem, X, y, state.mu + h * v_mu, state.log_scale + h * v_s, eps, state, beta)
                   - _objective(problem, X, y, state.mu - h * v_mu, state.log_scale - h * v_s, eps, state, beta)) / (2 * h)
        analytic = float(g_mu @ v_mu + g_scale @ v_s)
        assert analytic == pytest.approx(numeric, rel=1e-7, abs=1e-7), (analytic, numeric)


def test_kl_gradient_alone_by_central_differences():
    """With no data term (zero likelihood weight through N = 0) the gradient is the KL's, from the materialised
    sigma, in every log U, log V and bias log sigma coordinate (all D + P coordinates, a tiny net)."""
    rng = np.random.default_rng(2)
    model = MLP((2, 3, 2), "tanh", "categorical")
    problem = Problem(model, model.prior_precision(2.0, 0.5), 0)
    state = ktied.init(rng, problem, ktied.Hyper(rank=2, init_std=0.5, init_noise=0.5))
    X, y = rng.standard_normal((1, 2)), np.array([1])
    eps = rng.standard_normal((1, model.n_params))
    _, g_scale, _ = ktied.gradient(state, eps, problem, X, y)

    def kl_of(log_scale):
        return ktied.posterior(state._replace(log_scale=log_scale)).kl_to_prior(problem.prior_precision)

    h = 1e-6
    numeric = np.array([(kl_of(state.log_scale + h * e) - kl_of(state.log_scale - h * e)) / (2 * h)
                        for e in np.eye(state.log_scale.size)])
    np.testing.assert_allclose(g_scale, numeric, rtol=1e-6, atol=1e-8)


def test_kl_weight_is_linear_annealing():
    assert kl_weight(5, 0) == 1.0 and kl_weight(1, 4) == 0.25 and kl_weight(3, 4) == 0.75
    assert kl_weight(4, 4) == 1.0 and kl_weight(100, 4) == 1.0


# ------------------------------------------------------------------------------------------------ capacity
def test_rank_min_m_n_represents_any_positive_sigma_matrix_with_positive_factors():
    """``A = U V^T`` with ``V = I + delta 1 1^T`` and ``U = A V^{-T}``: both positive for small delta."""
    rng = np.random.default_rng(4)
    A = rng.uniform(0.01, 1.0, (5, 3))
    delta = 0.01
    V = np.eye(3) + delta
    U = A @ np.linalg.inv(V.T)
    assert (U > 0).all() and (V > 0).all()
    post = KTiedGaussian(mean=np.zeros(5 * 3 + 3), U=(U,), V=(V,), bias_log_sigma=np.zeros(3), floor=np.zeros(1),
                         sizes=(5, 3))
    np.testing.assert_allclose(post.sigma_matrices()[0], A, rtol=1e-12, atol=0)


def _linear_regression(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    y = X @ np.array([1.0, -0.5, 0.3]) + 0.2 + rng.standard_normal(N) / np.sqrt(TAU)
    model = MLP((P, 1), likelihood="gaussian", noise_precision=TAU)
    problem = Problem(model, model.prior_precision(1.0, 0.5), N)
    Xb = np.hstack([X, np.ones((N, 1))])
    prec = TAU * Xb.T @ Xb + np.diag(problem.prior_precision)
    return problem, X, y, np.linalg.solve(prec, TAU * Xb.T @ y), -0.5 * np.log(np.diag(prec))


def test_full_rank_ktied_recovers_the_mean_field_optimum_of_linear_regression():
    """One 3 x 1 weight matrix, so k = 1 = min(m, n): the k-tied family is the mean field. Adam as in
    ``test_bbb`` (lr 0.01, S = 10, full batch, 3000 steps); the average of the last 1500 iterates is within 0.05
    posterior standard deviations of the exact ``mu*`` and within 0.03 of ``log s*``, the tolerance that Bayes by
    Backprop meets on the same problem."""
    problem, X, y, mu_star, ls_star = _linear_regression(seed=3)
    hyper = ktied.Hyper(samples=10, lr=0.01, rank=4)
    state = ktied.init(np.random.default_rng(4), problem, hyper)
    assert state.ranks == (1,)  # requested 4, clamped to min(3, 1)
    mu_sum, ls_sum, n_avg = 0.0, 0.0, 1500
    for t in range(3000):
        state, _ = ktied.step(streams.derive_rng(5, streams.STEP, t), state, problem, X, y, hyper)
        if t >= 3000 - n_avg:
            post = ktied.posterior(state)
            mu_sum, ls_sum = mu_sum + post.mean, ls_sum + np.log(post.sigma())
    sigma_star = np.exp(ls_star)
    np.testing.assert_allclose((mu_sum / n_avg - mu_star) / sigma_star, 0.0, rtol=0, atol=0.05)
    np.testing.assert_allclose(ls_sum / n_avg, ls_star, rtol=0, atol=0.03)
    assert np.abs(np.log(0.01) - ls_star).min() > 1.0  # negative control: the start is far off


# ------------------------------------------------------------------------------------------------ init, loop
def test_initialisation_follows_appendix_a2():
    rng_a, rng_b = np.random.default_rng(6), np.random.default_rng(6)
    model = MLP((60, 50, 4), likelihood="categorical")
    problem = Problem(model, model.prior_precision(1.0, 1.0), 100)
    state = ktied.init(rng_a, problem, ktied.Hyper(rank=3, init_std=0.01, init_noise=0.1))
    np.testing.assert_array_equal(state.mu, bbb.init(rng_b, problem, bbb.Hyper()).mu)  # same mean as bbb
    assert state.ranks == (3, 3)
    sl = ktied.slices(model.sizes, state.ranks)
    logs = np.concatenate([state.log_scale[s] for s in (*sl.a, *sl.b)])
    assert logs.size == 3 * (60 + 50) + 3 * (50 + 4)
    assert logs.mean() == pytest.approx(0.5 * (np.log(0.01) - np.log(3)), abs=0.02)
    assert logs.std() == pytest.approx(0.1, rel=0.1)
    np.testing.assert_array_equal(state.log_scale[sl.bias], np.log(0.01))
    sigma = ktied.posterior(state).sigma()
    # E[sigma_ij] = k E[U] E[V] = sigma0 exp(0.1^2) with log-normal factors: within 2 % of sigma0
    assert sigma[~model.layout.bias_mask()].mean() == pytest.approx(0.01, rel=0.03)


def test_clamp_note_names_the_layers():
    model = MLP((10, 6, 1))
    hyper, note = ktied.adapt(model, ktied.Hyper(rank=2))
    assert hyper == ktied.Hyper(rank=2) and "layer 2 (6 x 1): rank 1" in note
    assert ktied.adapt(model, ktied.Hyper(rank=1))[1] is None


def test_step_is_adam_on_the_concatenated_gradient():
    problem, X, y, _, _ = _linear_regression(seed=6)
    hyper = ktied.Hyper(samples=3, lr=0.02, eps=1e-3)
    state = ktied.init(np.random.default_rng(7), problem, hyper)
    new, info = ktied.step(np.random.default_rng(8), state, problem, X[:20], y[:20], hyper)
    eps = noise.standard_normal(np.random.default_rng(8), (3, state.mu.size))
    g_mu, g_s, nll = ktied.gradient(state, eps, problem, X[:20], y[:20])
    # Adam's moments and step are float32 (reparam.MOMENT_DTYPE): the step is right to float32 rounding
    np.testing.assert_allclose(state.mu - new.mu, 0.02 * g_mu / (np.abs(g_mu) + 1e-3), rtol=1e-6)
    np.testing.assert_allclose(state.log_scale - new.log_scale, 0.02 * g_s / (np.abs(g_s) + 1e-3), rtol=1e-6)
    assert new.t == 1 and info["nll"] == pytest.approx(nll.mean(), rel=1e-14)


def test_mlp_runs_through_the_training_loop_and_resumes_exactly():
    rng = np.random.default_rng(9)
    model = MLP((4, 8, 3), "relu", "categorical")
    X = rng.standard_normal((90, 4))
    y = np.argmax(X[:, :3], axis=1)
    problem = Problem(model, model.prior_precision(1.0, 1e-2), 90)
    hyper = ktied.Hyper(samples=2, lr=0.05, rank=2, kl_anneal_steps=20)
    state, history = train.run(METHODS["ktied"], hyper, problem, X, y, seed=0, batch_size=10, n_steps=90)
    assert history.nll[-1] < 0.7 * history.nll[0]
    half, _ = train.run(METHODS["ktied"], hyper, problem, X, y, seed=0, batch_size=10, n_steps=45)
    resumed, _ = train.run(METHODS["ktied"], hyper, problem, X, y, seed=0, batch_size=10, n_steps=90, state=half)
    assert resumed.mu.tobytes() == state.mu.tobytes() and resumed.log_scale.tobytes() == state.log_scale.tobytes()
    post = ktied.posterior(state)
    assert isinstance(post, KTiedGaussian) and post.ranks == (2, 2)
    assert all((u > 0).all() for u in post.U) and all((v > 0).all() for v in post.V)


@pytest.mark.parametrize("field,value,text", [("rank", 0, "--rank"), ("init_noise", -0.1, "--init-noise"),
                                              ("kl_anneal_steps", -1, "--kl-anneal-steps"), ("lr", 0.0, "--lr")])
def test_hyperparameters_are_validated(field, value, text):
    with pytest.raises(ConfigError, match=text):
        ktied.Hyper(**{field: value})
