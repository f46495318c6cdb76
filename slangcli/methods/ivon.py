"""IVON, the Improved Variational Online Newton method (Shen et al. 2024, "Variational Learning is Effective for
Large Deep Networks", Algorithm 1): mean-field Gaussian VI by a natural-gradient step whose diagonal curvature is
estimated from the reparameterisation gradient.

The published algorithm keeps a mean ``m``, a gradient momentum ``g``, a per-example Hessian estimate ``h`` and
samples ``theta = m + sigma eps`` with ``sigma^2 = 1 / (ess (h + delta))``, where ``ess`` is the training-set size
N and the weight decay ``delta = lambda / N`` is the prior precision per example. With ``gbar`` the minibatch
mean gradient of the NLL at the sample (averaged over S samples):

    g      <- beta1 g + (1 - beta1) gbar
    hhat    = gbar (theta - m) / sigma^2                        (the "price" estimate: E[hhat] = E_q[Hessian] / N)
    h      <- beta2 h + (1 - beta2) hhat + (1 - beta2)^2 (h - hhat)^2 / (2 (h + delta))
    m      <- m - alpha (h_0 + delta) clip((g / (1 - beta1^t) + delta m) / (h + delta), +-r)

(the last term of the ``h`` update is the Riemannian-gradient correction that keeps ``h + delta`` positive; the
factor ``h_0 + delta`` rescales the rate so that the first steps move like SGD at rate ``alpha``; r is the
clipping radius, infinite (no clipping) in the published defaults, 1 here: see ``Hyper``).

This module keeps the same iteration in the natural-gradient form of the other slang methods: the posterior
precision ``d = N (h + delta)`` (so ``sigma = 1 / sqrt(d)``, as in ``mf-ef``) and the momentum of the full-data
gradient ``N g``. Multiplying the ``h`` update by N gives, with ``dhat = lambda + N hhat``,

    d      <- beta2 d + (1 - beta2) dhat + (1 - beta2)^2 (d - dhat)^2 / (2 d)
    mu     <- mu - alpha (h_0 + lambda / N) clip((m_hat + lambda mu) / d, +-r)

where ``N hhat = (c sum_s G_s * eps_s) sqrt(d)`` from the same reparameterisation sums as Bayes by Backprop
(``slangcli.methods.reparam.likelihood_gradients``: G_s the minibatch gradient at sample s, c = N / (M S)). The
posterior is a ``DiagonalGaussian`` of precision ``d``. Initialisation: ``mu`` from the model's layer
initialisation, ``h = h_0`` (``d = N h_0 + lambda``), zero momentum.

The noise precision of a Gaussian likelihood (``tau``) scales the loss and its gradient, and the published mean
step is not invariant to that scale: its size grows with ``tau`` (at ``alpha = 0.2`` a regression fit diverges from
``tau = 2`` on). Here ``alpha`` is per unit of ``tau``: the fit is the published algorithm at rate ``alpha / tau``
(rate factor ``(alpha / tau) (h_0 + delta)``, clipping radius ``r tau``), which moves the mean as a fit at
``tau = 1`` would; ``hess_init`` is the published one, so the posterior starts as wide as at ``tau = 1``. When a
learned ``tau`` changes between steps (``--noise-precision auto``), the gradient momentum is rescaled with it, as
if its gradients had been taken at the new value (``State.tau`` records the ``tau`` it was formed at); the Hessian
estimate follows at its own rate. (Scaling ``h_0`` and the precision with ``tau`` too, the reference's
``hess_init * tau``, narrows q as a learned ``tau`` rises, the narrower q fits the residuals more closely and
``tau`` rises further: on Boston it reached 46-53 after 400 epochs with a test NLL 0.4-0.9 nats worse than at 100,
and two of four splits diverged; docs/PEERS.md, section 6.)
For any other likelihood, and at ``tau = 1``, this is the published algorithm to the bit.

Precision (``dtype``): float32 by default, as in the reference implementation: the network passes run and ``mu``,
``d`` and ``m`` are kept in single precision (the posterior is returned in float64); float64 on request. A step at
MNIST scale is the network's products and some 25 elementwise passes over the D parameters, and both cost half
as much in single precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import DiagonalGaussian
from slangcli.methods.base import Problem, hyperparameter, require
from slangcli.methods.reparam import likelihood_gradients
from slangcli.methods.slang import DTYPES


@dataclass(frozen=True)
class Hyper:
    """IVON's hyperparameters: the published defaults (one sample per step, h_0 = 1, beta1 0.9, beta2 0.99999), but
    for the rate and the clipping radius, chosen on held-out training rows (docs/PEERS.md section 6): at rate 0.2
    without clipping two Boston fits in fifteen diverged, at 0.1 every set ended 0.02-0.04 nats worse (MNIST's
    10 epochs 0.015), and a radius of 1 stopped the divergences without changing the other fits' NLL."""

    samples: int = hyperparameter(1, "Monte-Carlo weight samples per step.", short="-S")
    lr: float = hyperparameter(0.2, "IVON's learning rate (per unit noise precision: the published rate is "
                                    "lr / tau).")
    beta1: float = hyperparameter(0.9, "Decay rate of the gradient momentum.")
    beta2: float = hyperparameter(0.99999, "Decay rate of the Hessian estimate.")
    hess_init: float = hyperparameter(1.0, "Initial per-example Hessian estimate h_0 (precision N h_0 + lambda).")
    # None: no clipping (the published default, an infinite radius; given as inf)
    clip_radius: float | None = hyperparameter(1.0, "Clip each coordinate of the preconditioned step (per unit "
                                                    "noise precision) to this radius; inf: no clipping.")
    dtype: str = hyperparameter("float32", "Precision of the network passes and of IVON's state: float32, the "
                                "precision of the reference implementation, takes some 40% less time per step on a "
                                "large network than float64, with the same test NLL to the third decimal.",
                                choices=DTYPES)

    def __post_init__(self):
        require(isinstance(self.samples, (int, np.integer)) and self.samples >= 1,
                f"--samples must be a whole number >= 1, got {self.samples}")
        require(0 < self.lr < np.inf, f"--lr must be positive and finite, got {self.lr}")
        require(0 <= self.beta1 < 1, f"--beta1 must be in [0, 1), got {self.beta1}")
        require(0 <= self.beta2 < 1, f"--beta2 must be in [0, 1), got {self.beta2}")
        require(0 < self.hess_init < np.inf, f"--hess-init must be positive and finite, got {self.hess_init}")
        require(self.clip_radius is None or 0 < self.clip_radius <= np.inf,
                f"--clip-radius must be positive (inf: no clipping), got {self.clip_radius}")
        if self.clip_radius == np.inf:
            object.__setattr__(self, "clip_radius", None)  # the one spelling of "no clipping" in the run file
        require(self.dtype in DTYPES, f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


# the method's declarations (slangcli.methods.base.Method)
description = "IVON (mean-field natural gradient)"
finite_fields = ("mu", "d")


class State(NamedTuple):
    """IVON's training state; the arrays in the ``dtype`` hyperparameter's precision."""

    mu: np.ndarray  # (D,)
    d: np.ndarray  # (D,) posterior precisions N (h + delta)
    m: np.ndarray  # (D,) momentum of the full-data likelihood gradient (N times the published g)
    t: int  # steps taken
    tau: float = 1.0  # the noise precision m was formed at (1 without one)


def _noise_scale(problem: Problem) -> float:
    """The likelihood's scale ``tau``: the noise precision of a Gaussian likelihood, 1 for any other."""
    model = problem.model
    return float(model.noise_precision) if model.likelihood == "gaussian" else 1.0


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D, dtype, tau = problem.model.n_params, np.dtype(hyper.dtype), _noise_scale(problem)
    d = problem.n_data * hyper.hess_init + problem.prior_precision
    return State(mu=problem.model.init_mean(rng).astype(dtype, copy=False), d=np.asarray(d, dtype=dtype),
                 m=np.zeros(D, dtype=dtype), t=0, tau=tau)


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    """One step: ``theta_s = mu + eps_s / sqrt(d)``, then :func:`update`."""
    eps = noise.standard_normal(rng, (hyper.samples, state.mu.size))
    return update(state, eps, problem, X, y, hyper)


def update(state: State, eps: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    """The deterministic part of a step, given the standard-normal noise ``eps : (S, D)``."""
    t = state.t + 1
    b1, b2 = hyper.beta1, hyper.beta2
    dtype = np.dtype(hyper.dtype)
    lam, n = problem.prior_precision.astype(dtype, copy=False), problem.n_data
    d0, mu0, m0, tau = state.d, state.mu, state.m, _noise_scale(problem)
    if tau != state.tau:  # a learned noise precision moved: the likelihood's gradients scale with it
        m0 = m0 * np.asarray(tau / state.tau, dtype=dtype)
    # At D of 1e5 and more these passes over D-vectors cost as much as the network's products. Each writes into
    # an array of this step (root_d, sigma, the two gradient sums, which likelihood_gradients returns new) or into
    # a new state array instead of a fresh temporary, and they keep the operations of the formulas above in
    # order, so the results are those of the formulas written as expressions, to the bit.
    root_d = np.sqrt(d0)
    sigma = np.divide(1.0, root_d)
    g_mu, d_hat, nll = likelihood_gradients(mu0, sigma, eps, problem, X, y, dtype)
    # dhat = lambda + N hhat, N hhat = N gbar (theta - m) / sigma^2 = (c sum_s G_s eps_s) / sigma
    d_hat *= root_d
    d_hat += lam
    diff = np.subtract(d0, d_hat, out=root_d)
    # d = b2 d + (1 - b2) dhat + (1 - b2)^2 (d - dhat)^2 / (2 d)
    d = np.multiply(d0, b2)
    d_hat *= 1.0 - b2
    d += d_hat
    correction = np.multiply(diff, 0.5 * (1.0 - b2) ** 2, out=sigma)
    correction *= diff
    correction /= d0
    d += correction
    m = np.multiply(m0, b1)
    g_mu *= 1.0 - b1
    m += g_mu
    direction = np.divide(m, 1.0 - b1**t, out=g_mu)
    direction += np.multiply(lam, mu0, out=sigma)
    direction /= d
    if tau != 1.0:  # the step per unit of the noise precision (the clipping radius too)
        direction /= tau
    if hyper.clip_radius is not None:
        np.clip(direction, -hyper.clip_radius, hyper.clip_radius, out=direction)
    # the rate rescaled by h_0 + delta per parameter (delta = lambda / N differs between weights and biases)
    rate = np.divide(lam, n, out=sigma)
    rate += hyper.hess_init
    rate *= hyper.lr
    rate *= direction
    mu = np.subtract(mu0, rate)
    return State(mu, d, m, t, tau), {"nll": float(nll.mean())}


def posterior(state: State) -> DiagonalGaussian:
    return DiagonalGaussian.from_precision(state.mu.astype(float, copy=False), state.d.astype(float, copy=False))
