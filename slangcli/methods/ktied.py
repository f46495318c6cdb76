"""k-tied Normal training (Swiatkowski et al., Section 3): Bayes by Backprop with tied standard deviations.

The posterior is mean field, ``q(theta) = N(mu, diag(sigma^2))``, but the standard deviations of each weight
matrix ``W_l : (m, n)`` are the rank-k product ``sigma_{W_l} = U_l V_l^T`` (eq. 5), ``U_l : (m, k)``,
``V_l : (n, k)``, kept positive by training their logarithms ``a = log U``, ``b = log V``. Biases keep a
``log_sigma`` each (the paper ties only weight matrices). Variational parameters per layer: ``m n`` means and
``k (m + n)`` standard-deviation parameters instead of ``m n``.

The objective and its estimate are those of Bayes by Backprop (``slangcli.methods.reparam``): with
``g = dF/dsigma_{W_l}`` as an ``(m, n)`` matrix (likelihood part plus the exact KL part
``beta_t (lambda sigma - 1 / sigma)``, computed from the materialised sigma), the chain rule through
``sigma_ij = sum_k U_ik V_jk`` gives

    dF/da = U * (g V),    dF/db = V * (g^T U)

(``*`` elementwise): two ``(m, n) x (n, k)`` products per layer, O(k m n), negligible beside the minibatch's
O(M m n). Adam updates ``(mu, a, b, log_sigma_bias)`` as one vector.

Initialisation (Appendix A.2): ``mu`` from the model's layer initialisation (He for ReLU), and
``a, b = 0.5 (log sigma0 - log k) + N(0, init_noise^2)`` so that ``sigma = sum_k U_ik V_jk`` starts near
``sigma0 = init_std``, with the noise breaking the symmetry between the k columns; bias ``sigma = sigma0``.

A layer with ``min(m, n) < k`` gets ``k = min(m, n)``: that rank already holds every positive matrix (a positive
``A`` is ``U V^T`` with ``V = I + delta 1 1^T`` and ``U = A V^{-T} > 0`` for small delta), so a larger k adds
nothing but redundancy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import KTiedGaussian
from slangcli.methods.base import Problem, hyperparameter, require
from slangcli.methods.reparam import AdamHyper, adam, adam_moments, kl_weight, likelihood_gradients
from slangcli.models import MLP


@dataclass(frozen=True)
class Hyper(AdamHyper):
    rank: int = hyperparameter(2, "Rank k of each weight matrix's standard deviations U V^T (at most min(m, n) "
                                  "per layer).", short="-L")
    init_noise: float = hyperparameter(0.1, "Standard deviation of the noise added to log U and log V at "
                                            "initialisation (breaks symmetry).")

    def __post_init__(self):
        super().__post_init__()
        require(isinstance(self.rank, (int, np.integer)) and self.rank >= 1,
                f"--rank must be a whole number >= 1 for ktied, got {self.rank}")
        require(0 <= self.init_noise < np.inf, f"--init-noise must be >= 0 and finite, got {self.init_noise}")


def layer_ranks(sizes, rank: int) -> tuple[int, ...]:
    """The rank of each layer's tie: ``min(rank, m, n)``."""
    return tuple(min(rank, m, n) for m, n in zip(sizes[:-1], sizes[1:]))


def adapt(model: MLP, hyper: Hyper):
    """``(hyper, note)``: the hyperparameters unchanged (each layer caps its own rank), and what ``slang fit`` says
    when ``--rank`` exceeds some layer's ``min(m, n)``."""
    ranks = layer_ranks(model.sizes, hyper.rank)
    cut = [f"layer {l + 1} ({m} x {n}): rank {k}" for l, (m, n, k) in
           enumerate(zip(model.sizes[:-1], model.sizes[1:], ranks)) if k < hyper.rank]
    if not cut:
        return hyper, None
    return hyper, (f"--rank {hyper.rank} exceeds min(m, n) of some weight matrices; using " + ", ".join(cut)
            + " (that rank already has the mean field's capacity)")


class Slices(NamedTuple):
    """Where each layer's ``log U`` and ``log V`` sit in the flat vector of log-scale parameters; the bias
    ``log_sigma`` of all layers follows them."""

    a: list  # slice of log U_l, (m k) entries, row-major (m, k)
    b: list  # slice of log V_l, (n k) entries, row-major (n, k)
    bias: slice
    ranks: tuple


def slices(sizes, ranks) -> Slices:
    a, b, start = [], [], 0
    for m, n, k in zip(sizes[:-1], sizes[1:], ranks):
        a.append(slice(start, start + m * k))
        b.append(slice(a[-1].stop, a[-1].stop + n * k))
        start = b[-1].stop
    return Slices(a, b, slice(start, start + sum(sizes[1:])), tuple(ranks))


# the method's declarations (slangcli.methods.base.Method); std_gradients below makes it take --snr
description = "k-tied Normal: bbb with sigma = U V^T per weight matrix"
finite_fields = ("mu", "log_scale")
display_name = "k-tied"
rank_symbol = "k"


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    log_scale: np.ndarray  # (P,): log U_l, log V_l per layer, then the biases' log sigma (see ``slices``)
    m: np.ndarray  # (D + P,) Adam's first moment of the gradients in (mu, log_scale), float32
    v: np.ndarray  # (D + P,) Adam's second moment, float32
    t: int  # steps taken
    sizes: tuple  # the network's layer sizes
    ranks: tuple  # k of each layer


