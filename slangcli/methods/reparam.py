"""What the reparameterisation-gradient methods share: Bayes by Backprop (``bbb``) and k-tied training (``ktied``).

Both fit a diagonal Gaussian ``q(theta) = N(mu, diag(sigma^2))`` by Adam on the negative ELBO

    F(mu, sigma) = E_q[sum_n NLL_n(theta)] + beta_t KL(q || N(0, diag(lambda)^{-1})),

and differ only in how ``sigma : (D,)`` is parameterised (``exp(log_sigma)``, or ``U V^T`` per weight matrix).
With a minibatch of M of the N examples, S samples ``theta_s = mu + sigma * eps_s``, ``G_s = sum_i g_si`` the
minibatch gradient at sample s and ``c = N / (M S)``, the unbiased estimates in ``(mu, sigma)`` are

    dF/dmu    ~ c sum_s G_s          + beta_t lambda mu
    dF/dsigma ~ c sum_s G_s * eps_s  + beta_t (lambda sigma - 1 / sigma)

(:func:`likelihood_gradients` returns the two sums; each method adds its KL part and applies the chain rule to
its own parameters). ``beta_t`` is the KL weight: 1, or with linear KL annealing ``min(1, t / T)`` at step t
(k-tied paper, Section 3.1 and Appendix A.2).

The gradient signal-to-noise ratio of the standard-deviation parameters (:func:`snr`) is computed here from
independent draws of the gradient at fixed parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slangcli.methods.base import Problem, hyperparameter, require


@dataclass(frozen=True)
class AdamHyper:
    """Hyperparameters of every Adam-trained reparameterisation method (each subclass may add its own)."""

    samples: int = hyperparameter(12, "Monte-Carlo weight samples per step.", short="-S")
    lr: float = hyperparameter(0.01, "Adam's learning rate.")
    beta1: float = hyperparameter(0.9, "Adam's decay rate of the first moment.")
    beta2: float = hyperparameter(0.999, "Adam's decay rate of the second moment.")
    eps: float = hyperparameter(1e-8, "Adam's epsilon.")
    init_std: float = hyperparameter(0.01, "Initial standard deviation of q.")
    kl_anneal_steps: int = hyperparameter(0, "Linear KL annealing: the KL term is scaled by min(1, t / N) at step "
                                             "t (0: none).")

    def __post_init__(self):
        require(isinstance(self.samples, (int, np.integer)) and self.samples >= 1,
                f"--samples must be a whole number >= 1, got {self.samples}")
        require(0 < self.lr < np.inf, f"--lr must be positive and finite, got {self.lr}")
        require(0 <= self.beta1 < 1, f"--beta1 must be in [0, 1), got {self.beta1}")
        require(0 <= self.beta2 < 1, f"--beta2 must be in [0, 1), got {self.beta2}")
        require(0 < self.eps < np.inf, f"--eps must be positive and finite, got {self.eps}")
        require(0 < self.init_std < np.inf, f"--init-std must be positive and finite, got {self.init_std}")
        require(isinstance(self.kl_anneal_steps, (int, np.integer)) and self.kl_anneal_steps >= 0,
                f"--kl-anneal-steps must be a whole number >= 0, got {self.kl_anneal_steps}")


def kl_weight(t: int, anneal_steps: int) -> float:
    """``beta_t = min(1, t / T)`` at step ``t >= 1`` (linear KL annealing over T steps); 1 when ``T = 0``."""
    return 1.0 if anneal_steps <= 0 else min(1.0, t / anneal_steps)


def likelihood_gradients(mu: np.ndarray, sigma: np.ndarray, eps: np.ndarray, problem: Problem, X: np.ndarray,
                         y: np.ndarray, dtype=np.float64):
    """``(c sum_s G_s, c sum_s G_s * eps_s)``, each ``(D,)``: the expected-NLL parts of ``dF/dmu`` and
    ``dF/dsigma`` at noise ``eps : (S, D)``; and the per-example NLL ``(S, M)`` at the samples.

    The samples, the network pass and the two sums are in ``dtype`` (the inputs ``X`` are rounded to it; ``mu``
    and ``sigma`` are expected in it). The sums are new arrays, the caller's to overwrite."""
    S, M = eps.shape[0], X.shape[0]
    # the noise arrives in float32 (slangcli.gaussian.noise): one exact cast for a float64 pass, because a product with
    # a float32 operand costs twice a float64 one and the noise is used twice
    eps = eps.astype(dtype, copy=False)
    theta = sigma * eps
    theta += mu
    nll, fg = problem.model.per_example_grads(theta, X.astype(dtype, copy=False), y)
    Gs = fg.sample_sums(scale=problem.n_data / (M * S))  # (S, D), c already applied
    if S == 1:  # the common case (one sample per step): no pass to sum over samples
        g_mu = Gs[0]
        g_sigma = g_mu * eps[0]
    else:
        g_mu = Gs.sum(0)
        g_sigma = np.einsum("sd,sd->d", Gs, eps)
    return g_mu, g_sigma, nll


