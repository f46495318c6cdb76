"""Algebra of a Gaussian whose precision is low-rank plus diagonal, never forming a D x D matrix.

The precision is ``P = U U^T + diag(d)`` with ``U : (D, L)`` and ``d : (D,) > 0`` (SLANG, eq. 3). Writing
``W = d^{-1/2} U`` (each row of U divided by sqrt(d)) gives ``P = d^{1/2} (I + W W^T) d^{1/2}``, and every
operation reduces to the L x L "capacitance" matrix ``C = I_L + W^T W = I_L + U^T diag(1/d) U``:

- solve (Woodbury identity, SLANG Algorithm 2):
  ``P^{-1} v = v / d - (U / d) C^{-1} U^T (v / d)``
- log-determinant (matrix determinant lemma): ``log|P| = sum(log d) + log|C|``
- marginal variances: ``diag(P^{-1}) = 1/d - rowsum(((U/d) C^{-1}) * (U/d))``
- exact sampling (SLANG Algorithm 3, derived here through the eigendecomposition ``W^T W = R diag(s) R^T``):
  ``(I + W W^T)^{-1/2} = I + W R diag(c) R^T W^T`` with ``c_k = -1 / (sqrt(1+s_k) (1 + sqrt(1+s_k)))``,
  the limit of ``((1+s)^{-1/2} - 1) / s`` that stays finite at ``s = 0``; so ``eps = d^{-1/2} (z + W R (c * R^T W^T z))``
  has covariance ``P^{-1}`` exactly. Cost O(D L^2 + D L S).

All functions accept ``L = 0`` (a diagonal Gaussian).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg


def _capacitance(U: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``U / d`` (D, L) and the Cholesky factor (lower) of ``I + U^T diag(1/d) U`` (L, L)."""
    Ud = U / d[:, None]
    C = U.T @ Ud
    C[np.diag_indices_from(C)] += 1.0
    return Ud, np.linalg.cholesky(C)


def solve(U: np.ndarray, d: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``(U U^T + diag d)^{-1} v`` for ``v : (D,)`` or ``(D, k)`` by the Woodbury identity, O(D L^2)."""
    vd = v / (d if v.ndim == 1 else d[:, None])
    if U.shape[1] == 0:
        return vd
    Ud, chol = _capacitance(U, d)
    w = scipy.linalg.cho_solve((chol, True), U.T @ vd, check_finite=False)
    return vd - Ud @ w


def logdet(U: np.ndarray, d: np.ndarray) -> float:
    """``log |U U^T + diag d|`` by the matrix determinant lemma."""
    out = float(np.sum(np.log(d)))
    if U.shape[1]:
        _, chol = _capacitance(U, d)
        out += 2.0 * float(np.sum(np.log(np.diag(chol))))
    return out


def marginal_variances(U: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``diag((U U^T + diag d)^{-1})`` : (D,), without forming the covariance."""
    if U.shape[1] == 0:
        return 1.0 / d
    Ud, chol = _capacitance(U, d)
    T = scipy.linalg.solve_triangular(chol, Ud.T, lower=True, check_finite=False)  # (L, D)
    return 1.0 / d - np.einsum("ld,ld->d", T, T)


def quadratic_forms(U: np.ndarray, d: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``x_n^T (U U^T + diag d)^{-1} x_n`` for every row of ``X : (N, D)``, O(N D L)."""
    q = np.einsum("nd,nd->n", X, X / d)
    if U.shape[1]:
        Ud, chol = _capacitance(U, d)
        T = scipy.linalg.solve_triangular(chol, (X @ Ud).T, lower=True, check_finite=False)  # (L, N)
        q = q - np.einsum("ln,ln->n", T, T)
    return q


def sample_noise(U: np.ndarray, d: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Map standard normal ``Z : (D, S)`` to draws ``eps : (D, S)`` with covariance ``(U U^T + diag d)^{-1}``.

    Exact (SLANG Algorithm 3, in the form given in the module docstring); O(D L^2 + D L S).
    """
    rs = 1.0 / np.sqrt(d)
    if U.shape[1] == 0:
        return Z * rs[:, None]
    W = U * rs[:, None]
    s, R = np.linalg.eigh(W.T @ W)
    s = np.maximum(s, 0.0)  # W^T W is PSD; rounding can push a zero eigenvalue slightly negative
    root = np.sqrt(1.0 + s)
    c = -1.0 / (root * (1.0 + root))
    WR = W @ R
    return (Z + WR @ (c[:, None] * (WR.T @ Z))) * rs[:, None]


def top_eig_gram(gram: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``L`` eigenpairs of a symmetric PSD ``gram : (K, K)``, largest first.

    Exact. LAPACK's ``syevx`` computes only the wanted index range, several times faster than a full ``syevd``
    when L is a small fraction of K; from about L >= K / 8 the full divide-and-conquer solver is faster (measured on
    one core for K from 65 to 832). Returns ``(lam : (L,), V : (K, L))``.
    """
    K = gram.shape[0]
    if L == 0:
        return np.zeros(0), np.zeros((K, 0))
    if L > K:
        # fewer eigenpairs exist than asked for: the rest are zero (their columns of U come out zero)
        lam, V = top_eig_gram(gram, K)
        return np.concatenate([lam, np.zeros(L - K)]), np.hstack([V, np.zeros((K, L - K))])
    if 8 * L >= K:
        lam, V = np.linalg.eigh(gram)
        lam, V = lam[K - L:], V[:, K - L:]
    else:
        lam, V = scipy.linalg.eigh(gram, subset_by_index=[K - L, K - 1], driver="evx", check_finite=False)
    return lam[::-1], V[:, ::-1]


def kl_to_diagonal_prior(mean: np.ndarray, U: np.ndarray, d: np.ndarray, prior_precision: np.ndarray) -> float:
    """``KL(N(mean, (U U^T + diag d)^{-1}) || N(0, diag(prior_precision)^{-1}))``, O(D L^2)."""
    var = marginal_variances(U, d)
    return 0.5 * float(
        np.sum(prior_precision * var) + np.sum(prior_precision * mean**2) - mean.size
        + logdet(U, d) - np.sum(np.log(prior_precision))
    )
