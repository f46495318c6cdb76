"""SLANG: stochastic, low-rank, approximate natural-gradient VI (Mishkin et al. 2018, Algorithm 1).

The posterior is ``q = N(mu, (U U^T + diag d)^{-1})`` with ``U : (D, L)``. One step, minibatch of M examples,
S weight samples, N training examples, with per-example NLL gradients ``g_si`` (the columns of ``G``):

1. ``theta_s = mu + eps_s``, ``eps_s ~ N(0, (U U^T + diag d)^{-1})`` exactly (Algorithm 3; ``lowrank.sample_noise``).
2. ``g = (N / (M S)) sum g_si``; the empirical Fisher ``G G^T`` is scaled by the same ``c = N / (M S)``.
3. Rates ``alpha_t``, ``beta_t`` decay as ``r_0 / (1 + t^decay)``.
4. ``U_new = Q_L Lambda_L^{1/2}`` from the exact top-L eigendecomposition of
   ``(1 - beta) U U^T + beta c G G^T`` (eq. 6-7); eigenvalues <= 1e-6 are dropped.
5. ``d = (1 - beta) d + beta lambda + Delta``, the diagonal correction
   ``Delta = max(0, diag((1 - beta) U U^T + beta c G G^T - U_new U_new^T))`` (eq. 9-10).
6. Momentum on the likelihood gradient, ``m = rho m + (1 - rho) g`` with bias correction, then
   ``mu = mu - alpha (U_new U_new^T + diag d)^{-1} (m_hat + lambda mu)`` (eq. 11, Woodbury).

Step 4 writes the matrix as ``B B^T`` with ``B = [sqrt(1-beta) U, sqrt(beta c) G]`` (D x K, K = L + #columns of
G) and takes whichever side is smaller: the D x D matrix ``B B^T`` directly, or the K x K Gram ``B^T B`` whose
top eigenvectors ``V`` give ``U_new = B V`` (then ``U_new^T U_new = Lambda``). On the Gram side a dense LAPACK
eigensolver costs O(K^3), which dominates a small network's step when S M is in the hundreds; from K = 120 the
eigenpairs come from block Lanczos (``lowrank.top_eig_krylov``), started from the previous U's directions and
run to a residual of 1e-10 relative (exact for the update's purposes; LAPACK remains the fallback). When applying
``B`` through the gradient factors (``FactoredGrads.matmat`` / ``rmatmat``, no Gram formed) costs fewer operations
than forming the Gram, as for small networks with many columns, Lanczos runs on ``B B^T`` itself while D is
within twice K (started at U's columns; its Ritz vectors scaled give U_new directly) and on ``B^T B`` beyond.
For a network without hidden layer
the S samples of an example share its input, so G is first reduced to ``min(S, K_out)`` columns per example
(``FactoredGrads.combine_samples``), which leaves ``G G^T`` unchanged.

Steps 2, 3 and 6 are shared with the full-Gaussian and mean-field methods (``slangcli.methods.natural``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from slangcli.gaussian import lowrank
from slangcli.gaussian import noise
from slangcli.gaussian.posteriors import LowRankGaussian
from slangcli.methods import natural
from slangcli.methods.base import Problem, hyperparameter, require, require_memory

# Below this many entries of G (D x columns) a dense matrix and plain BLAS beat the factored per-layer route
# (measured: 8 110 x 200 is 4x faster factored; 751 x 40 and 257 x 64 are as fast either way).
DENSE_G_MAX_ENTRIES = 1 << 18
EIG_FLOOR = 1e-6
# every this many steps, entries of U too small to square in U's precision are set to zero (see update)
FLUSH_EVERY = 25
DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class Hyper(natural.Hyper):
    rank: int = hyperparameter(5, "Rank L of the low-rank part of the precision (0: diagonal).", short="-L")
    # precision of the network passes and of U; the mean, the diagonal, the momentum, the Gram matrix and all
    # reductions into them stay float64
    dtype: str = hyperparameter("float64", "Precision of the network passes and of U (float32 roughly halves a "
                                "large network's step time; the mean, diagonal and all reductions stay float64).",
                                choices=DTYPES)

    def __post_init__(self):
        super().__post_init__()
        require(isinstance(self.rank, int) and self.rank >= 0, f"--rank must be a whole number >= 0, got {self.rank}")
        require(self.dtype in DTYPES, f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


# the method's declarations (slangcli.methods.base.Method): what --help says of it, the state checked for
# finiteness after every step, the cache a checkpoint does not need, and its name and rank's symbol in labels
description = "SLANG (natural gradient, low-rank plus diagonal precision)"
finite_fields = ("mu", "d")
cache_fields = ("WtW",)
display_name = "SLANG"
rank_symbol = "L"


# the D x L arrays a step holds at once at the least: U, U_new and a block of the eigensolver's basis
U_COPIES = 3


def adapt(model, hyper: Hyper):
    """A rank above the parameter count is a full-rank precision: cap it, and say so. A rank whose D x L arrays
    cannot fit in memory is refused when the fit is planned, before any step (at D = 10^6, rank 600 failed after
    18 s as "out of memory")."""
    D = model.n_params
    require_memory(U_COPIES * np.dtype(hyper.dtype).itemsize * D * min(hyper.rank, D),
                   f"--rank {hyper.rank}'s low-rank factors ({U_COPIES} arrays of {D} x {min(hyper.rank, D)})",
                   "give a smaller --rank")
    if hyper.rank <= D:
        return hyper, None
    return replace(hyper, rank=D), (f"--rank {hyper.rank} exceeds the {D} parameters; using rank {D} (a "
                                    "full-rank precision)")


class State(NamedTuple):
    mu: np.ndarray  # (D,)
    U: np.ndarray  # (D, L), Fortran-ordered (U.T is C-contiguous: each column of U is one contiguous row)
    d: np.ndarray  # (D,)
    m: np.ndarray  # (D,) momentum of the likelihood gradient
    t: int  # steps taken
    # (L, L) U^T diag(1/d) U, computed for the update's solve and reused by the next step's sampling (None:
    # compute it there)
    WtW: np.ndarray | None = None


def init(rng: np.random.Generator, problem: Problem, hyper: Hyper) -> State:
    D = problem.model.n_params
    require(hyper.rank <= D, f"--rank {hyper.rank} exceeds the number of parameters {D}")
    return State(
        mu=problem.model.init_mean(rng),
        U=np.zeros((D, hyper.rank), dtype=hyper.dtype, order="F"),
        d=np.full(D, hyper.init_precision),
        m=np.zeros(D),
        t=0,
        WtW=np.zeros((hyper.rank, hyper.rank)),
    )


def step(rng: np.random.Generator, state: State, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    """One SLANG iteration on the minibatch ``(X, y)``: sample, then :func:`update`."""
    Z = noise.sample_columns(rng, state.mu.size, hyper.samples)
    theta = lowrank.sample_noise(state.U, state.d, Z, state.WtW)  # eps : (D, S), each sample contiguous
    theta += state.mu.astype(theta.dtype, copy=False)[:, None]
    return update(state, theta.T.astype(hyper.dtype, copy=False), problem, X.astype(hyper.dtype, copy=False), y,
                  hyper)


class _DenseGrads:
    """A materialised ``G : (D, k)`` with the interface of ``FactoredGrads`` used here."""

    def __init__(self, G):
        self.G = G
        self.n_columns = G.shape[1]

    def sq_sum(self):
        return np.einsum("dk,dk->d", self.G, self.G)

    def gram(self):
        return self.G.T @ self.G

    def left(self, U):
        return U.T @ self.G

    def right(self, W):
        return self.G @ W

    def dense(self):
        return self.G


def _factored_operator_pays(grads, D: int, r: int, L: int) -> bool:
    """Whether the Krylov solver should apply ``B^T B`` through the gradient factors rather than through the
    formed Gram matrix: compares the multiply-adds of about six blocks of ``p`` products each way."""
    K = r + grads.n_columns
    n_vectors = 6 * (L + max(4, L // 4))
    through_factors = n_vectors * (grads.matmat_flops() + 4 * D * r)
    through_gram = grads.gram_flops() + D * r * K + n_vectors * 2 * K * K
    return through_factors < through_gram


def _nonzero_columns(U: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.einsum("dl,dl->l", U, U) > 0)


def _krylov_side(D: int, K: int) -> str:
    """Which space block Lanczos works in when applying ``B`` through the gradient factors: ``"D"`` for the
    eigenvectors of ``B B^T`` themselves (started at U's columns, and U_new = V Lambda^{1/2} needs no further
    product), or ``"K"`` for those of ``B^T B`` (shorter basis vectors, but one product with ``B^T`` to start and
    one with ``B`` to finish). The basis work grows with the length of its vectors, so the D side only while D is
    within twice K."""
    return "D" if D <= 2 * K else "K"


def _krylov_through_factors(U: np.ndarray, grads, a: float, b: float, L: int, warm: np.ndarray):
    """``(lam, U_new)`` from block Lanczos on ``B B^T`` or ``B^T B``, ``B = [a U, b G]``, applied through ``U``
    and the gradient factors; ``None`` if it did not converge."""
    D, r = U.shape
    K = r + grads.n_columns
    Uw = U[:, warm]
    if _krylov_side(D, K) == "D":
        def apply(X):  # B B^T X, the scalars on the small factors
            out = grads.matmat((b * b) * grads.rmatmat(X))
            out += U @ ((a * a) * (U.T @ X))
            return out

        found = lowrank.top_eig_krylov(apply, D, L, Uw)
        if found is None:
            return None
        lam, V = found
        return lam, np.asfortranarray(V * np.sqrt(np.maximum(lam, 0.0)), dtype=U.dtype)

    def apply(X):  # B^T B X
        w = a * (U @ X[:r]) + b * grads.matmat(X[r:])
        return np.vstack([a * (U.T @ w), b * grads.rmatmat(w)])

    start = np.vstack([a * (U.T @ Uw), b * grads.rmatmat(Uw)])  # B^T u_j: U's directions seen from the K side
    found = lowrank.top_eig_krylov(apply, K, L, start)
    if found is None:
        return None
    lam, V = found
    return lam, _from_gram_side(U, grads.matmat, a, b, V)


def _from_gram_side(U: np.ndarray, times_G, a: float, b: float, V: np.ndarray) -> np.ndarray:
    """``B V = a U V_U + b G V_G`` for eigenvectors ``V : (K, L)`` of ``B^T B``, Fortran-ordered like U;
    ``times_G(W)`` is ``G W`` (``grads.right`` or ``grads.matmat``).

    The scalars go on the small factors and ``a U V_U`` is added in place: at D of 1e5 and more each pass over a
    D x L array costs more than the small products, and the plain expression makes four of them. (NumPy only: a
    GEMM through SciPy's BLAS here would wake its thread pool beside NumPy's, and the two pools' spinning threads
    slowed the whole MNIST-shape step by a quarter.)"""
    r = U.shape[1]
    out = np.asfortranarray(times_G(np.ascontiguousarray(b * V[r:], dtype=U.dtype)))
    if r:
        rows = out.T  # U_new^T, C-contiguous, a view of out
        rows += np.ascontiguousarray(a * V[:r].T, dtype=U.dtype) @ U.T
    return out


def low_rank_update(U: np.ndarray, grads, beta: float, c: float, L: int) -> tuple[np.ndarray, np.ndarray]:
    """``U_new : (D, L)`` from the top-L eigenpairs of ``(1 - beta) U U^T + beta c G G^T``, and
    ``diag((1 - beta) U U^T + beta c G G^T)``, with ``grads`` a ``FactoredGrads``.

    Three exact routes, by shape (see the module docstring): the D x D matrix when D <= K; otherwise the Krylov
    solver applied through the gradient factors when that is cheaper than forming the K x K Gram; otherwise the
    formed Gram (Krylov on it when K is large, else LAPACK).
    """
    D, r = U.shape
    K = r + grads.n_columns
    a, b = math.sqrt(1.0 - beta), math.sqrt(beta * c)  # Python floats keep float32 arrays float32
    krylov = 0 < L and K < D and K >= lowrank.KRYLOV_MIN_K and _factored_operator_pays(grads, D, r, L)
    if not krylov and D * grads.n_columns <= DENSE_G_MAX_ENTRIES:
        grads = _DenseGrads(grads.dense())
    diag = (1.0 - beta) * np.einsum("dl,dl->d", U, U) + (beta * c) * grads.sq_sum()
    if L == 0:
        return U, diag
    lam = None
    if D <= K:
        B = np.hstack([a * U, b * grads.dense()])
        lam, Q = lowrank.top_eig_gram((B @ B.T).astype(float, copy=False), L)
        U_new = np.asfortranarray(Q * np.sqrt(np.maximum(lam, 0.0)), dtype=U.dtype)
    else:
        warm = _nonzero_columns(U) if K >= lowrank.KRYLOV_MIN_K else None
        if krylov:
            found = _krylov_through_factors(U, grads, a, b, L, warm)
            if found is not None:
                lam, U_new = found
        if lam is None:
            if not isinstance(grads, _DenseGrads) and D * grads.n_columns <= DENSE_G_MAX_ENTRIES:
                grads = _DenseGrads(grads.dense())
            gram = np.empty((K, K))
            gram[:r, :r] = (1.0 - beta) * (U.T @ U)
            gram[:r, r:] = (a * b) * grads.left(U)
            gram[r:, :r] = gram[:r, r:].T
            gram[r:, r:] = (beta * c) * grads.gram()
            lam, V = lowrank.top_eig_gram(gram, L, warm)
            U_new = _from_gram_side(U, grads.right, a, b, V)
    drop = lam <= EIG_FLOOR
    if drop.any():
        U_new = U_new.copy(order="F")
        U_new[:, drop] = 0.0
    return U_new, diag.astype(float, copy=False)


def update(state: State, theta: np.ndarray, problem: Problem, X: np.ndarray, y: np.ndarray, hyper: Hyper):
    """The deterministic part of a SLANG step, given the weight samples ``theta : (S, D)``."""
    t = state.t + 1
    alpha, beta = natural.rates(hyper, t)
    lam = problem.prior_precision
    nll, g, grads, c = natural.curvature_terms(problem, theta, X, y, "ef")

    U_new, diag = low_rank_update(state.U, grads, beta, c, hyper.rank)
    if t % FLUSH_EVERY == 0:
        lowrank.flush_underflow(U_new)
    d = new_diagonal(state.d, beta, lam, diag, U_new)
    WtW, mu, m = mean_update(state, U_new, d, g, lam, t, alpha, hyper.momentum)
    return State(mu, U_new, d, m, t, WtW), {"nll": float(nll.mean())}


# Steps 5 and 6 of Algorithm 1, written for one run and for a stack of runs alike (leading axes; the per-run rates
# then (B, 1)): slang_stacked trains --tune's candidates through these same functions.
def new_diagonal(d: np.ndarray, beta, lam: np.ndarray, diag: np.ndarray, U_new: np.ndarray) -> np.ndarray:
    """Step 5 (eq. 9-10): ``d_new = (1 - beta) d + beta lambda + max(0, diag - diag(U_new U_new^T))``, where
    ``diag`` is the diagonal of ``(1 - beta) U U^T + beta c G G^T`` that ``U_new U_new^T`` approximates."""
    correction = np.maximum(diag - np.einsum("...dl,...dl->...d", U_new, U_new), 0.0)
    return (1.0 - beta) * d + beta * lam + correction


def mean_update(state, U_new: np.ndarray, d: np.ndarray, g: np.ndarray, lam: np.ndarray, t: int, alpha, rho: float):
    """Step 6 (eq. 11): ``(WtW, mu, m)``, the new precision's capacitance ``U_new^T diag(1/d) U_new`` (kept for the
    next step's sampling) and the momentum step of the mean preconditioned by ``(U_new U_new^T + diag d)^{-1}``,
    by the Woodbury identity (``lowrank.solve``)."""
    WtW = lowrank.capacitance(U_new, d)
    mu, m = natural.mean_step(state.mu, state.m, g, lam, t, alpha, rho, lambda v: lowrank.solve(U_new, d, v, WtW))
    return WtW, mu, m


def posterior(state: State) -> LowRankGaussian:
    return LowRankGaussian(mean=state.mu.copy(), U=np.ascontiguousarray(state.U), d=state.d.copy())