# Adam's moments are kept in float32. The step is a sequence of memory-bound passes over arrays of 2 D numbers,
# and Adam makes eleven of them: in float32 they move half the bytes (the update takes 0.6 ms instead of 1.4 ms at
# D = 1e5 on this project's machines). The moments are running averages of noisy gradients, used only to scale
# the step; float32's 7 digits are more than their own noise warrants. The gradient and the parameters stay in
# float64.
MOMENT_DTYPE = np.float32


def adam_moments(n) -> tuple[np.ndarray, np.ndarray]:
    """Adam's zero-initialised first and second moments for parameters of shape ``n``."""
    return np.zeros(n, dtype=MOMENT_DTYPE), np.zeros(n, dtype=MOMENT_DTYPE)


def adam(grad: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, hyper: AdamHyper):
    """One Adam update (Kingma and Ba 2014, with bias correction) at step ``t >= 1``: returns ``(delta, m, v)``
    in the moments' dtype (:data:`MOMENT_DTYPE`); the parameters move by ``-delta``.

    ``delta = lr m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m / c1``, ``v_hat = v / c2``: the bias corrections
    are folded into scalars, ``delta = (lr sqrt(c2) / c1) m / (sqrt(v) + eps sqrt(c2))``, and the passes are made
    in place: at these sizes (D of 1e5 to 1e6) the step is a sequence of memory-bound passes, where an array
    division costs several multiplications and every fresh temporary array costs its page faults.
    """
    b1, b2 = hyper.beta1, hyper.beta2
    dtype = m.dtype.type
    g = grad.astype(dtype)
    # m' = b1 m + (1 - b1) g = m + (1 - b1) (g - m), and likewise v' (in g's array): three and four passes
    m_new = np.subtract(g, m)
    m_new *= dtype(1.0 - b1)
    m_new += m
    v_new = np.multiply(g, g, out=g)
    v_new -= v
    v_new *= dtype(1.0 - b2)
    v_new += v
    root_c2 = np.sqrt(1.0 - b2**t)
    delta = np.sqrt(v_new)
    delta += dtype(hyper.eps * root_c2)
    np.divide(m_new, delta, out=delta)
    delta *= dtype(hyper.lr * root_c2 / (1.0 - b1**t))
    return delta, m_new, v_new


# A parameter whose gradient draws spread by less than this fraction of their mean is deterministic up to
# rounding: e.g. a weight on an always-zero pixel or from a dead unit, whose gradient is the exact KL term plus a
# likelihood term of 0 or of order 1e-20, which rounding turns into a spread of 1e-16. Its ratio (1e15 and more)
# would measure float64 rounding, not gradient noise, and would dominate any average over parameters.
DETERMINISTIC = 1e-10


def snr(draws: np.ndarray) -> tuple[float, float]:
    """Gradient signal-to-noise ratio of a group of parameters from ``R >= 2`` independent gradient draws
    ``draws : (R, P)`` at the same parameters.

    Returns ``(snr, snr_paper)``, each averaged over the P parameters:

    - ``snr = |E[g]| / std[g]``, the usual (dimensionless) definition;
    - ``snr_paper = E[g^2] / Var[g^2]``, the formula printed in the k-tied Normal paper (footnote 2), for
      comparison with its numbers (it is not scale-free: it grows as the gradients shrink).

    Moments are over the R draws (variances with ``ddof = 1``). Parameters whose draws do not vary beyond
    rounding (``std[g] <= DETERMINISTIC |E[g]|``, including ``std = 0``) have no meaningful ratio and are left out
    of both averages; ``nan`` if every parameter is.
    """
    if draws.shape[0] < 2:
        raise ValueError("the gradient SNR needs at least two draws")
    mean, std = draws.mean(0), draws.std(0, ddof=1)
    ok = std > DETERMINISTIC * np.abs(mean)
    if not ok.any():
        return float("nan"), float("nan")
    sq = draws[:, ok] ** 2
    sq_var = sq.var(0, ddof=1)
    ok_sq = sq_var > 0  # g taking values +-a only: g^2 constant although g varies
    paper = float(np.mean(sq.mean(0)[ok_sq] / sq_var[ok_sq])) if ok_sq.any() else float("nan")
    return float(np.mean(np.abs(mean[ok]) / std[ok])), paper
