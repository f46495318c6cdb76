"""Exact Gaussian VI for Bayesian logistic regression: the full-covariance and the mean-field Gaussian that
maximise the ELBO, the references of the SLANG paper's Table 1 ("Full-Gaussian Exact", "MF Exact"). For Bayesian
linear regression (a Gaussian likelihood) both optima have a closed form (:func:`_gaussian`), which the same two
methods give.

Model: ``p(y_n = 1 | theta) = sigmoid(x~_n^T theta)`` with ``x~ = (x, 1)``, prior ``N(0, diag(lambda)^{-1})``. For
``q = N(mu, Sigma)`` the logit ``f_n`` is ``N(m_n, v_n)`` with ``m_n = x~_n^T mu`` and ``v_n = x~_n^T Sigma x~_n``,
so the negative ELBO is a sum of one-dimensional expectations plus a closed-form KL:

    F(mu, Sigma) = sum_n (E[softplus(f_n)] - y_n m_n)
                   + 1/2 (sum_j lambda_j (Sigma_jj + mu_j^2) - D - log |Sigma| - sum_j log lambda_j).

The expectations, and the gradient through ``d/dm E[softplus(f)] = E[sigmoid(f)]`` and
``d/dv E[softplus(f)] = E[sigmoid'(f)] / 2``, are computed by ``slangcli.gaussian.quadrature`` to about 1e-12 (the SLANG
authors used a 20-piece quadratic bound instead; quadrature is as accurate and simpler). With ``h_n = E[sigmoid'
(f_n)]`` and ``s_n = E[sigmoid(f_n)]``:

    dF/dmu    = X~^T (s - y) + lambda * mu
    dF/dSigma = 1/2 (X~^T diag(h) X~ + diag(lambda) - Sigma^{-1})

Parameterisations (unconstrained, for L-BFGS):

- ``exact-full``: ``Sigma = C C^T``, C lower triangular with ``log C_jj`` as parameters. ``dF/dC =
  tril((X~^T diag(h) X~ + diag(lambda)) C) - diag(1 / C_jj)`` (the ``-log|Sigma|`` term contributes
  ``-C^{-T}``, whose lower triangle is its diagonal).
- ``exact-mf``: ``Sigma = diag(sigma^2)`` with ``log sigma`` as parameters:
  ``dF/dlog sigma_j = (sum_n h_n x~_nj^2 + lambda_j) sigma_j^2 - 1``.

Both minimise ``F / N`` with ``scipy.optimize.minimize(method="L-BFGS-B")`` from the Laplace approximation at the
MAP (full: ``Sigma = H^{-1}``; mean-field: ``sigma_j^2 = 1 / H_jj``, the mean-field optimum of a Gaussian
posterior with precision H), and stop when the largest gradient component of ``F / N`` is at most ``tol``;
anything else is a ``ConvergenceError``. Deterministic: no random numbers are drawn.

These are solvers, not step methods: ``solve(problem, X, y, hyper) -> (posterior, info)`` is called once by
``slangcli.training.fitting``. ``info`` holds the per-iteration history (``iteration``, ``neg_elbo_per_example``,
``seconds``) and the solver record (``iterations``, ``function_evals``, ``grad_max``, ``converged``, ``message``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.special

from slangcli.errors import ConfigError, ConvergenceError
from slangcli.gaussian.posteriors import MAX_FULL_PARAMS, DiagonalGaussian, FullGaussian
from slangcli.gaussian.quadrature import expect_sigmoid, expect_sigmoid_grad, expect_softplus
from slangcli.methods.base import Method, Problem, hyperparameter, require, require_memory
from slangcli.methods.full import check_size

# L-BFGS memory: more pairs than scipy's default 10 converge in far fewer iterations on the ill-conditioned
# Cholesky parameterisation, at a cost per iteration that is small next to the O(N D^2) objective.
HISTORY = 30


@dataclass(frozen=True)
class Hyper:
    tol: float = hyperparameter(1e-8, "Stop when the largest gradient component of -ELBO / N is below this.")
    max_iter: int = hyperparameter(20000, "Most L-BFGS iterations.")

    def __post_init__(self):
        require(0 < self.tol < np.inf, f"--tol must be positive and finite, got {self.tol}")
        require(isinstance(self.max_iter, (int, np.integer)) and self.max_iter >= 1,
                f"--max-iter must be a whole number >= 1, got {self.max_iter}")


def _check_problem(problem: Problem, name: str) -> None:
    model = problem.model
    if not (model.is_linear and model.likelihood in ("bernoulli", "gaussian")):
        raise ConfigError(f"--method {name} is exact VI for Bayesian logistic and linear regression only (a model "
                          f"without --hidden layers and a bernoulli or gaussian likelihood); this model is "
                          f"{model.likelihood} with sizes {model.sizes}")


# ------------------------------------------------------------------------------- linear regression, closed form
def _gaussian(problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper, mean_field: bool):
    """Bayesian linear regression, ``y ~ N(x~^T theta, 1 / tau)``: the posterior is Gaussian with precision
    ``P = tau X~^T X~ + diag(lambda)`` and mean ``P^{-1} tau X~^T y``, the ELBO's optimum over full Gaussians. Over
    diagonal ones the optimum has the same mean and precisions ``diag(P)`` (for a Gaussian target, the mean-field
    KL(q || p) is minimal at p's mean and the diagonal of its precision). No iteration: the solver record says so."""
    started = time.perf_counter()
    tau, lam = problem.model.noise_precision, problem.prior_precision
    Xb = _with_bias(X)
    P = tau * (Xb.T @ Xb)
    P[np.diag_indices_from(P)] += lam
    try:
        factor = scipy.linalg.cho_factor(P, lower=True)
    except np.linalg.LinAlgError as exc:
        raise ConvergenceError(f"the posterior precision of the linear regression is not positive definite in "
                               f"float64 ({exc})") from None
    mean = scipy.linalg.cho_solve(factor, tau * (Xb.T @ y))
    if mean_field:
        posterior = DiagonalGaussian.from_precision(mean, np.diag(P).copy())
    else:
        posterior = FullGaussian.from_precision(mean, P)
    N = len(y)
    # -ELBO / N: the expected NLL (the residuals' square plus x~^T Sigma x~) and the KL to the prior
    expected = np.sum((y - Xb @ mean) ** 2) + np.sum(posterior.quadratic_forms(Xb))
    value = (0.5 * N * np.log(2.0 * np.pi / tau) + 0.5 * tau * expected + posterior.kl_to_prior(lam)) / N
    if not np.isfinite(value):
        raise ConvergenceError("the linear regression's posterior is not finite in float64 (the features' "
                               "magnitude overflows it)")
    seconds = time.perf_counter() - started
    history = {"iteration": np.array([1]), "neg_elbo_per_example": np.array([value]), "seconds": np.array([seconds])}
    solver = {"iterations": 1, "function_evals": 1, "grad_max": 0.0, "neg_elbo_per_example": float(value),
              "converged": True, "message": CLOSED_FORM, "tol": hyper.tol}
    return posterior, {"history": history, "solver": solver}


# the solver record's message of a closed-form posterior, by which fit, inspect and plot tell it from L-BFGS's
CLOSED_FORM = "closed form (a Gaussian likelihood)"


def closed_form(solver: dict) -> bool:
    """Whether an exact solver's record (a run's ``metrics["solver"]``) is a linear regression's closed form."""
    return str(solver.get("message", "")).startswith("closed form")


def _with_bias(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


def _data_term(Xb, y, mu, v):
    """``sum_n E[softplus(f_n)] - y_n m_n``, and ``s = E[sigmoid(f)]``, ``h = E[sigmoid'(f)]``."""
    m = Xb @ mu
    return float(np.sum(expect_softplus(m, v) - y * m)), expect_sigmoid(m, v), expect_sigmoid_grad(m, v)


def _laplace(Xb, y, lam):
    """MAP of the logistic-regression posterior (L-BFGS) and the diagonal weights ``p (1 - p)`` of its Hessian."""
    import scipy.optimize  # here, not at the top: loading it costs every slang command about 0.15 s

    N = Xb.shape[0]

    def objective(w):
        f = Xb @ w
        p = scipy.special.expit(f)
        value = np.sum(np.logaddexp(0.0, f) - y * f) + 0.5 * np.sum(lam * w * w)
        return value / N, (Xb.T @ (p - y) + lam * w) / N

    res = scipy.optimize.minimize(objective, np.zeros(Xb.shape[1]), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 5000, "gtol": 1e-10, "ftol": 0.0, "maxcor": HISTORY})
    f = Xb @ res.x
    # the initial point only needs to be reasonable, so a MAP short of full convergence is fine
    return res.x, scipy.special.expit(f) * scipy.special.expit(-f)


@contextlib.contextmanager
def _starting_point(name: str):
    """The block computes the Laplace approximation a solver starts from. Features of a large magnitude (their
    squares near the float64 limit) can overflow the MAP's line search or the Hessian: NumPy's warnings are off,
    the block checks its values with :func:`_check_start` (before SciPy's factorisation would refuse an infinity
    with a ValueError), and a failed factorisation is a ``ConvergenceError`` too."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        try:
            yield
        except np.linalg.LinAlgError as exc:
            raise ConvergenceError(f"{name} could not start: the Laplace approximation at the MAP failed in float64 "
                                   f"({exc})") from None


def _check_start(name: str, *values) -> None:
    if not all(np.isfinite(v).all() for v in values):
        raise ConvergenceError(f"{name} could not start: the Laplace approximation at the MAP is not finite in "
                               "float64 (the features' magnitude overflows it)")


class _Recorder:
    """Remembers the last objective evaluation, so the per-iteration callback records the value without
    re-evaluating (L-BFGS-B's accepted point is the last one it evaluated)."""

    def __init__(self, fun):
        self.fun = fun
        self.x = None
        self.value = None
        self.history = {"iteration": [], "neg_elbo_per_example": [], "seconds": []}
        self.started = time.perf_counter()

    def __call__(self, x):
        value, grad = self.fun(x)
        self.x, self.value = x.copy(), value
        return value, grad

    def callback(self, xk):
        value = self.value if self.x is not None and np.array_equal(xk, self.x) else self.fun(xk)[0]
        self.history["iteration"].append(len(self.history["iteration"]) + 1)
        self.history["neg_elbo_per_example"].append(value)
        self.history["seconds"].append(time.perf_counter() - self.started)


def _minimise(fun, x0, hyper: Hyper, name: str):
    import scipy.optimize  # (see _laplace)

    rec = _Recorder(fun)
    # the objective overflows where the line search overshoots (and then is not finite): the result is checked
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        res = scipy.optimize.minimize(rec, x0, jac=True, method="L-BFGS-B", callback=rec.callback,
                                      options={"maxiter": hyper.max_iter, "maxfun": 2 * hyper.max_iter + 100,
                                               "gtol": hyper.tol, "ftol": 0.0, "maxcor": HISTORY})
        value, grad = fun(res.x)
    grad_max = float(np.max(np.abs(grad)))
    if not (np.isfinite(value) and grad_max <= hyper.tol):
        raise ConvergenceError(
            f"{name} did not converge: after {res.nit} iterations the largest gradient component of -ELBO/N is "
            f"{grad_max:.3g} > --tol {hyper.tol:g} ({res.message}); raise --max-iter or loosen --tol")
    history = {k: np.asarray(v) for k, v in rec.history.items()}
    solver = {"iterations": int(res.nit), "function_evals": int(res.nfev), "grad_max": grad_max,
              "neg_elbo_per_example": float(value), "converged": True, "message": str(res.message), "tol": hyper.tol}
    return res.x, {"history": history, "solver": solver}


def _kl_constant(lam):
    return -0.5 * (lam.size + np.sum(np.log(lam)))


# ------------------------------------------------------------------------------------------- full covariance
def full_objective(params, Xb, y, lam):
    """``(F / N, dF/dparams / N)`` for ``params = (mu, packed lower triangle of C with log C_jj)``."""
    N, D = Xb.shape
    rows, cols = np.tril_indices(D)
    on_diag = rows == cols
    mu = params[:D]
    packed = params[D:]
    C = np.zeros((D, D))
    C[rows, cols] = np.where(on_diag, np.exp(np.where(on_diag, packed, 0.0)), packed)
    XC = Xb @ C
    v = np.einsum("nd,nd->n", XC, XC)
    data, s, h = _data_term(Xb, y, mu, v)
    diag_C = np.diag(C)
    value = (data + 0.5 * np.sum(lam * (np.einsum("jk,jk->j", C, C) + mu**2)) - np.sum(np.log(diag_C))
             + _kl_constant(lam))
    g_mu = Xb.T @ (s - y) + lam * mu
    g_C = Xb.T @ (h[:, None] * XC) + lam[:, None] * C
    g_C[np.diag_indices(D)] -= 1.0 / diag_C
    g_packed = g_C[rows, cols]
    g_packed[on_diag] *= diag_C  # chain rule through C_jj = exp(log C_jj)
    return value / N, np.concatenate([g_mu, g_packed]) / N


def solve_full(problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    _check_problem(problem, "exact-full")
    D = problem.model.n_params
    check_size(D)
    if problem.model.likelihood == "gaussian":
        require_memory(8 * 4 * D * D, f"--method exact-full's D x D matrices for D = {D} parameters",
                       "use --method exact-mf, slang or a mean-field method")
        return _gaussian(problem, X, y, hyper, mean_field=False)
    # L-BFGS-B keeps 2 HISTORY + 5 vectors of the D + D (D + 1) / 2 parameters (mean and Cholesky factor), and the
    # objective a few D x D matrices: at D = 5 001, 6 GiB in one allocation after the Laplace start
    n = D + D * (D + 1) // 2
    require_memory(8 * ((2 * HISTORY + 5) * n + 4 * D * D),
                   f"--method exact-full's optimiser state and matrices for D = {D} parameters",
                   "use --method exact-mf, slang or a mean-field method")
    Xb, lam = _with_bias(X), problem.prior_precision
    with _starting_point("exact-full"):
        mu0, w = _laplace(Xb, y, lam)
        H = Xb.T @ (w[:, None] * Xb) + np.diag(lam)
        _check_start("exact-full", mu0, H)
        C0 = np.linalg.cholesky(scipy.linalg.cho_solve(scipy.linalg.cho_factor(H, lower=True), np.eye(D)))
    rows, cols = np.tril_indices(D)
    packed0 = C0[rows, cols]
    packed0[rows == cols] = np.log(np.diag(C0))
    x, info = _minimise(lambda p: full_objective(p, Xb, y, lam), np.concatenate([mu0, packed0]), hyper,
                        "exact-full")
    C = np.zeros((D, D))
    C[rows, cols] = x[D:]
    C[np.diag_indices(D)] = np.exp(np.diag(C))
    # the posterior keeps the precision's Cholesky factor: Sigma^{-1} = C^{-T} C^{-1}
    C_inv = scipy.linalg.solve_triangular(C, np.eye(D), lower=True)
    return FullGaussian.from_precision(x[:D], C_inv.T @ C_inv), info


# ------------------------------------------------------------------------------------------------ mean field
def mean_field_objective(params, Xb, y, lam):
    """``(F / N, dF/dparams / N)`` for ``params = (mu, log sigma)``."""
    N, D = Xb.shape
    mu, log_sigma = params[:D], params[D:]
    var = np.exp(2.0 * log_sigma)
    X2 = Xb * Xb
    data, s, h = _data_term(Xb, y, mu, X2 @ var)
    value = data + 0.5 * np.sum(lam * (var + mu**2)) - np.sum(log_sigma) + _kl_constant(lam)
    g_mu = Xb.T @ (s - y) + lam * mu
    g_log_sigma = (X2.T @ h + lam) * var - 1.0
    return value / N, np.concatenate([g_mu, g_log_sigma]) / N


def solve_mean_field(problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    _check_problem(problem, "exact-mf")
    if problem.model.likelihood == "gaussian":  # (its mean is the full posterior's: a D x D solve)
        D = problem.model.n_params
        require(D <= MAX_FULL_PARAMS, f"--method exact-mf of a linear regression solves a D x D system for its "
                f"mean, and this model has D = {D} parameters (limit {MAX_FULL_PARAMS}); use --method slang or "
                "mf-hessian")
        require_memory(8 * 4 * D * D, f"--method exact-mf's D x D matrices for D = {D} parameters of a linear "
                       "regression", "use --method slang or a mean-field method")
        return _gaussian(problem, X, y, hyper, mean_field=True)
    Xb, lam = _with_bias(X), problem.prior_precision
    with _starting_point("exact-mf"):
        mu0, w = _laplace(Xb, y, lam)
        log_sigma0 = -0.5 * np.log((Xb * Xb).T @ w + lam)
        _check_start("exact-mf", mu0, log_sigma0)
    x, info = _minimise(lambda p: mean_field_objective(p, Xb, y, lam), np.concatenate([mu0, log_sigma0]), hyper,
                        "exact-mf")
    D = problem.model.n_params
    return DiagonalGaussian(mean=x[:D], log_sigma=x[D:]), info


FULL = Method(Hyper, solve=solve_full, description="exact VI, full covariance, logistic or linear regression only")
MEAN_FIELD = Method(Hyper, solve=solve_mean_field,
                    description="exact VI, mean field, logistic or linear regression only")
