"""Mean-field natural-gradient VI: the update (2) of the SLANG paper restricted to a diagonal precision ``d``.

``mf-ef`` keeps the diagonal of the empirical Fisher, ``mf-hessian`` the diagonal of the per-example generalized
Gauss-Newton matrices (the exact Hessian's diagonal for logistic regression): the paper's "Mean-Field EF" and
"Mean-Field Hessian". One step (``slangcli.methods.natural``):

    d_new  = (1 - beta) d + beta lambda + beta c diag(G G^T)
    mu_new = mu - alpha (m_hat + lambda mu) / d_new

with ``theta_s = mu + z_s / sqrt(d)``. This is SLANG with L = 0. The posterior is a ``DiagonalGaussian``
(``log_sigma = -log(d) / 2``).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods import natural
from slangcli.methods.base import Method, Problem

Hyper = natural.Hyper


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    d: np.ndarray  # (D,) precisions
    m: np.ndarray  # (D,) momentum of the likelihood gradient
    t: int  # steps taken


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    return State(mu=problem.model.init_mean(rng), d=np.full(D, hyper.init_precision), m=np.zeros(D), t=0)


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper,
         curvature: str = "ef"):
    """One step: ``theta_s = mu + z_s / sqrt(d)``, then :func:`update`."""
    Z = noise.sample_columns(rng, state.mu.size, hyper.samples)
    theta = (state.mu[:, None] + Z / np.sqrt(state.d)[:, None]).T
    return update(state, theta, problem, X, y, hyper, curvature)


def update(state: State, theta: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper,
           curvature: str = "ef"):
    """The deterministic part of a step, given the weight samples ``theta : (S, D)``."""
    t = state.t + 1
    alpha, beta = natural.rates(hyper, t)
    lam = problem.prior_precision
    nll, g, grads, c = natural.curvature_terms(problem, theta, X, y, curvature)
    d = (1.0 - beta) * state.d + beta * lam + (beta * c) * grads.sq_sum()
    mu, m = natural.mean_step(state.mu, state.m, g, lam, t, alpha, hyper.momentum, lambda v: v / d)
    return State(mu, d, m, t), {"nll": float(nll.mean())}


def posterior(state: State) -> DiagonalGaussian:
    return DiagonalGaussian.from_precision(state.mu, state.d)


EF = Method(Hyper, init, step, posterior, finite_fields=("mu", "d"),
            description="natural-gradient baseline, diagonal precision, empirical Fisher")
HESSIAN = Method(Hyper, init, partial(step, curvature="hessian"), posterior, finite_fields=("mu", "d"),
                 description="natural-gradient baseline, diagonal precision, Gauss-Newton")
