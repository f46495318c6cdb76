"""Equal-weight Gaussian mixtures with a common component variance: the Monte-Carlo posterior predictive of
regression.

With weight samples ``theta_s ~ q`` (s = 1..S) and noise precision ``tau``, the predictive distribution of the
target at an input is the mixture

    p(y) = (1/S) sum_s N(y | f_s, sigma^2),   f_s = f(x; theta_s),   sigma = 1 / sqrt(tau),

with CDF ``F(y) = (1/S) sum_s Phi((y - f_s) / sigma)``, mean ``f_bar = (1/S) sum_s f_s`` and variance
``sigma^2 + (1/S) sum_s (f_s - f_bar)^2`` (noise plus the spread of the samples: aleatoric plus epistemic).

``F`` is continuous and strictly increasing, so the ``p``-quantile is the unique root of ``F(y) = p``. It lies
between the components' own ``p``-quantiles, ``min_s f_s + sigma z_p`` and ``max_s f_s + sigma z_p``
(``z_p = Phi^{-1}(p)``: at the first every component's CDF is at most p, at the second at least p), which gives a
bracket for a safeguarded Newton iteration (a Newton step when it stays inside the bracket and at least halves the
previous step, else bisection). It never leaves the bracket; most examples converge, to the rounding level of
float64, in 5 to 10 iterations (measured with S = 1000, N = 2000), and a few whose Newton steps keep landing on the
bracket's end fall back to bisection (at most about 60 halvings). The quantiles are those of the mixture itself,
not of a Gaussian with its mean and variance.

All functions work on ``f : (S, N)``, N mixtures at once (one per example). ``sigma`` is one number, one per
sample, ``(S, 1)``, or one per sample and example, ``(S, N)``: the predictive of a mixture of posteriors (``slang fit
--members K``) pools its members' draws, each with its member's noise precision, and a noise model (``slang fit
--noise-model``) gives every prediction its own; the mixture's variance is then ``mean_s sigma_s^2 + (1/S)
sum_s (f_s - f_bar)^2``, and the bracket above holds with each component's own ``sigma_s z_p``.
"""

from __future__ import annotations

import numpy as np
import scipy.special

# Newton-bisection iterations: bisection alone halves the bracket each time, so 200 reach the resolution of float64
# from any bracket; Newton usually stops after 5 to 10
_MAX_ITER = 200
_SQRT_2PI = np.sqrt(2.0 * np.pi)


def cdf(y, f: np.ndarray, sigma) -> np.ndarray:
    """``F_n(y_n) = (1/S) sum_s Phi((y_n - f_sn) / sigma)`` for ``y : (N,)``, ``f : (S, N)``."""
    return scipy.special.ndtr((np.asarray(y) - f) / sigma).mean(axis=0)


def _noise_variance(sigma):
    """The mixture's noise variance: ``sigma^2``, or the mean of the samples' ``sigma_s^2`` (per example when they
    have one per example)."""
    if np.ndim(sigma) == 0:
        return sigma**2
    return float(np.mean(sigma**2)) if sigma.shape[1] == 1 else np.mean(sigma**2, axis=0)


def _columns(sigma, index):
    """``sigma`` for the examples ``index``: itself unless it has one per example."""
    return sigma if np.ndim(sigma) == 0 or sigma.shape[1] == 1 else sigma[:, index]


def _cdf_and_pdf(x, f, sigma):
    u = (x - f) / sigma
    if np.ndim(sigma) == 0:
        return scipy.special.ndtr(u).mean(axis=0), np.exp(-0.5 * u * u).mean(axis=0) / (sigma * _SQRT_2PI)
    return scipy.special.ndtr(u).mean(axis=0), (np.exp(-0.5 * u * u) / sigma).mean(axis=0) / _SQRT_2PI


def quantile(p: float, f: np.ndarray, sigma) -> np.ndarray:
    """The ``p``-quantiles ``(N,)`` of the N mixtures of ``f : (S, N)`` (``0 < p < 1``), to float64 resolution."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile level must lie strictly between 0 and 1, got {p}")
    f = np.asarray(f, dtype=float)
    shift = sigma * scipy.special.ndtri(p)
    if np.ndim(sigma) == 0:
        lo, hi = f.min(axis=0) + shift, f.max(axis=0) + shift
    else:  # each component's own quantile
        lo, hi = (f + shift).min(axis=0), (f + shift).max(axis=0)
    # start from the quantile of the Gaussian with the mixture's mean and variance: close whenever the samples'
    # spread is small against sigma, and inside the bracket after clipping in every case
    x = np.clip(f.mean(axis=0) + np.sqrt(_noise_variance(sigma) + f.var(axis=0)) * scipy.special.ndtri(p), lo, hi)
    scale = sigma if np.ndim(sigma) == 0 else float(np.max(sigma))
    last_step = hi - lo
    active = np.flatnonzero(hi > lo)  # a bracket of width 0 (all samples equal) is the answer already
    for _ in range(_MAX_ITER):
        if active.size == 0:
            break
        fa, xa, la, ha = f[:, active], x[active], lo[active], hi[active]
        F, dens = _cdf_and_pdf(xa, fa, _columns(sigma, active))
        g = F - p
        la = np.where(g < 0, xa, la)
        ha = np.where(g > 0, xa, ha)
        # far out in a gap between widely separated samples the density underflows to 0: no Newton step there
        newton = xa - np.divide(g, dens, out=np.full_like(g, np.inf), where=dens > 0)
        # Newton only while it stays in the bracket and at least halves the step before (as in Numerical Recipes'
        # rtsafe): otherwise bisect, so that the bracket shrinks geometrically even where F is nearly flat
        use_newton = (newton > la) & (newton < ha) & (np.abs(newton - xa) <= 0.5 * last_step[active])
        # converged: a Newton step (or the bracket) at the rounding level of x, or an exact root. The Newton test
        # comes first because a step of an ulp can land on the bracket's end and would otherwise be refused
        tol = 4.0 * np.finfo(float).eps * (np.abs(xa) + scale)
        settled = np.abs(newton - xa) <= tol
        done = settled | (ha - la <= tol) | (g == 0)
        new = np.where(use_newton | settled, newton, 0.5 * (la + ha))
        new = np.where(g == 0, xa, new)
        last_step[active] = np.abs(new - xa)
        x[active], lo[active], hi[active] = new, la, ha
        active = active[~done]
    return x


def moments(f: np.ndarray, sigma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean ``(N,)``, epistemic and total standard deviations ``(N,)`` of the mixtures of ``f : (S, N)``.

    The epistemic part is the population standard deviation of the samples (divisor S), so that
    ``total^2 = sigma^2 + epistemic^2`` is exactly the variance of the mixture as sampled (``sigma^2`` the mean of
    the samples' own when they have one each). For the pooled draws of a mixture of posteriors, equally many from
    each member, this is the law of total variance: the members' mean variance plus the variance of their means.
    """
    mean = f.mean(axis=0)
    epistemic = np.sqrt(np.mean((f - mean) ** 2, axis=0))
    return mean, epistemic, np.sqrt(_noise_variance(sigma) + epistemic**2)
