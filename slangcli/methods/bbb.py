"""Bayes by Backprop (Blundell et al. 2015): mean-field Gaussian VI by reparameterisation gradients and Adam.

``q(theta) = N(mu, diag(sigma^2))`` with ``sigma = exp(log_sigma)`` (the log keeps sigma positive without a
constraint; the posterior is stored as ``DiagonalGaussian(mean, log_sigma)``). The objective is the negative ELBO

    F(mu, log_sigma) = E_q[sum_n NLL_n(theta)] + beta_t KL(q || N(0, diag(lambda)^{-1})),

estimated on a minibatch of M of the N examples with S samples ``theta_s = mu + sigma * eps_s``,
``eps_s ~ N(0, I)``. With ``G_s = sum_i g_si`` the minibatch gradient at sample s and ``c = N / M``:

    dF/dmu        ~ (c / S) sum_s G_s                 + beta_t lambda mu
    dF/dlog_sigma ~ (c / S) sum_s G_s * eps_s * sigma + beta_t (lambda sigma^2 - 1)

(the KL part is exact: ``KL = 1/2 sum(lambda sigma^2 + lambda mu^2 - 1 - log(lambda sigma^2))``). Both are
unbiased, for any model and likelihood. Adam (Kingma and Ba 2014, with bias correction) updates ``(mu,
log_sigma)`` with a constant rate. ``beta_t`` is 1 unless linear KL annealing is asked for
(``kl_anneal_steps``). Initialisation: ``mu`` from the model's layer initialisation, ``sigma = init_std``
everywhere (0.01, as in the k-tied Normal paper's mean-field runs). What this shares with k-tied training lives in
``slangcli.methods.reparam``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods.base import Problem
from slangcli.methods.reparam import AdamHyper, adam, adam_moments, kl_weight, likelihood_gradients


@dataclass(frozen=True)
class Hyper(AdamHyper):
    pass


# the method's declarations (slangcli.methods.base.Method); std_gradients below makes it take --snr
description = "Bayes by Backprop (mean field, Adam)"
finite_fields = ("mu", "log_sigma")


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    log_sigma: np.ndarray  # (D,)
    m: np.ndarray  # (2, D) Adam's first moment of the gradients in (mu, log_sigma), float32
    v: np.ndarray  # (2, D) Adam's second moment, float32
    t: int  # steps taken


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    m, v = adam_moments((2, D))
    return State(mu=problem.model.init_mean(rng), log_sigma=np.full(D, np.log(hyper.init_std)), m=m, v=v, t=0)


def gradient(state: State, eps: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, kl_weight: float = 1.0):
    """The reparameterisation estimate of ``(dF/dmu, dF/dlog_sigma) : (2, D)`` at noise ``eps : (S, D)`` with KL
    weight ``beta_t``, and the per-example NLL ``(S, M)`` at the samples."""
    sigma = np.exp(state.log_sigma)
    g_mu, g_sigma, nll = likelihood_gradients(state.mu, sigma, eps, problem, X, y)
    lam = problem.prior_precision
    if kl_weight != 1.0:
        lam = kl_weight * lam
    grad = np.empty((2, state.mu.size))
    # grad[0] = g_mu + beta lambda mu; grad[1] = sigma (g_sigma + beta lambda sigma) - beta, i.e. d/dlog_sigma =
    # sigma d/dsigma with the KL part sigma (lambda sigma - 1 / sigma) written without the division; in place,
    # because this is a memory-bound part of the step
    np.multiply(lam, state.mu, out=grad[0])
    grad[0] += g_mu
    np.multiply(lam, sigma, out=grad[1])
    grad[1] += g_sigma
    grad[1] *= sigma
    grad[1] -= kl_weight
    return grad, nll


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    t = state.t + 1
    eps = noise.standard_normal(rng, (hyper.samples, state.mu.size))
    grad, nll = gradient(state, eps, problem, X, y, kl_weight(t, hyper.kl_anneal_steps))
    delta, m, v = adam(grad, state.m, state.v, t, hyper)
    return State(state.mu - delta[0], state.log_sigma - delta[1], m, v, t), {"nll": float(nll.mean())}


def std_gradients(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray,
                  hyper: Hyper, kl: float | None = None) -> list[np.ndarray]:
    """One draw of the gradient in the standard-deviation parameters of each weight matrix (``log_sigma`` of
    its ``m n`` entries; biases are not included), at the current state, for the gradient SNR. ``kl`` overrides the KL weight of the
    step (0: the expected log-likelihood's part alone)."""
    eps = noise.standard_normal(rng, (hyper.samples, state.mu.size))
    grad, _ = gradient(state, eps, problem, X, y,
                       kl_weight(state.t + 1, hyper.kl_anneal_steps) if kl is None else kl)
    return [grad[1][s.W] for s in problem.model.layout.layers]


def posterior(state: State) -> DiagonalGaussian:
    return DiagonalGaussian(mean=state.mu.copy(), log_sigma=state.log_sigma.copy())
