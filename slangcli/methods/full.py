"""Full-Gaussian natural-gradient VI: the update (2) of the SLANG paper with a dense D x D precision.

``full-ef`` uses the empirical Fisher of the per-example gradients (the paper's "Full-Gaussian EF", VOGN);
``full-hessian`` the per-example generalized Gauss-Newton matrices, which for logistic regression are the exact
Hessian ``sum_si p_si (1 - p_si) x~_i x~_i^T`` (the paper's "Full-Gaussian Hessian", VON). One step
(``slangcli.methods.natural``):

    P_new  = (1 - beta) P + beta (c G G^T + diag(lambda)),    P_new = chol chol^T
    mu_new = mu - alpha P_new^{-1} (m_hat + lambda mu)        (two triangular solves)

Weight samples are ``theta_s = mu + chol^{-T} z_s``. This is what SLANG computes with L = D, and the reference it
approximates. The state keeps the precision ``P`` and its Cholesky factor; the posterior keeps the factor
(``FullGaussian``). Models with more than ``posteriors.MAX_FULL_PARAMS`` parameters are refused.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.linalg

from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import MAX_FULL_PARAMS, FullGaussian
from slangcli.methods import natural
from slangcli.methods.base import Method, Problem, require

Hyper = natural.Hyper


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    P: np.ndarray  # (D, D) precision
    chol: np.ndarray  # (D, D) lower Cholesky factor of P
    m: np.ndarray  # (D,) momentum of the likelihood gradient
    t: int  # steps taken


def check_size(n_params: int) -> None:
    require(n_params <= MAX_FULL_PARAMS,
            f"a full-Gaussian method needs D x D matrices, and this model has D = {n_params} parameters "
            f"(limit {MAX_FULL_PARAMS}); use --method slang or a mean-field method")


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    check_size(D)
    return State(
        mu=problem.model.init_mean(rng),
        P=np.diag(np.full(D, hyper.init_precision)),
        chol=np.diag(np.full(D, np.sqrt(hyper.init_precision))),
        m=np.zeros(D),
        t=0,
    )


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper,
         curvature: str = "ef"):
    """One step: ``theta_s = mu + chol^{-T} z_s`` (covariance ``P^{-1}``), then :func:`update`."""
    Z = noise.sample_columns(rng, state.mu.size, hyper.samples)
    eps = scipy.linalg.solve_triangular(state.chol, Z, lower=True, trans=1, check_finite=False)
    return update(state, (state.mu[:, None] + eps).T, problem, X, y, hyper, curvature)


def update(state: State, theta: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper,
           curvature: str = "ef"):
    """The deterministic part of a step, given the weight samples ``theta : (S, D)``."""
    t = state.t + 1
    alpha, beta = natural.rates(hyper, t)
    lam = problem.prior_precision
    nll, g, grads, c = natural.curvature_terms(problem, theta, X, y, curvature)
    G = grads.dense()
    P = (1.0 - beta) * state.P + (beta * c) * (G @ G.T)
    P[np.diag_indices_from(P)] += beta * lam
    chol = np.linalg.cholesky(P)
    mu, m = natural.mean_step(state.mu, state.m, g, lam, t, alpha, hyper.momentum,
                              lambda v: scipy.linalg.cho_solve((chol, True), v, check_finite=False))
    return State(mu, P, chol, m, t), {"nll": float(nll.mean())}


def posterior(state: State) -> FullGaussian:
    return FullGaussian(mean=state.mu.copy(), chol=state.chol.copy())


EF = Method(Hyper, init, step, posterior,
            description="natural-gradient baseline, dense precision, empirical Fisher")
HESSIAN = Method(Hyper, init, partial(step, curvature="hessian"), posterior,
                 description="natural-gradient baseline, dense precision, Gauss-Newton")
