"""SLANG runs stacked: B runs of one network on the same data, minibatches and weight noise, which differ only in
their noise precision, prior precision and rates, advanced together one step at a time.

Cross-validation (``slangcli.training.tuning``) trains every candidate of a grid on a fold from the same seed, so the
candidates' runs share everything random: the initial mean, the minibatch order and the standard normals of every
step. Stacked, their ``B S`` weight samples go through the network in one forward and backward pass, and the rest
of the step (the Gram matrices and their eigendecompositions, the diagonal, the Woodbury solves) runs on arrays
with a leading axis of B. Each run's arithmetic is ``slang.step`` on its Gram route (for L = 1 the top eigenpair
comes from powers of the Gram stack, checked to the Krylov route's residual tolerance, LAPACK otherwise), so each
stacked run equals its separate run to rounding (``tests/test_slang_stacked.py``). Where the stack needs no layout
of its own, the step is slang's code called on it: the rates (``base.decayed``), the precision's diagonal
(``slang.new_diagonal``) and the mean step (``slang.mean_update``: ``natural.mean_step`` with the Woodbury solve of
``lowrank.solve``, which takes a stack). This module holds what is laid out for B runs: the sampling, the gradient
factors, the Gram matrices and their eigenpairs, and ``U_new``. For the small networks of cross-validation, where a
step's time is mostly the fixed cost of some forty NumPy and LAPACK calls, B runs stacked cost a fraction of B
separate runs.

A Gaussian likelihood's noise precision tau enters a run only as a scale: the network is evaluated at tau = 1,
and since the NLL's gradient is ``tau (f - y) df/dtheta``, run b's gradient columns are ``tau_b`` times the
shared ones (its NLL is ``tau_b (nll_1 - log(2 pi) / 2) - log(tau_b) / 2 + log(2 pi) / 2``).

A run whose state or loss stops being finite is frozen at its last finite state and reported as diverged; the
others go on unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from slangcli import streams
from slangcli.gaussian import lowrank
from slangcli.gaussian import noise
from slangcli.methods import slang
from slangcli.methods.base import Problem, decayed
from slangcli.models import MLP

HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


@dataclass(frozen=True)
class Runs:
    """What tells the B stacked runs apart: per run a prior precision vector, a noise precision (Gaussian
    likelihood; ignored otherwise) and the initial rates ``lr`` and ``beta``."""

    prior_precision: np.ndarray  # (B, D)
    noise_precision: np.ndarray  # (B,)
    lr: np.ndarray  # (B,)
    beta: np.ndarray  # (B,)

    @property
    def size(self) -> int:
        return len(self.lr)


class Stack(NamedTuple):
    mu: np.ndarray  # (B, D)
    U: np.ndarray  # (B, D, L)
    d: np.ndarray  # (B, D)
    m: np.ndarray  # (B, D)
    t: int
    WtW: np.ndarray  # (B, L, L)


def stackable(model: MLP, hyper: slang.Hyper, batch_size: int) -> bool:
    """Whether runs of ``model`` with ``hyper`` can be stacked: a network with a hidden layer (a linear model's
    samples are first combined per example), float64, rank >= 1, and the shapes for which ``slang.step`` itself
    takes the dense-Gram route with LAPACK (``K = L + S M`` below the Krylov threshold and below D)."""
    K = hyper.rank + hyper.samples * batch_size
    return (not model.is_linear and hyper.dtype == "float64" and hyper.rank >= 1 and K < model.n_params
            and K < lowrank.KRYLOV_MIN_K
            and model.n_params * hyper.samples * batch_size <= slang.DENSE_G_MAX_ENTRIES)


def init(rng: np.random.Generator, problem: Problem, hyper: slang.Hyper, B: int) -> Stack:
    """``B`` copies of ``slang.init``'s state (the same initial mean from the same generator)."""
    s = slang.init(rng, problem, hyper)
    L = hyper.rank
    return Stack(mu=np.tile(s.mu, (B, 1)), U=np.zeros((B, s.mu.size, L)), d=np.tile(s.d, (B, 1)),
                 m=np.zeros((B, s.mu.size)), t=0, WtW=np.zeros((B, L, L)))