def _factors(state: State):
    """``(U_l, V_l)`` per layer and the biases' sigma."""
    sl = slices(state.sizes, state.ranks)
    U = [np.exp(state.log_scale[s]).reshape(-1, k) for s, k in zip(sl.a, sl.ranks)]
    V = [np.exp(state.log_scale[s]).reshape(-1, k) for s, k in zip(sl.b, sl.ranks)]
    return U, V, np.exp(state.log_scale[sl.bias])


def _sigma(model: MLP, U, V, bias_sigma) -> np.ndarray:
    """The materialised standard deviations ``(D,)``."""
    out = np.empty(model.n_params)
    start = 0
    for s, u, v in zip(model.layout.layers, U, V):
        out[s.W] = (u @ v.T).ravel()
        out[s.b] = bias_sigma[start : start + s.n_out]
        start += s.n_out
    return out


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    model = problem.model
    mu = model.init_mean(rng)  # drawn first, so a ktied and a bbb run of the same seed start from the same mean
    ranks = layer_ranks(model.sizes, hyper.rank)
    sl = slices(model.sizes, ranks)
    log_scale = np.empty(sl.bias.stop)
    for sa, sb, k in zip(sl.a, sl.b, ranks):
        for s in (sa, sb):
            log_scale[s] = 0.5 * (np.log(hyper.init_std) - np.log(k)) + hyper.init_noise * rng.standard_normal(
                s.stop - s.start)
    log_scale[sl.bias] = np.log(hyper.init_std)
    n = mu.size + log_scale.size
    m, v = adam_moments(n)
    return State(mu=mu, log_scale=log_scale, m=m, v=v, t=0, sizes=tuple(model.sizes),
                 ranks=ranks)


def gradient(state: State, eps: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, kl_weight: float = 1.0):
    """The reparameterisation estimate of ``(dF/dmu : (D,), dF/dlog_scale : (P,))`` at noise ``eps : (S, D)``
    with KL weight ``beta_t``, and the per-example NLL ``(S, M)`` at the samples."""
    model, lam = problem.model, problem.prior_precision
    U, V, bias_sigma = _factors(state)
    sigma = _sigma(model, U, V, bias_sigma)
    g_mu, g_sigma, nll = likelihood_gradients(state.mu, sigma, eps, problem, X, y)
    kl_mu = np.multiply(lam, state.mu)
    kl_mu *= kl_weight
    g_mu += kl_mu
    # dF/dsigma = g_sigma + beta (lambda sigma - 1 / sigma): the KL term's gradient from the materialised sigma,
    # over all D entries at once (in place: the step is memory-bound at these sizes)
    d_sigma = np.multiply(lam, sigma)
    d_sigma -= np.reciprocal(sigma)
    d_sigma *= kl_weight
    d_sigma += g_sigma
    sl = slices(state.sizes, state.ranks)
    g_scale = np.empty(state.log_scale.size)
    start = sl.bias.start
    for s, u, v, sa, sb in zip(model.layout.layers, U, V, sl.a, sl.b):
        g = d_sigma[s.W].reshape(s.n_in, s.n_out)
        g_scale[sa] = (u * (g @ v)).ravel()
        g_scale[sb] = (v * (g.T @ u)).ravel()
        np.multiply(d_sigma[s.b], sigma[s.b], out=g_scale[start : start + s.n_out])  # d/dlog sigma_b
        start += s.n_out
    return g_mu, g_scale, nll


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    t = state.t + 1
    D = state.mu.size
    eps = noise.standard_normal(rng, (hyper.samples, D))
    g_mu, g_scale, nll = gradient(state, eps, problem, X, y, kl_weight(t, hyper.kl_anneal_steps))
    delta, m, v = adam(np.concatenate([g_mu, g_scale]), state.m, state.v, t, hyper)
    new = state._replace(mu=state.mu - delta[:D], log_scale=state.log_scale - delta[D:], m=m, v=v, t=t)
    return new, {"nll": float(nll.mean())}


def std_gradients(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray,
                  hyper: Hyper, kl: float | None = None) -> list[np.ndarray]:
    """One draw of the gradient in the tied standard-deviation parameters of each weight matrix (``log U_l`` and
    ``log V_l``, ``k (m + n)`` entries; biases not included), at the current state, for the gradient SNR. ``kl`` overrides the KL weight of the
    step (0: the expected log-likelihood's part alone)."""
    eps = noise.standard_normal(rng, (hyper.samples, state.mu.size))
    _, g_scale, _ = gradient(state, eps, problem, X, y,
                             kl_weight(state.t + 1, hyper.kl_anneal_steps) if kl is None else kl)
    sl = slices(state.sizes, state.ranks)
    return [np.concatenate([g_scale[a], g_scale[b]]) for a, b in zip(sl.a, sl.b)]


def posterior(state: State) -> KTiedGaussian:
    U, V, _ = _factors(state)
    sl = slices(state.sizes, state.ranks)
    return KTiedGaussian(mean=state.mu.copy(), U=tuple(U), V=tuple(V),
                         bias_log_sigma=state.log_scale[sl.bias].copy(), floor=np.zeros(len(U)),
                         sizes=tuple(state.sizes))
