"""Exact Gaussian VI for Bayesian logistic regression (``slangcli.methods.exact``).

- The objectives ``F / N`` of both parameterisations (Cholesky factor with log diagonal; log standard deviations)
  have the gradients the solvers use: central differences over every parameter, at points whose logit variances
  cover both quadrature branches.
- Their values are the -ELBO / N that ``slangcli.predictive.metrics`` computes for the corresponding posterior object
  (a separate code path: posterior quadratic forms and ``kl_to_prior``).
- The solutions are optima, checked in the (mu, Sigma) coordinates, independently of the parameterisation: the
  stationarity conditions of the ELBO, ``X~^T (E[sigmoid(f)] - y) + lambda mu = 0`` and
  ``Sigma^{-1} = X~^T diag(E[sigmoid'(f)]) X~ + diag(lambda)`` (full) or its diagonal (mean field); the Laplace
  approximation the solvers start from does not satisfy them (negative control); random perturbations of the
  solution never lower the objective; and exact-full's -ELBO is below exact-mf's (a restriction of it).
- Determinism, the per-iteration history, and the errors for other models and for non-convergence.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.errors import ConfigError, ConvergenceError
from slangcli.gaussian.posteriors import DiagonalGaussian, FullGaussian
from slangcli.gaussian.quadrature import expect_sigmoid, expect_sigmoid_grad
from slangcli.methods import METHODS, exact
from slangcli.methods.base import Problem, is_solver
from slangcli.models import MLP
from slangcli.predictive.metrics import neg_elbo_per_example

N, P = 40, 3


def _problem(seed=0, n=N):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, P))
    y = (X @ np.array([1.5, -1.0, 0.5]) + 0.3 + rng.standard_normal(n) > 0).astype(float)
    model = MLP((P, 1), likelihood="bernoulli")
    lam = np.array([1.0, 2.0, 0.5, 0.1])
    return Problem(model, lam, n), X, y, np.hstack([X, np.ones((n, 1))])


def _full_params(rng, D):
    """Mean, and a C whose logit variances x~^T C C^T x~ span both sides of the quadrature switch (v = 4)."""
    mu = 0.5 * rng.standard_normal(D)
    C = np.tril(rng.standard_normal((D, D))) * 0.3
    C[np.diag_indices(D)] = np.array([1.5, 0.3, 0.8, 0.4]) * np.exp(rng.uniform(-0.2, 0.2, D))
    rows, cols = np.tril_indices(D)
    packed = C[rows, cols]
    packed[rows == cols] = np.log(np.diag(C))
    return np.concatenate([mu, packed]), mu, C


def _central_differences(fun, x, h=1e-6):
    out = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        out[j] = (fun(x + e)[0] - fun(x - e)[0]) / (2 * h)
    return out


def test_full_objective_gradient_matches_finite_differences():
    problem, X, y, Xb = _problem()
    params, mu, C = _full_params(np.random.default_rng(1), 4)
    v = np.einsum("nd,nd->n", Xb @ C, Xb @ C)
    assert v.min() < 4.0 < v.max(), "test precondition: both quadrature branches"
    fun = lambda p: exact.full_objective(p, Xb, y, problem.prior_precision)  # noqa: E731
    np.testing.assert_allclose(fun(params)[1], _central_differences(fun, params), rtol=1e-6, atol=1e-9)


def test_mean_field_objective_gradient_matches_finite_differences():
    problem, X, y, Xb = _problem()
    rng = np.random.default_rng(2)
    params = np.concatenate([0.5 * rng.standard_normal(4), rng.uniform(-1.0, 1.2, 4)])
    v = (Xb * Xb) @ np.exp(2 * params[4:])
    assert v.min() < 4.0 < v.max(), "test precondition: both quadrature branches"
    fun = lambda p: exact.mean_field_objective(p, Xb, y, problem.prior_precision)  # noqa: E731
    np.testing.assert_allclose(fun(params)[1], _central_differences(fun, params), rtol=1e-6, atol=1e-9)


def test_objective_values_are_the_neg_elbo_of_the_posterior():
    problem, X, y, Xb = _problem()
    params, mu, C = _full_params(np.random.default_rng(3), 4)
    C_inv = np.linalg.inv(C)
    full = FullGaussian.from_precision(mu, C_inv.T @ C_inv)
    expected = neg_elbo_per_example(full, problem.model, problem.prior_precision, X, y)
    got = exact.full_objective(params, Xb, y, problem.prior_precision)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    log_sigma = np.random.default_rng(4).uniform(-1.0, 1.0, 4)
    mf = DiagonalGaussian(mean=mu, log_sigma=log_sigma)
    expected = neg_elbo_per_example(mf, problem.model, problem.prior_precision, X, y)
    got = exact.mean_field_objective(np.concatenate([mu, log_sigma]), Xb, y, problem.prior_precision)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)


def _stationarity(post, Xb, y, lam):
    """Residuals of the ELBO's stationarity conditions in (mu, Sigma): the mean condition (max abs, per
    example), and the precision condition as ``(Sigma^{-1}, X~^T diag(h) X~ + diag(lambda))``."""
    m, v = Xb @ post.mean, post.quadratic_forms(Xb)
    mean_residual = np.abs(Xb.T @ (expect_sigmoid(m, v) - y) + lam * post.mean).max() / len(y)
    fixed_point = Xb.T @ (expect_sigmoid_grad(m, v)[:, None] * Xb) + np.diag(lam)
    return mean_residual, fixed_point


@pytest.fixture(scope="module")
def solved():
    problem, X, y, Xb = _problem(seed=5)
    full, full_info = exact.solve_full(problem, X, y, exact.Hyper())
    mf, mf_info = exact.solve_mean_field(problem, X, y, exact.Hyper())
    return problem, X, y, Xb, (full, full_info), (mf, mf_info)


def test_exact_full_satisfies_the_stationarity_conditions(solved):
    problem, X, y, Xb, (full, info), _ = solved
    assert isinstance(full, FullGaussian)
    mean_residual, fixed_point = _stationarity(full, Xb, y, problem.prior_precision)
    assert mean_residual < 1e-7
    np.testing.assert_allclose(full.chol @ full.chol.T, fixed_point, rtol=0, atol=1e-6 * np.abs(fixed_point).max())
    assert info["solver"]["converged"] and info["solver"]["grad_max"] <= 1e-8


def test_exact_mf_satisfies_the_stationarity_conditions(solved):
    problem, X, y, Xb, _, (mf, info) = solved
    assert isinstance(mf, DiagonalGaussian)
    mean_residual, fixed_point = _stationarity(mf, Xb, y, problem.prior_precision)
    assert mean_residual < 1e-7
    np.testing.assert_allclose(np.exp(-2 * mf.log_sigma), np.diag(fixed_point), rtol=1e-6, atol=0)


def test_laplace_start_is_not_stationary():
    """Negative control: the Laplace approximation (MAP mean, inverse Hessian) violates the precision condition by
    far more than the tolerance above, so the checks can tell an optimum from a good guess."""
    problem, X, y, Xb = _problem(seed=5)
    mu0, w = exact._laplace(Xb, y, problem.prior_precision)
    laplace = FullGaussian.from_precision(mu0, Xb.T @ (w[:, None] * Xb) + np.diag(problem.prior_precision))
    mean_residual, fixed_point = _stationarity(laplace, Xb, y, problem.prior_precision)
    gap = np.abs(laplace.chol @ laplace.chol.T - fixed_point).max() / np.abs(fixed_point).max()
    assert gap > 1e-2 and mean_residual > 1e-4


def test_solutions_are_minima_and_ordered(solved):
    """Random perturbations of exact-full never lower -ELBO / N; exact-full's -ELBO is below exact-mf's, whose own
    perturbations never lower it either."""
    problem, X, y, Xb, (full, f_info), (mf, m_info) = solved
    lam = problem.prior_precision
    best_full = f_info["solver"]["neg_elbo_per_example"]
    best_mf = m_info["solver"]["neg_elbo_per_example"]
    assert best_full < best_mf - 1e-4
    np.testing.assert_allclose(best_full, neg_elbo_per_example(full, problem.model, lam, X, y), rtol=1e-12)
    rng = np.random.default_rng(6)
    chol_inv = np.linalg.inv(full.chol)
    C = np.linalg.cholesky(chol_inv.T @ chol_inv)  # the solver's parameter: Sigma = C C^T
    rows, cols = np.tril_indices(4)
    params = np.concatenate([full.mean, np.where(rows == cols, np.log(np.diag(C))[rows], C[rows, cols])])
    np.testing.assert_allclose(exact.full_objective(params, Xb, y, lam)[0], best_full, rtol=1e-12)
    mf_params = np.concatenate([mf.mean, mf.log_sigma])
    for _ in range(20):
        assert exact.full_objective(params + 1e-3 * rng.standard_normal(params.size), Xb, y, lam)[0] >= best_full
        assert exact.mean_field_objective(mf_params + 1e-3 * rng.standard_normal(8), Xb, y, lam)[0] >= best_mf


def test_solvers_are_deterministic_and_record_their_iterations(solved):
    problem, X, y, _, (full, info), _ = solved
    again, _ = exact.solve_full(problem, X, y, exact.Hyper())
    np.testing.assert_array_equal(again.mean, full.mean)
    np.testing.assert_array_equal(again.chol, full.chol)
    h, s = info["history"], info["solver"]
    assert len(h["iteration"]) == s["iterations"] > 0
    assert np.all(np.diff(h["neg_elbo_per_example"]) <= 1e-15)
    assert h["neg_elbo_per_example"][-1] == pytest.approx(s["neg_elbo_per_example"], rel=1e-12)


def test_registry_entries_are_solvers():
    for name in ("exact-full", "exact-mf"):
        assert is_solver(METHODS[name])
    for name in ("slang", "full-ef", "mf-hessian", "bbb"):
        assert not is_solver(METHODS[name])


@pytest.mark.parametrize("sizes,likelihood", [((3, 4, 1), "bernoulli"), ((3, 4, 1), "gaussian"),
                                              ((3, 3), "categorical")])
def test_other_models_are_refused(sizes, likelihood):
    model = MLP(sizes, likelihood=likelihood)
    problem = Problem(model, model.prior_precision(1.0, 1.0), N)
    X, y = np.zeros((N, 3)), np.zeros(N)
    for solve in (exact.solve_full, exact.solve_mean_field):
        with pytest.raises(ConfigError, match="logistic and linear regression only"):
            solve(problem, X, y, exact.Hyper())


# ------------------------------------------------------------------------------------------- linear regression
def _linear_regression(seed=4, n=N, tau=3.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, P)) * np.array([1.0, 3.0, 0.2])
    y = X @ np.array([0.7, -0.2, 2.0]) + 0.4 + rng.standard_normal(n) / np.sqrt(tau)
    model = MLP((P, 1), likelihood="gaussian", noise_precision=tau)
    return Problem(model, np.array([1.0, 2.0, 0.5, 1e-5]), n), X, y, np.hstack([X, np.ones((n, 1))])


def _neg_elbo(mean, cov, tau, lam, Xb, y):
    """-ELBO / N of q = N(mean, cov) for Bayesian linear regression, densely."""
    n, D = Xb.shape
    expected = np.sum((y - Xb @ mean) ** 2) + np.trace(Xb @ cov @ Xb.T)
    kl = 0.5 * (np.sum(lam * (np.diag(cov) + mean**2)) - D - np.linalg.slogdet(cov)[1] - np.sum(np.log(lam)))
    return (0.5 * n * np.log(2 * np.pi / tau) + 0.5 * tau * expected + kl) / n


def test_linear_regression_is_solved_in_closed_form():
    """exact-full is the posterior itself (precision tau X~^T X~ + diag(lambda)); exact-mf its mean with the
    diagonal of that precision. Both are the ELBO's optima in their families: no perturbation of either lowers
    -ELBO, and the solvers' recorded -ELBO / N is the dense one."""
    problem, X, y, Xb = _linear_regression()
    tau, lam = problem.model.noise_precision, problem.prior_precision
    P = tau * Xb.T @ Xb + np.diag(lam)
    mean = np.linalg.solve(P, tau * Xb.T @ y)
    full, info = exact.solve_full(problem, X, y, exact.Hyper())
    np.testing.assert_allclose(full.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(full.cov_times(np.eye(P.shape[0])), np.linalg.inv(P), rtol=1e-9, atol=1e-14)
    mf, info_mf = exact.solve_mean_field(problem, X, y, exact.Hyper())
    np.testing.assert_allclose(mf.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(mf.marginal_variances(), 1.0 / np.diag(P), rtol=1e-12)
    rng = np.random.default_rng(0)
    for q, info_q, diagonal in ((full, info, False), (mf, info_mf, True)):
        cov = np.diag(q.marginal_variances()) if diagonal else np.linalg.inv(P)
        best = _neg_elbo(q.mean, cov, tau, lam, Xb, y)
        assert info_q["solver"]["neg_elbo_per_example"] == pytest.approx(best, rel=1e-10)
        assert info_q["solver"]["converged"] and info_q["solver"]["message"].startswith("closed form")
        for _ in range(20):
            moved = q.mean + 1e-3 * rng.standard_normal(q.mean.size)
            scale = np.exp(1e-3 * rng.standard_normal(q.mean.size))
            assert _neg_elbo(moved, cov * np.outer(scale, scale) if not diagonal else cov * np.diag(scale**2),
                             tau, lam, Xb, y) > best
    # the mean-field optimum is below the full one, by the KL between them
    assert info_mf["solver"]["neg_elbo_per_example"] > info["solver"]["neg_elbo_per_example"]


def test_linear_regression_learns_its_precisions_by_exact_variational_em():
    """noise_precision="auto" and prior_precision="auto" with exact-full: the EM fixed point of Bayesian linear
    regression (q the exact posterior; tau = N / E_q[sum r^2], lambda = P / E_q[|w|^2]), alternated densely here."""
    from slangcli.data.prepare import prepare
    from slangcli.training.fitting import fit_prepared

    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 4))
    y = X @ rng.standard_normal(4) + 0.3 + 0.5 * rng.standard_normal(300)
    run = fit_prepared(prepare(X, y, likelihood="gaussian"), method="exact-full", noise_precision="auto",
                       prior_precision="auto")
    ys = (y - y.mean()) / y.std()
    Xb = np.hstack([X, np.ones((300, 1))])
    tau, lam = 1.0, 1.0
    for _ in range(2000):
        cov = np.linalg.inv(tau * Xb.T @ Xb + np.diag([lam] * 4 + [1e-5]))
        mu = tau * cov @ Xb.T @ ys
        tau = 300 / (np.sum((ys - Xb @ mu) ** 2) + np.sum(cov * (Xb.T @ Xb)))
        lam = 4 / (np.sum(mu[:4] ** 2) + np.trace(cov[:4, :4]))
    assert run.model.noise_precision == pytest.approx(tau, rel=1e-3)
    assert run.prior_precision[0] == pytest.approx(lam, rel=1e-3)
    np.testing.assert_allclose(run.posterior.mean, mu, rtol=1e-3, atol=1e-6)
    assert run.metrics["solver"]["prior_rounds"] > 1
    # the training -ELBO / N is the closed form's (it was a 100-draw estimate, 1 % off)
    assert run.metrics["train"]["neg_elbo_per_example"] == pytest.approx(run.metrics["solver"]["neg_elbo_per_example"],
                                                                         rel=1e-12)
    assert run.history["noise_precision"][0] == 1.0 and len(run.history["learned_step"]) == \
        run.metrics["solver"]["prior_rounds"]