def sample_noise(U: np.ndarray, d: np.ndarray, Z: np.ndarray, WtW: np.ndarray) -> np.ndarray:
    """``lowrank.sample_noise`` for each run: the shared standard normals ``Z : (D, S)`` mapped to draws, laid out
    ``(B, S, D)`` (D innermost, as the network wants its weight samples), with covariance
    ``(U_b U_b^T + diag d_b)^{-1}``."""
    rs = 1.0 / np.sqrt(d)
    if WtW.shape[1] == 1:
        s, R = WtW[:, 0], np.ones_like(WtW)
    else:
        s, R = np.linalg.eigh(WtW)
    root = np.sqrt(1.0 + np.maximum(s, 0.0))
    c = -1.0 / (root * (1.0 + root))
    eps = Z.T[None] * rs[:, None, :]  # (B, S, D): z / sqrt(d)
    t = (eps @ U) @ R  # (B, S, L): (R^T W^T z)^T
    if U.shape[2] == 1:  # an outer product per run: broadcasting beats a batched matmul with inner dimension 1
        eps += (t * c[:, None, :]) * (U[:, :, 0] * (rs * rs))[:, None, :]
    else:
        eps += ((t * c[:, None, :]) @ R.transpose(0, 2, 1)) @ (U * (rs * rs)[:, :, None]).transpose(0, 2, 1)
    return eps


