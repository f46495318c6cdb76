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

import math

import numpy as np
import scipy.linalg


# rows per block when reducing over D: keeps the (block, L) temporaries in cache instead of writing D x L arrays
BLOCK = 16384


def weighted_gram(U: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``U^T diag(w) U : (L, L)``, in row blocks so no D x L temporary is formed."""
    L = U.shape[1]
    out = np.zeros((L, L))
    for lo in range(0, U.shape[0], BLOCK):
        Ub = U[lo : lo + BLOCK]
        out += Ub.T @ (Ub * w[lo : lo + BLOCK, None].astype(U.dtype, copy=False))  # float64 sum over blocks
    return out


def capacitance(U: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``W^T W = U^T diag(1/d) U : (L, L)``; the capacitance matrix is ``I + W^T W``. For a stack of runs
    (``U : (B, D, L)``, ``d : (B, D)``; ``slangcli.methods.slang_stacked``) each run's, ``(B, L, L)``, by one batched
    product."""
    if U.ndim == 3:
        return U.transpose(0, 2, 1) @ (U / d[:, :, None])
    return weighted_gram(U, 1.0 / d)


def _check_finite(C: np.ndarray) -> None:
    """Raise ``LinAlgError`` where the capacitance matrix (or ``W^T W``) overflowed.

    LAPACK does not check its input: OpenBLAS's potrf factors a matrix of infinities without an error (a diagonal
    of inf, zeros below it), and the 1 x 1 eigenpair of inf gives a zero correction, so every result computed from
    it would silently drop U. One sum tells whether any entry is not finite (about 1 us, as much as the
    factorisation itself at the L of a few)."""
    if not math.isfinite(C.sum()):
        raise np.linalg.LinAlgError("the capacitance matrix overflows float64")


def _cholesky_capacitance(U, d, WtW=None):
    """The lower Cholesky factor of ``C = I + W^T W``.

    LAPACK's potrf called directly: at the L of a few that SLANG's steps use, NumPy's and SciPy's wrappers
    (``np.linalg.cholesky``, ``np.diag_indices_from``, ``scipy.linalg.cho_solve``) cost 5-25 us a call against 1 us
    for the routine, several times per step."""
    C = capacitance(U, d) if WtW is None else WtW.copy()
    C.flat[:: C.shape[0] + 1] += 1.0
    _check_finite(C)
    chol, info = scipy.linalg.lapack.dpotrf(C, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("the capacitance matrix is not positive definite")
    return chol


def solve(U: np.ndarray, d: np.ndarray, v: np.ndarray, WtW: np.ndarray | None = None) -> np.ndarray:
    """``(U U^T + diag d)^{-1} v`` for ``v : (D,)`` or ``(D, k)`` by the Woodbury identity, O(D L^2):
    ``v / d - diag(1/d) U (I + W^T W)^{-1} U^T (v / d)``.

    ``WtW`` may pass a precomputed :func:`capacitance` of the same ``(U, d)``. For a stack of runs (``U : (B, D,
    L)``, ``d, v : (B, D)``; ``slangcli.methods.slang_stacked``) each run's, the B small systems by one batched LU
    solve (a LAPACK call per run would cost more than the runs' arithmetic).
    """
    dd = d if v.ndim == d.ndim else d[..., None]
    vd = v / dd
    if U.shape[-1] == 0:
        return vd
    if U.ndim == 3:
        C = (capacitance(U, d) if WtW is None else WtW) + np.eye(U.shape[2])
        w = np.linalg.solve(C, U.transpose(0, 2, 1) @ vd[:, :, None])  # (B, L, 1)
        return vd - (U @ w)[:, :, 0] / dd
    chol = _cholesky_capacitance(U, d, WtW)
    # products with U in U's precision (no float64 copy of a float32 U); the result is float64
    w, info = scipy.linalg.lapack.dpotrs(chol, U.T @ vd.astype(U.dtype, copy=False), lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potrs failed (info {info})")
    return vd - (U @ w.astype(U.dtype, copy=False)) / dd


def logdet(U: np.ndarray, d: np.ndarray) -> float:
    """``log |U U^T + diag d|`` by the matrix determinant lemma."""
    out = float(np.sum(np.log(d)))
    if U.shape[1]:
        chol = _cholesky_capacitance(U, d)
        out += 2.0 * float(np.sum(np.log(np.diag(chol))))
    return out


def marginal_variances(U: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``diag((U U^T + diag d)^{-1})`` : (D,), without forming the covariance."""
    if U.shape[1] == 0:
        return 1.0 / d
    chol = _cholesky_capacitance(U, d)
    out = 1.0 / d
    for lo in range(0, U.shape[0], BLOCK):
        T = scipy.linalg.solve_triangular(chol, (U[lo : lo + BLOCK] / d[lo : lo + BLOCK, None]).T, lower=True,
                                          check_finite=False)  # (L, block)
        out[lo : lo + BLOCK] -= np.einsum("lb,lb->b", T, T)
    return out


def quadratic_forms(U: np.ndarray, d: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``x_n^T (U U^T + diag d)^{-1} x_n`` for every row of ``X : (N, D)``, O(N D L)."""
    q = np.einsum("nd,nd->n", X, X / d)
    if U.shape[1]:
        chol = _cholesky_capacitance(U, d)
        T = scipy.linalg.solve_triangular(chol, ((X / d) @ U).T, lower=True, check_finite=False)  # (L, N)
        q = q - np.einsum("ln,ln->n", T, T)
    return q


def sample_noise(U: np.ndarray, d: np.ndarray, Z: np.ndarray, WtW: np.ndarray | None = None) -> np.ndarray:
    """Map standard normal ``Z : (D, S)`` to draws ``eps : (D, S)`` with covariance ``(U U^T + diag d)^{-1}``.

    Exact (SLANG Algorithm 3, in the form given in the module docstring); O(D L^2 + D L S), three passes over U
    and no D x L temporary. ``WtW`` may pass a precomputed :func:`capacitance` of the same ``(U, d)``. The result
    has ``Z``'s memory layout: give a Fortran-ordered ``Z`` (``noise.sample_columns``) for contiguous samples,
    which keeps every pass over the ``(D, S)`` arrays on contiguous memory.
    """
    if U.shape[1] == 0:
        return Z * (1.0 / np.sqrt(d))[:, None]
    # in U's precision (or Z's, if higher): at D of 1e5 and more every pass over a (D, S) array is a memory pass,
    # and a float32 U is there to halve them
    rs = (1.0 / np.sqrt(d)).astype(U.dtype, copy=False)
    WtW = capacitance(U, d) if WtW is None else WtW
    _check_finite(WtW)
    if WtW.shape == (1, 1):  # LAPACK's eigenpair of a 1 x 1 matrix, without the ~20 us of np.linalg.eigh's call
        s, R = WtW[0].copy(), np.ones((1, 1), dtype=WtW.dtype)
    else:
        s, R = np.linalg.eigh(WtW)
    s = np.maximum(s, 0.0)  # W^T W is PSD; rounding can push a zero eigenvalue slightly negative
    root = np.sqrt(1.0 + s)
    c = -1.0 / (root * (1.0 + root))
    Zs = Z * rs[:, None]
    t = R @ (c[:, None] * (R.T @ (U.T @ Zs.astype(U.dtype, copy=False))))  # (L, S): R diag(c) R^T W^T z
    t = t.astype(U.dtype, copy=False)
    # U t laid out like Zs: for Fortran order computed as (t^T U^T)^T, U.T being C-contiguous for SLANG's U
    Ut = (t.T @ U.T).T if Zs.flags.f_contiguous else U @ t
    Ut *= (rs * rs)[:, None]
    Zs += Ut
    return Zs


def flush_underflow(U: np.ndarray) -> np.ndarray:
    """Set to zero, in place, the entries of ``U`` whose square underflows ``U``'s precision (``|u| < sqrt(tiny)``,
    about 1e-19 in float32); returns ``U``.

    A parameter whose per-example gradients are all zero (a weight from a pixel that is always 0, a unit that
    never fires) keeps its row of SLANG's U only through ``(1 - beta) U U^T``, so the row shrinks step after step and
    never reaches zero: by mid-training on MNIST a quarter of a float32 U was below 1e-19. Products and squares of
    such numbers land in the subnormal range, which the processor handles in microcode, and the step slowed from
    0.114 to 0.14 s. What is removed is below ``tiny / |U|_max`` relative to every entry of ``U U^T`` it touches,
    far beneath the rounding of the precision it is added to."""
    if U.size:
        U[np.abs(U) < np.sqrt(np.finfo(U.dtype).tiny)] = 0.0
    return U


def top_eig_gram(gram: np.ndarray, L: int, warm=None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``L`` eigenpairs of a symmetric PSD ``gram : (K, K)``, largest first.

    With ``warm`` coordinates given (the previous U's columns among the Gram's) and ``K >= KRYLOV_MIN_K``, tries
    :func:`top_eig_krylov` first, started from the Gram's columns at those coordinates (one free power step from
    the unit vectors). Otherwise (or if it does not converge) exact LAPACK: ``syevx`` computes only the wanted index
    range, several times faster than a full ``syevd`` when L is a small fraction of K; from about L >= K / 8 the
    full divide-and-conquer solver is faster (measured on one core for K from 65 to 832). Returns
    ``(lam : (L,), V : (K, L))``.
    """
    K = gram.shape[0]
    if L == 0:
        return np.zeros(0), np.zeros((K, 0))
    if warm is not None and K >= KRYLOV_MIN_K:
        found = top_eig_krylov(lambda X: gram @ X, K, L, gram[:, warm])
        if found is not None:
            return found
    if L > K:
        # fewer eigenpairs exist than asked for: the rest are zero (their columns of U come out zero)
        lam, V = top_eig_gram(gram, K)
        return np.concatenate([lam, np.zeros(L - K)]), np.hstack([V, np.zeros((K, L - K))])
    if 8 * L >= K:
        lam, V = np.linalg.eigh(gram)
        lam, V = lam[K - L:], V[:, K - L:]
    else:
        # LAPACK's syevx directly: scipy.linalg.eigh's route to it costs about twice as much at these orders
        # (K = 41, L = 1: 73 -> 46 us; K = 90 to 200, L = 8: 0.97 -> 0.45 ms and 3.5 -> 1.9 ms), same results
        lam, V, found, _, info = scipy.linalg.lapack.dsyevx(np.asarray(gram, dtype=float), compute_v=1, range="I",
                                                            il=K - L + 1, iu=K, lower=1)
        if info != 0 or found != L:
            raise np.linalg.LinAlgError(f"syevx failed (info {info}, {found} of {L} eigenpairs)")
        lam, V = lam[:L], V[:, :L]
    return lam[::-1], V[:, ::-1]


# Residual tolerance of the Krylov eigensolver, relative to the largest eigenvalue. An eigenvalue is then correct to
# about tol^2 lam_1 / gap and an eigenvector's angle to about tol lam_1 / gap, far below what a stochastic update
# can notice, and within rounding of LAPACK for well-separated eigenvalues.
KRYLOV_TOL = 1e-10
# below this order a dense LAPACK eigensolver is as fast (measured on one core: K = 65 to 200, L = 1 to 8)
KRYLOV_MIN_K = 120
# block Lanczos skips the convergence check (an eigendecomposition of the projected matrix) of the block after one
# whose residual exceeded the tolerance this many times: no block has been seen to gain that much
SKIP_CHECK = 1e5
_START_BLOCKS: dict = {}


def _start_block(n: int, p: int, start) -> np.ndarray:
    """Deterministic starting block: the given ``start`` directions (at most ``p``), the rest fixed pseudo-random
    columns (drawn once per shape from a constant seed, so every call and every run starts alike)."""
    key = (n, p)
    if key not in _START_BLOCKS:
        _START_BLOCKS[key] = np.random.default_rng(0x51A4).standard_normal((n, p))
    X0 = _START_BLOCKS[key].copy()
    if start is not None:
        j = min(start.shape[1], p)
        X0[:, :j] = start[:, :j]
    return X0


def _cholqr(W: np.ndarray) -> np.ndarray:
    """``W R^{-1}`` with ``W^T W = R^T R``; raises ``LinAlgError`` where ``W`` has (numerically) lost rank.

    ``R^{-1}`` is formed explicitly (a p x p triangular inverse) and applied by one GEMM: for the tall thin blocks
    here that is 2-3x faster than a triangular solve with ``W^T`` as right-hand sides, and the second pass of
    :func:`_orthonormalize_against` absorbs the slightly larger rounding."""
    R = np.linalg.cholesky(W.T @ W).T
    R_inv, info = scipy.linalg.lapack.dtrtri(R, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError("singular Cholesky factor")
    return W @ R_inv


def _orthonormalize_against(W: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning ``W`` off ``span(Q)`` (``Q`` orthonormal), for a ``W`` already projected once
    off ``span(Q)`` by the caller.

    Cholesky QR, a second projection, Cholesky QR again (with the caller's projection, block Gram-Schmidt twice
    with CholQR2: as accurate as Householder QR here and several times faster for tall thin blocks). The second
    projection matters when ``W`` is small beside what was projected away, as near convergence: normalising then
    magnifies the rounding left along ``Q``. Where ``W`` has lost rank Cholesky fails, and Householder QR with
    further projections supplies arbitrary new directions orthogonal to ``Q``.
    """
    try:
        W = _cholqr(W)
        return _cholqr(W - Q @ (Q.T @ W))
    except np.linalg.LinAlgError:
        W = np.linalg.qr(W - Q @ (Q.T @ W))[0]
        return np.linalg.qr(W - Q @ (Q.T @ W))[0]


def _orthonormal_start(X: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning the start block ``X``.

    SLANG's start block is mostly the previous eigenvectors, already orthogonal: with its columns normalised, its
    Gram matrix ``G`` is then near the identity, and one Cholesky QR is as accurate as two (its loss of
    orthogonality grows with the square of the condition number, at most 3 when ``||G - I||_F < 1/2``). Otherwise
    (a cold start, fill columns far from orthogonal) the general two-pass route."""
    norms = np.sqrt(np.einsum("kl,kl->l", X, X))
    if np.all(norms > 0):
        Xn = X / norms
        G = Xn.T @ Xn
        dev = G - np.eye(G.shape[0])
        if np.all(np.isfinite(G)) and np.sqrt(np.einsum("kl,kl->", dev, dev)) < 0.5:
            R = np.linalg.cholesky(G).T
            R_inv, info = scipy.linalg.lapack.dtrtri(R, lower=0)
            if info == 0:
                return Xn @ R_inv
    return _orthonormalize_against(X, X[:, :0])


def top_eig_krylov(apply, n: int, L: int, start=None, *, tol: float = KRYLOV_TOL, max_dim: int | None = None):
    """Top-``L`` eigenpairs of a symmetric PSD operator on ``R^n`` given by ``apply(V : (n, p)) -> (n, p)``.

    Block Lanczos with full reorthogonalisation and Rayleigh-Ritz on the whole Krylov basis, stopped when every
    wanted Ritz pair has residual ``||A v - theta v|| <= tol * theta_1``. ``start : (n, j)`` gives starting
    directions (SLANG: the previous step's eigenvectors, which usually stay dominant), filled up with fixed
    pseudo-random columns. The block has ``p = L + 1`` columns when the start covers all ``L`` wanted directions
    (a start that close gains about four orders of residual per block whatever the padding, measured on SLANG's
    updates) and ``L + max(4, L // 4)`` otherwise. Returns ``(lam : (L,), V : (n, L))`` largest first, or ``None``
    if the basis would exceed ``max_dim`` (default n / 2) before converging; the caller then falls back to a dense
    solver.

    Residuals come without forming ``A V``: with the basis ``Q`` orthonormal, ``A Q - Q T`` is zero except in the
    last block, where it is the remainder ``W`` that the next basis block orthonormalises, so the residual of the
    Ritz pair ``(theta, Q s)`` is ``||W s_last||``, ``s_last`` the last block's rows of ``s``. After a check
    that misses the tolerance by more than ``SKIP_CHECK`` the next block goes unchecked.
    """
    warm = 0 if start is None else start.shape[1]
    p = min(L + 1 if warm >= L else L + max(4, L // 4), n)
    max_dim = n // 2 if max_dim is None else max_dim
    n_blocks = max_dim // p
    if n_blocks < 2:
        return None
    Q = np.empty((n, n_blocks * p), order="F")
    # T[:m, :m] is written whole by the time it is read: each block writes its block row and column up to m
    T = np.empty((n_blocks * p, n_blocks * p))
    Q[:, :p] = _orthonormal_start(_start_block(n, p, start))
    b = 0
    check = True
    while True:
        m = b + p
        W = apply(Q[:, b:m])
        C = Q[:, :m].T @ W  # the new block column of T = Q^T A Q
        T[:m, b:m] = C
        T[b:m, :m] = C.T
        W = W - Q[:, :m] @ C
        last = m + p > n_blocks * p
        if check or last:
            theta, S = np.linalg.eigh(T[:m, :m])
            theta, S = theta[: m - L - 1 : -1], S[:, : m - L - 1 : -1]
            R = W @ S[b:m]
            res = np.sqrt(np.einsum("kl,kl->l", R, R))
            bound = tol * max(theta[0], np.finfo(float).tiny)
            if np.all(res <= bound):
                return theta, Q[:, :m] @ S
            if last:
                return None
            # the residual falls by at most about four orders of magnitude per block (measured on SLANG's
            # updates): this far above the tolerance the next block cannot converge, so its Rayleigh-Ritz is skipped
            check = res.max() <= SKIP_CHECK * bound
        else:
            check = True
        Q[:, m : m + p] = _orthonormalize_against(W, Q[:, :m])
        b = m


def kl_to_diagonal_prior(mean: np.ndarray, U: np.ndarray, d: np.ndarray, prior_precision: np.ndarray) -> float:
    """``KL(N(mean, (U U^T + diag d)^{-1}) || N(0, diag(prior_precision)^{-1}))``, O(D L^2)."""
    var = marginal_variances(U, d)
    return 0.5 * float(
        np.sum(prior_precision * var) + np.sum(prior_precision * mean**2) - mean.size
        + logdet(U, d) - np.sum(np.log(prior_precision))
    )