def test_non_convergence_is_an_error():
    problem, X, y, _ = _problem(seed=7)
    with pytest.raises(ConvergenceError) as info:
        exact.solve_full(problem, X, y, exact.Hyper(max_iter=2))
    assert "exact-full did not converge" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("solve", [exact.solve_full, exact.solve_mean_field], ids=["full", "mean-field"])
def test_a_start_that_overflows_is_a_convergence_error(solve):
    """Features near 1e155 (given unstandardised: a fit refuses them beyond 1e150) overflow the Laplace
    approximation the solvers start from: one ConvergenceError line, not SciPy's ValueError from the Cholesky
    factorisation of an infinite Hessian nor NumPy's warnings (errors here, setup.cfg)."""
    problem, X, y, _ = _problem(seed=3)
    with pytest.raises(ConvergenceError, match=r"^exact-(full|mf) could not start: the Laplace approximation at the "
                                               r"MAP is not finite in float64") as info:
        solve(problem, X * 1e155, y, exact.Hyper())
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("field,value", [("tol", 0.0), ("tol", np.inf), ("max_iter", 0), ("max_iter", 2.5)])
def test_hyperparameters_are_validated(field, value):
    with pytest.raises(ConfigError, match=f"--{field.replace('_', '-')}"):
        exact.Hyper(**{field: value})