class _Factors:
    """The stack's per-example gradients at tau = 1, per run and layer, never materialised as ``G``.

    Run b's columns ``(s, i)`` are rows ``k = s M + i`` of ``A_l : (S M, n_in + 1)`` (layer l's input with a ones
    column for the bias; the first layer's is shared by every run) and ``Delta_l : (B, S M, n_out)``; its gradient
    column k holds ``a_k delta_k^T`` in the ``[W; b]`` rows of layer l. Every product the step needs is a product
    with these factors (as ``slangcli.models.FactoredGrads`` does for one run): ``G^T G = sum_l (A_l A_l^T) *
    (Delta_l Delta_l^T)``, and ``G^T U``, ``G V``, ``diag(G G^T)`` and ``G 1`` layer by layer."""

    def __init__(self, fg, B: int):
        self.layers = []
        for s, A, Dl in zip(fg.layout.layers, fg.inputs, fg.deltas):
            S_all, M = Dl.shape[:2]
            rows = np.tile(A, (S_all // B, 1)) if A.ndim == 2 else A.reshape(B, -1, A.shape[-1])
            aug = np.empty((*rows.shape[:-1], rows.shape[-1] + 1))
            aug[..., :-1] = rows
            aug[..., -1] = 1.0
            self.layers.append((slice(s.W.start, s.b.stop), s.n_in + 1, s.n_out, aug, Dl.reshape(B, -1, s.n_out)))

    def gram(self) -> np.ndarray:
        return sum((A @ A.swapaxes(-1, -2)) * (Dl @ Dl.swapaxes(-1, -2)) for _, _, _, A, Dl in self.layers)

    def left(self, U: np.ndarray) -> np.ndarray:
        """``G^T U : (B, S M, L)`` for ``U : (B, D, L)``."""
        B, L = U.shape[0], U.shape[2]
        out = 0.0
        for rows, n_in, n_out, A, Dl in self.layers:
            AU = A @ U[:, rows].reshape(B, n_in, n_out * L)  # (B, S M, n_out L)
            out = out + np.einsum("bkol,bko->bkl", AU.reshape(*AU.shape[:2], n_out, L), Dl)
        return out

    def right(self, V: np.ndarray, D: int) -> np.ndarray:
        """``G V : (B, D, L)`` for ``V : (B, S M, L)``."""
        B, SM, L = V.shape
        out = np.empty((B, D, L))
        for rows, n_in, n_out, A, Dl in self.layers:
            DV = (Dl[:, :, :, None] * V[:, :, None, :]).reshape(B, SM, n_out * L)
            out[:, rows] = (A.swapaxes(-1, -2) @ DV).reshape(B, n_in * n_out, L)
        return out

    def sq_sum(self, D: int) -> np.ndarray:
        """``diag(G G^T) : (B, D)``."""
        return self._products(D, square=True)

    def sum(self, D: int) -> np.ndarray:
        """``G 1 : (B, D)``."""
        return self._products(D, square=False)

    def _products(self, D: int, square: bool) -> np.ndarray:
        B = self.layers[0][4].shape[0]
        out = np.empty((B, D))
        for rows, n_in, n_out, A, Dl in self.layers:
            if square:
                A, Dl = A * A, Dl * Dl
            out[:, rows] = (A.swapaxes(-1, -2) @ Dl).reshape(B, n_in * n_out)
        return out


# repeated squarings of the scaled Gram matrix in the top-1 eigensolver: the power 2^6 = 64 damps the second
# eigenvector's share by (lam_2 / lam_1)^64, below 1e-10 for lam_2 / lam_1 < 0.7
SQUARINGS = 6


def _top_eig1(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top eigenpair of each PSD ``gram[b]``, by powers of the whole stack: ``(gram / trace)^64`` by six
    batched squarings, its largest column normalised, then two power steps with ``gram`` itself. Accepted where the
    residual ``||gram v - theta v||`` is within ``lowrank.KRYLOV_TOL`` of ``theta`` (the Krylov route's criterion
    in ``slang.step``: an eigenvector's angle is then within 1e-10 ``theta / gap``). Returns ``(lam : (B, 1),
    V : (B, K, 1), ok : (B,))``; where not ok (close top eigenvalues, a zero matrix), the caller asks LAPACK."""
    trace = np.einsum("bkk->b", gram)
    P = gram / np.maximum(trace, np.finfo(float).tiny)[:, None, None]
    for _ in range(SQUARINGS):
        P = P @ P
    norms = np.einsum("bkj,bkj->bj", P, P)
    v = P[np.arange(len(P)), :, np.argmax(norms, axis=1)]
    for _ in range(2):
        v = v / np.maximum(np.linalg.norm(v, axis=1), np.finfo(float).tiny)[:, None]
        w = np.einsum("bkj,bj->bk", gram, v)
        theta = np.einsum("bk,bk->b", v, w)
        residual = np.linalg.norm(w - theta[:, None] * v, axis=1)
        v = w
    v = v / np.maximum(np.linalg.norm(v, axis=1), np.finfo(float).tiny)[:, None]
    ok = np.isfinite(residual) & (theta > 0) & (residual <= lowrank.KRYLOV_TOL * theta)
    return theta[:, None], v[:, :, None], ok


def _top_eig(gram: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-L eigenpairs of each ``gram[b]``, largest first: for L = 1 by :func:`_top_eig1`, else (and where that
    does not converge) by the LAPACK solver ``slang.step`` uses at this shape."""
    K = gram.shape[1]
    if 8 * L >= K:
        lam, V = np.linalg.eigh(gram)
        return lam[:, ::-1][:, :L], V[:, :, ::-1][:, :, :L]
    if L == 1:
        lam, V, ok = _top_eig1(gram)
        todo = np.flatnonzero(~ok)
    else:
        lam, V = np.empty((len(gram), L)), np.empty((len(gram), K, L))
        todo = range(len(gram))
    for i in todo:
        lam[i], V[i] = lowrank.top_eig_gram(gram[i], L)
    return lam, V


def step(rng: np.random.Generator, st: Stack, model: MLP, runs: Runs, X: np.ndarray, y: np.ndarray,
         hyper: slang.Hyper, n_data: int) -> tuple[Stack, np.ndarray]:
    """One SLANG step of every run on the minibatch ``(X, y)``; ``model`` is the network at noise precision 1.
    Returns the new stack and each run's mean minibatch NLL ``(B,)``."""
    B, D = st.mu.shape
    S, L, M = hyper.samples, hyper.rank, len(X)
    SM, K = S * M, hyper.rank + S * M
    t = st.t + 1
    Z = noise.sample_columns(rng, D, S)
    theta = (st.mu[:, None, :] + sample_noise(st.U, st.d, Z, st.WtW)).reshape(B * S, D)
    nll, fg = model.per_example_grads(theta, X, y)
    gaussian = model.likelihood == "gaussian"
    tau = runs.noise_precision if gaussian else np.ones(B)
    nll = nll.reshape(B, SM).mean(1)
    if gaussian:
        nll = tau * (nll - HALF_LOG_2PI) - 0.5 * np.log(tau) + HALF_LOG_2PI
    G = _Factors(fg, B)
    c = n_data / SM
    alpha, beta = decayed(runs.lr, t, hyper.decay), decayed(runs.beta, t, hyper.decay)  # natural.rates, per run
    a, b = np.sqrt(1.0 - beta), np.sqrt(beta * c) * tau  # B = [a U, b G_1], G_1 the gradients at tau = 1
    g = (c * tau)[:, None] * G.sum(D)

    U = st.U
    gram = np.empty((B, K, K))
    gram[:, :L, :L] = (1.0 - beta)[:, None, None] * (U.transpose(0, 2, 1) @ U)
    gram[:, L:, :L] = (a * b)[:, None, None] * G.left(U)
    gram[:, :L, L:] = gram[:, L:, :L].transpose(0, 2, 1)
    gram[:, L:, L:] = (b * b)[:, None, None] * G.gram()
    bad = ~np.isfinite(gram).all(axis=(1, 2))
    if bad.any():
        gram[bad] = np.eye(K)  # a diverged run: any finite matrix keeps LAPACK going; the run is frozen below
    lam, V = _top_eig(gram, L)
    U_new = a[:, None, None] * (U @ V[:, :L]) + b[:, None, None] * G.right(V[:, L:], D)
    U_new *= (lam > slang.EIG_FLOOR)[:, None, :]
    diag = (1.0 - beta)[:, None] * np.einsum("bdl,bdl->bd", U, U) + (b * b)[:, None] * G.sq_sum(D)
    # steps 5 and 6 are slang's own, on the stack
    d = slang.new_diagonal(st.d, beta[:, None], runs.prior_precision, diag, U_new)
    WtW, mu, m = slang.mean_update(st, U_new, d, g, runs.prior_precision, t, alpha[:, None], hyper.momentum)
    return Stack(mu, U_new, d, m, t, WtW), nll


def _finite(st: Stack, nll: np.ndarray) -> np.ndarray:
    return (np.isfinite(nll) & np.isfinite(st.mu).all(1) & np.isfinite(st.d).all(1)
            & np.isfinite(st.U).all(axis=(1, 2)))


def run(runs: Runs, model: MLP, hyper: slang.Hyper, X: np.ndarray, y: np.ndarray, *, seed: int, batch_size: int,
        n_steps: int, stop=None) -> list[slang.State | None]:
    """Train the stacked runs for ``n_steps`` steps from ``slang.init``, with the minibatches and generators of
    ``train.run`` for ``seed``. Returns each run's final state, or None for a run that diverged; when ``stop()``
    turns true after a step, the states so far (``t < n_steps``)."""
    n, B = len(X), runs.size
    model1 = replace(model, noise_precision=1.0) if model.likelihood == "gaussian" else model
    st = init(streams.derive_rng(seed, streams.INIT), Problem(model1, runs.prior_precision[0], n), hyper, B)
    alive = np.ones(B, dtype=bool)
    batches = streams.Minibatches(seed, n, batch_size)  # train.run's
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        while st.t < n_steps and not (stop is not None and st.t and stop()):
            _, _, idx = batches(st.t)
            new, nll = step(streams.derive_rng(seed, streams.STEP, st.t), st, model1, runs, X[idx], y[idx], hyper, n)
            ok = _finite(new, nll)
            if not ok.all():
                alive &= ok
                keep = ~ok  # frozen at the last finite state, so no NaN reaches the next step's LAPACK calls
                new = Stack(*(np.where(keep.reshape(-1, *[1] * (x.ndim - 1)), old, x)
                              for x, old in zip(new[:4], st[:4])), new.t,
                            np.where(keep[:, None, None], st.WtW, new.WtW))
            st = new
    return [slang.State(st.mu[i].copy(), np.asfortranarray(st.U[i]), st.d[i].copy(), st.m[i].copy(), st.t,
                        st.WtW[i].copy()) if alive[i] else None for i in range(B)]
