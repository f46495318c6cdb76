"""Exactness checks of the natural-gradient baselines (``slangcli.methods.full``, ``slangcli.methods.meanfield``).

- ``full-ef`` is SLANG with L = D: fed the same weight samples, several steps give the same mean, momentum and
  precision to rounding (and from ``init`` the first ``step`` draws the same samples from the same generator);
- ``mf-ef`` is SLANG with L = 0: through the shared training loop with the same seed, the same states;
- negative control: rank-1 SLANG does not match ``full-ef``;
- the ``-hessian`` variants feed the per-example Gauss-Newton matrices to the precision: the exact Hessian for
  models without hidden layers (checked against a finite-difference Hessian, logistic and softmax), ``J^T H J``
  for an MLP; their mean step is the EF one;
- the full methods refuse a model too large for a D x D matrix.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.errors import ConfigError
from slangcli.gaussian.posteriors import MAX_FULL_PARAMS, DiagonalGaussian, FullGaussian
from slangcli.methods import METHODS, full, meanfield, natural, slang
from slangcli.methods.base import Problem
from slangcli.models import MLP
from slangcli.training import loop as train

N_DATA, BATCH = 120, 10

MODELS = [((6, 1), "bernoulli"), ((3, 3), "categorical"), ((3, 4, 1), "bernoulli")]
MODEL_IDS = ["logistic-D7", "softmax-D12", "mlp-tanh-D21"]


def _problem(sizes, likelihood, seed=0):
    rng = np.random.default_rng(seed)
    model = MLP(sizes, "tanh", likelihood)
    X = rng.standard_normal((N_DATA, sizes[0]))
    if likelihood == "categorical":
        y = rng.integers(0, sizes[-1], N_DATA)
    else:
        y = (X[:, 0] + 0.5 * rng.standard_normal(N_DATA) > 0).astype(float)
    return Problem(model, model.prior_precision(2.0, 0.5), N_DATA), X, y


def _full_precision_of(state: slang.State) -> np.ndarray:
    return state.U @ state.U.T + np.diag(state.d)


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# ------------------------------------------------------------------------------------------- full-ef vs SLANG
@pytest.mark.parametrize("sizes,likelihood", MODELS, ids=MODEL_IDS)
def test_full_ef_equals_slang_with_full_rank(sizes, likelihood):
    """Six steps from the same initial state, each fed the same samples theta (drawn from the full state):
    the mean, momentum and precision agree to about 1e-12 relative."""
    problem, X, y = _problem(sizes, likelihood, seed=1)
    D = problem.model.n_params
    kw = dict(samples=3, lr=0.3, beta=0.2, init_precision=1.5)
    s_state = slang.init(np.random.default_rng(2), problem, slang.Hyper(rank=D, **kw))
    f_state = full.init(np.random.default_rng(2), problem, full.Hyper(**kw))
    rng = np.random.default_rng(3)
    for t in range(1, 7):
        idx = rng.choice(N_DATA, BATCH, replace=False)
        theta = f_state.mu + rng.standard_normal((3, D)) @ np.linalg.inv(f_state.chol)
        f_state, f_info = full.update(f_state, theta, problem, X[idx], y[idx], full.Hyper(**kw))
        s_state, s_info = slang.update(s_state, theta, problem, X[idx], y[idx], slang.Hyper(rank=D, **kw))
        assert f_info == s_info
        assert _rel(s_state.mu, f_state.mu) < 1e-11, f"mean, step {t}"
        assert _rel(s_state.m, f_state.m) < 1e-12, f"momentum, step {t}"
        assert _rel(_full_precision_of(s_state), f_state.P) < 1e-12, f"precision, step {t}"
        np.testing.assert_allclose(f_state.chol @ f_state.chol.T, f_state.P, rtol=0,
                                   atol=1e-13 * np.abs(f_state.P).max())


def test_full_ef_first_step_from_init_equals_slang_step():
    """From ``init`` (precision ``init_precision * I`` in both) the same generator gives the same samples, so
    one ``step`` of each agrees."""
    problem, X, y = _problem((6, 1), "bernoulli", seed=4)
    D = problem.model.n_params
    f_state = full.init(np.random.default_rng(5), problem, full.Hyper(samples=4, init_precision=2.0))
    s_state = slang.init(np.random.default_rng(5), problem, slang.Hyper(rank=D, samples=4, init_precision=2.0))
    f_state, _ = full.step(np.random.default_rng(6), f_state, problem, X[:BATCH], y[:BATCH], full.Hyper(samples=4))
    s_state, _ = slang.step(np.random.default_rng(6), s_state, problem, X[:BATCH], y[:BATCH],
                            slang.Hyper(rank=D, samples=4))
    assert _rel(s_state.mu, f_state.mu) < 1e-12
    assert _rel(_full_precision_of(s_state), f_state.P) < 1e-12


def test_rank_one_slang_does_not_match_full_ef():
    """Negative control for the test above: with L = 1 the precision after five steps is far from full-ef's."""
    problem, X, y = _problem((3, 4, 1), "bernoulli", seed=7)
    kw = dict(samples=3, lr=0.3, beta=0.2)
    s_state = slang.init(np.random.default_rng(8), problem, slang.Hyper(rank=1, **kw))
    f_state = full.init(np.random.default_rng(8), problem, full.Hyper(**kw))
    rng = np.random.default_rng(9)
    for _ in range(5):
        idx = rng.choice(N_DATA, BATCH, replace=False)
        theta = f_state.mu + rng.standard_normal((3, f_state.mu.size)) @ np.linalg.inv(f_state.chol)
        f_state, _ = full.update(f_state, theta, problem, X[idx], y[idx], full.Hyper(**kw))
        s_state, _ = slang.update(s_state, theta, problem, X[idx], y[idx], slang.Hyper(rank=1, **kw))
    assert _rel(_full_precision_of(s_state), f_state.P) > 0.1