def test_em_keeps_a_given_prior_and_says_when_it_does_not_settle(monkeypatch):
    """solve_em learning the noise alone returns the prior it was given, per parameter (it rebuilt it from one value
    per layer); a fit whose precisions have not settled in the rounds allowed says so, with the record's
    ``settled`` false (the rounds' cap ended EM silently)."""
    from slangcli.data.prepare import prepare
    from slangcli.training import learned
    from slangcli.training.fitting import fit_prepared

    problem, X, y, _ = _linear_regression()
    posterior, info, solved, history = learned.solve_em(METHODS["exact-full"], problem, X, y, exact.Hyper(),
                                                        noise=True, prior=False)
    np.testing.assert_array_equal(solved.prior_precision, problem.prior_precision)
    assert info["solver"]["settled"] and "prior_precision" not in history
    again, _ = exact.solve_full(solved, X, y, exact.Hyper())
    np.testing.assert_array_equal(again.mean, posterior.mean)  # the posterior is the returned problem's

    monkeypatch.setattr(learned, "CLOSED_FORM_ROUNDS", 2)
    notes = []
    run = fit_prepared(prepare(X, y, likelihood="gaussian"), method="exact-full", noise_precision="auto",
                       prior_precision="auto", notify=notes.append)
    assert run.metrics["solver"]["settled"] is False and run.metrics["solver"]["prior_rounds"] == 2
    assert any(n.startswith("warning: the learned precisions did not settle in 2 rounds of variational EM")
               for n in notes)