# ----------------------------------------------------------------------------------------------- mf-ef vs SLANG
@pytest.mark.parametrize("sizes,likelihood", MODELS, ids=MODEL_IDS)
def test_mf_ef_equals_slang_with_rank_zero_through_the_training_loop(sizes, likelihood):
    """Twenty steps of ``train.run`` with the same seed: the same samples are drawn (``mu + z / sqrt(d)``), and the
    states agree to rounding."""
    problem, X, y = _problem(sizes, likelihood, seed=10)
    kw = dict(samples=3, lr=0.2, beta=0.1, decay=0.3)
    run = dict(seed=11, batch_size=BATCH, n_steps=20)
    s_state, s_hist = train.run(slang, slang.Hyper(rank=0, **kw), problem, X, y, **run)
    m_state, m_hist = train.run(METHODS["mf-ef"], meanfield.Hyper(**kw), problem, X, y, **run)
    assert m_state.t == s_state.t == 20
    np.testing.assert_allclose(m_state.d, s_state.d, rtol=1e-12, atol=0)
    np.testing.assert_allclose(m_state.mu, s_state.mu, rtol=1e-11, atol=1e-12 * np.abs(s_state.mu).max())
    np.testing.assert_allclose(m_hist.nll, s_hist.nll, rtol=1e-11, atol=0)


def test_posteriors_of_the_baselines():
    """full-*: a FullGaussian whose precision is the state's P; mf-*: a DiagonalGaussian with
    ``log_sigma = -log(d) / 2``."""
    problem, X, y = _problem((3, 4, 1), "bernoulli", seed=12)
    run = dict(seed=13, batch_size=BATCH, n_steps=4)
    f_state, _ = train.run(METHODS["full-ef"], full.Hyper(samples=2), problem, X, y, **run)
    post = METHODS["full-ef"].posterior(f_state)
    assert isinstance(post, FullGaussian)
    np.testing.assert_allclose(post.chol @ post.chol.T, f_state.P, rtol=1e-13, atol=1e-13)
    m_state, _ = train.run(METHODS["mf-hessian"], meanfield.Hyper(samples=2), problem, X, y, **run)
    post = METHODS["mf-hessian"].posterior(m_state)
    assert isinstance(post, DiagonalGaussian)
    np.testing.assert_allclose(np.exp(-2 * post.log_sigma), m_state.d, rtol=1e-14, atol=0)


# --------------------------------------------------------------------------------------------- Hessian variants
def _fd_hessian(model, theta, X, y, h=1e-5):
    """Central differences of the summed gradient ``sum_i g_i`` at one weight vector: the Hessian of the NLL."""
    D = theta.size
    out = np.empty((D, D))
    for j in range(D):
        e = np.zeros(D)
        e[j] = h
        out[:, j] = (model.per_example_grads((theta + e)[None], X, y)[1].sum()
                     - model.per_example_grads((theta - e)[None], X, y)[1].sum()) / (2 * h)
    return 0.5 * (out + out.T)


def _hessian_case(sizes, likelihood):
    problem, X, y = _problem(sizes, likelihood, seed=14)
    D = problem.model.n_params
    hyper = full.Hyper(samples=2, lr=0.3, beta=0.2)
    rng = np.random.default_rng(15)
    theta = 0.5 * rng.standard_normal((2, D))
    state = full.State(mu=0.1 * rng.standard_normal(D), P=np.diag(rng.uniform(1, 2, D)), chol=None, m=np.zeros(D),
                       t=0)
    state = state._replace(chol=np.linalg.cholesky(state.P))
    return problem, X[:BATCH], y[:BATCH], hyper, theta, state


@pytest.mark.parametrize("sizes,likelihood", [((6, 1), "bernoulli"), ((3, 3), "categorical")],
                         ids=["logistic", "softmax"])
def test_full_hessian_uses_the_exact_hessian_without_hidden_layers(sizes, likelihood):
    """``P_new - (1 - beta) P - beta diag(lambda) == beta c sum_s H(theta_s)`` with H the finite-difference
    Hessian of the minibatch NLL; the diagonal of the same is mf-hessian's increment of d. (For softmax the
    S K Gauss-Newton columns per example are first combined into K.)"""
    problem, X, y, hyper, theta, state = _hessian_case(sizes, likelihood)
    alpha, beta = natural.rates(hyper, 1)
    c = problem.n_data / (BATCH * 2)
    expected = beta * c * sum(_fd_hessian(problem.model, th, X, y) for th in theta)
    new, _ = full.update(state, theta, problem, X, y, hyper, curvature="hessian")
    got = new.P - (1 - beta) * state.P - beta * np.diag(problem.prior_precision)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7 * np.abs(expected).max())

    mf_state = meanfield.State(mu=state.mu, d=np.diag(state.P).copy(), m=state.m, t=0)
    mf_new, _ = meanfield.update(mf_state, theta, problem, X, y, hyper, curvature="hessian")
    np.testing.assert_allclose(mf_new.d - (1 - beta) * mf_state.d - beta * problem.prior_precision,
                               np.diag(expected), rtol=1e-7, atol=0)


@pytest.mark.parametrize("likelihood", ["bernoulli", "categorical", "gaussian"])
def test_full_hessian_uses_gauss_newton_for_an_mlp(likelihood):
    """For a network the curvature is ``sum_s G G^T`` of ``ggn_factors``; the EF variant differs (negative control)
    and both take the same mean-gradient step direction before preconditioning (same momentum)."""
    k = 3 if likelihood == "categorical" else 1
    problem, X, y, hyper, theta, state = _hessian_case((3, 4, k), likelihood)
    if likelihood == "gaussian":
        y = np.random.default_rng(16).standard_normal(BATCH)
    _, beta = natural.rates(hyper, 1)
    c = problem.n_data / (BATCH * 2)
    G = problem.model.ggn_factors(theta, X).dense()
    new_h, _ = full.update(state, theta, problem, X, y, hyper, curvature="hessian")
    new_ef, _ = full.update(state, theta, problem, X, y, hyper, curvature="ef")
    increment = new_h.P - (1 - beta) * state.P - beta * np.diag(problem.prior_precision)
    np.testing.assert_allclose(increment, beta * c * (G @ G.T), rtol=0, atol=1e-12 * np.abs(increment).max())
    assert _rel(new_ef.P, new_h.P) > 1e-3
    np.testing.assert_array_equal(new_h.m, new_ef.m)


# -------------------------------------------------------------------------------------------------- size limit
def test_full_methods_refuse_models_too_large_for_a_dense_matrix():
    model = MLP((MAX_FULL_PARAMS, 1), likelihood="bernoulli")  # D = MAX_FULL_PARAMS + 1
    problem = Problem(model, model.prior_precision(1.0, 1.0), 10)
    with pytest.raises(ConfigError) as info:
        full.init(np.random.default_rng(0), problem, full.Hyper())
    message = str(info.value)
    assert "\n" not in message and f"D = {MAX_FULL_PARAMS + 1}" in message and "slang" in message
    small = MLP((MAX_FULL_PARAMS - 1, 1), likelihood="bernoulli")  # D = MAX_FULL_PARAMS: allowed (not built here)
    full.check_size(small.n_params)


@pytest.mark.parametrize("name", ["full-ef", "full-hessian", "mf-ef", "mf-hessian"])
@pytest.mark.parametrize("field,value,text", [("samples", 0, "--samples"), ("lr", 0.0, "--lr"),
                                              ("beta", 1.0, "--beta"), ("momentum", 1.0, "--momentum")])
def test_hyperparameters_are_validated_one_message_each(name, field, value, text):
    with pytest.raises(ConfigError, match=text):
        METHODS[name].Hyper(**{field: value})
