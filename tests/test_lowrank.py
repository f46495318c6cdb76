"""Low-rank-plus-diagonal Gaussian algebra (``slangcli.gaussian.lowrank``) against dense numpy linear algebra.

Every function works with ``P = U U^T + diag(d)`` without forming a D x D matrix; here each result is compared with
the same quantity computed from the dense ``P`` (``np.linalg.solve``, ``slogdet``, ``inv``, ``eigh``).
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.gaussian import lowrank

D = 40
# (L, number of all-zero columns of U): no U at all, rank one, a small rank, full rank, and a U whose trailing
# columns are zero (what the eigenvalue floor of a SLANG step leaves behind).
CASES = [(0, 0), (1, 0), (5, 0), (D, 0), (6, 3)]
CASE_IDS = ["L=0", "L=1", "L=5", "L=D", "L=6,3-zero-cols"]


def _problem(L: int, n_zero: int, seed: int = 0):
    """A random ``U : (D, L)`` (last ``n_zero`` columns zero) and ``d : (D,)`` in [0.5, 2], and dense ``P``."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((D, L))
    if n_zero:
        U[:, L - n_zero:] = 0.0
    d = rng.uniform(0.5, 2.0, D)
    P = U @ U.T + np.diag(d)
    return rng, U, d, P


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_solve_vector_matches_dense(L, n_zero):
    """Woodbury: ``solve(U, d, v) == P^{-1} v`` for a vector right-hand side."""
    rng, U, d, P = _problem(L, n_zero)
    v = rng.standard_normal(D)
    expected = np.linalg.solve(P, v)
    got = lowrank.solve(U, d, v)
    assert got.shape == (D,)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_solve_matrix_matches_dense(L, n_zero):
    """Woodbury with a (D, k) right-hand side solves every column: ``solve(U, d, V) == P^{-1} V``."""
    rng, U, d, P = _problem(L, n_zero, seed=1)
    V = rng.standard_normal((D, 7))
    expected = np.linalg.solve(P, V)
    got = lowrank.solve(U, d, V)
    assert got.shape == (D, 7)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_solve_and_capacitance_of_a_stack_are_each_runs(L, n_zero):
    """A stack of runs (``U : (B, D, L)``, ``d, v : (B, D)``, the stacked SLANG runs of --tune): each run's
    capacitance and solve, as dense algebra gives them."""
    problems = [_problem(L, n_zero, seed=s) for s in range(3)]
    U, d = np.stack([p[1] for p in problems]), np.stack([p[2] for p in problems])
    v = np.random.default_rng(9).standard_normal((3, D))
    got, WtW = lowrank.solve(U, d, v), lowrank.capacitance(U, d)
    assert got.shape == (3, D) and WtW.shape == (3, L, L)
    for b, (_, Ub, db, P) in enumerate(problems):
        expected = np.linalg.solve(P, v[b])
        np.testing.assert_allclose(got[b], expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())
        np.testing.assert_allclose(WtW[b], Ub.T @ (Ub / db[:, None]), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(lowrank.solve(U, d, v, WtW)[b], got[b])


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_logdet_matches_slogdet(L, n_zero):
    """Matrix determinant lemma: ``logdet(U, d) == log|P|``."""
    _, U, d, P = _problem(L, n_zero, seed=2)
    sign, expected = np.linalg.slogdet(P)
    assert sign == 1.0
    np.testing.assert_allclose(lowrank.logdet(U, d), expected, rtol=1e-11, atol=1e-10)


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_marginal_variances_match_dense_inverse(L, n_zero):
    """``marginal_variances(U, d) == diag(P^{-1})``."""
    _, U, d, P = _problem(L, n_zero, seed=3)
    expected = np.diag(np.linalg.inv(P))
    np.testing.assert_allclose(lowrank.marginal_variances(U, d), expected, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_quadratic_forms_match_dense(L, n_zero):
    """``quadratic_forms(U, d, X)[n] == x_n^T P^{-1} x_n`` for every row of X."""
    rng, U, d, P = _problem(L, n_zero, seed=4)
    X = rng.standard_normal((11, D))
    expected = np.einsum("nd,dn->n", X, np.linalg.solve(P, X.T))
    np.testing.assert_allclose(lowrank.quadratic_forms(U, d, X), expected, rtol=1e-9, atol=1e-12)


def test_an_overflowing_capacitance_matrix_is_an_error_not_a_factor():
    """U^T diag(1/d) U beyond float64 (every term 1e398): LAPACK's potrf factors a matrix of infinities without an
    error on some BLAS kernels, and every result then silently ignored U. Each routine raises LinAlgError."""
    U, d, X = np.full((4, 2), 1e149), np.full(4, 1e-100), np.ones((3, 4))
    with np.errstate(over="ignore", invalid="ignore"):
        for compute in (lambda: lowrank.solve(U, d, X[0]), lambda: lowrank.logdet(U, d),
                        lambda: lowrank.marginal_variances(U, d), lambda: lowrank.quadratic_forms(U, d, X),
                        lambda: lowrank.sample_noise(U, d, np.ones((4, 2)))):
            with pytest.raises(np.linalg.LinAlgError, match="overflows float64"):
                compute()


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_sample_noise_square_root_is_exact(L, n_zero):
    """``A = sample_noise(U, d, I)`` is a square root of the covariance: ``A A^T == P^{-1}`` to rounding.

    ``sample_noise`` is linear in ``Z``, so feeding the identity returns the matrix that maps standard normal
    draws to posterior noise; the identity ``A A^T = P^{-1}`` is deterministic and holds to rounding.
    """
    _, U, d, P = _problem(L, n_zero, seed=5)
    A = lowrank.sample_noise(U, d, np.eye(D))
    cov = np.linalg.inv(P)
    np.testing.assert_allclose(A @ A.T, cov, rtol=0, atol=1e-12 * np.abs(cov).max())


def test_sample_noise_is_linear_in_z():
    """Each column of the noise depends only on its own standard-normal column: ``f(Z)[:, s] == A z_s``."""
    rng, U, d, _ = _problem(5, 0, seed=6)
    Z = rng.standard_normal((D, 4))
    A = lowrank.sample_noise(U, d, np.eye(D))
    np.testing.assert_allclose(lowrank.sample_noise(U, d, Z), A @ Z, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("L", [0, 1, 5])
def test_sample_noise_keeps_the_layout_of_z_and_not_its_values(L):
    """A Fortran-ordered ``Z`` (how the training steps lay out their draws, ``noise.sample_columns``) gives the
    same draws as the same numbers C-ordered, and the result keeps that layout."""
    rng, U, d, _ = _problem(L, 0, seed=8)
    Zc = rng.standard_normal((D, 4))
    Zf = np.asfortranarray(Zc)
    got_c, got_f = lowrank.sample_noise(U, d, Zc), lowrank.sample_noise(np.asfortranarray(U), d, Zf)
    assert got_c.flags.c_contiguous and got_f.flags.f_contiguous
    np.testing.assert_allclose(got_f, got_c, rtol=1e-13, atol=1e-14)


def test_sample_noise_in_float32_matches_float64_to_its_rounding():
    """With a float32 ``U`` and float32 ``Z`` (SLANG's ``--dtype float32`` step) the draws are float32 and agree
    with the float64 computation to float32 rounding; a float64 ``Z`` keeps float64 draws."""
    rng, U, d, _ = _problem(5, 0, seed=9)
    U32 = np.asfortranarray(U, dtype=np.float32)
    Z32 = np.asfortranarray(rng.standard_normal((D, 3)), dtype=np.float32)
    expected = lowrank.sample_noise(U32.astype(float), d, Z32.astype(float))
    got = lowrank.sample_noise(U32, d, Z32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    assert lowrank.sample_noise(U32, d, Z32.astype(float)).dtype == np.float64


def test_sample_noise_covariance_statistical():
    """The sample covariance of n = 20000 draws matches ``P^{-1}`` within 5 standard errors per entry.

    For zero-mean Gaussian draws, the estimator ``(1/n) sum e e^T`` of entry (i, j) has variance
    ``(Sigma_ij^2 + Sigma_ii Sigma_jj) / n``. The tolerance is shown to reject the wrong covariance
    ``diag(1/d)`` (what a sampler that ignores U would produce), so the check has power.
    """
    D_small, L, n = 12, 3, 20000
    rng = np.random.default_rng(7)
    U = 1.5 * rng.standard_normal((D_small, L))
    d = rng.uniform(0.5, 2.0, D_small)
    cov = np.linalg.inv(U @ U.T + np.diag(d))
    eps = lowrank.sample_noise(U, d, rng.standard_normal((D_small, n)))
    emp = eps @ eps.T / n
    se = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / n)
    z = np.abs(emp - cov) / se
    assert z.max() < 5.0, f"max standardised error {z.max():.2f} at {np.unravel_index(z.argmax(), z.shape)}"
    z_wrong = np.abs(emp - np.diag(1.0 / d)) / se
    assert z_wrong.max() > 20.0, "the tolerance cannot tell P^-1 from diag(1/d): test has no power"


def _random_psd(K: int, seed: int) -> np.ndarray:
    """A K x K PSD matrix with well-separated eigenvalues (so eigenvectors are defined up to sign)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((K, K)))
    lam = np.linspace(0.1, 10.0, K) ** 2
    return (Q * lam) @ Q.T


# K = 40: L = 1 and 3 use the index-range solver (8 L < K), L = 5 = K / 8 and L = K the full one.
@pytest.mark.parametrize("L", [1, 3, 5, 40])
def test_top_eig_gram_matches_eigh(L):
    """``top_eig_gram(A, L)`` returns the L largest eigenvalues of A, largest first, with their eigenvectors."""
    K = 40
    A = _random_psd(K, seed=L)
    lam_all, V_all = np.linalg.eigh(A)
    lam_ref, V_ref = lam_all[::-1][:L], V_all[:, ::-1][:, :L]
    lam, V = lowrank.top_eig_gram(A, L)
    assert lam.shape == (L,) and V.shape == (K, L)
    np.testing.assert_allclose(lam, lam_ref, rtol=1e-11, atol=0)
    signs = np.sign(np.einsum("kl,kl->l", V, V_ref))
    np.testing.assert_allclose(V * signs, V_ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(A @ V, V * lam, rtol=0, atol=1e-10 * lam[0])


def _spectrum_psd(lam: np.ndarray, seed: int) -> np.ndarray:
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((lam.size, lam.size)))
    return (Q * lam) @ Q.T


KRYLOV_SPECTRA = {
    # a few dominant eigenvalues then a slowly decaying bulk, as SLANG's Gram matrices have
    "dominant": np.concatenate([[50.0, 20.0, 9.0], 1.0 / np.arange(1, 298)]),
    "geometric": 0.9 ** np.arange(300),
    # rank 12: the Krylov space becomes invariant and the block loses rank
    "low-rank": np.concatenate([np.linspace(1.0, 3.0, 12), np.zeros(288)]),
}


@pytest.mark.parametrize("spectrum", sorted(KRYLOV_SPECTRA))
@pytest.mark.parametrize("L", [1, 8])
def test_top_eig_krylov_matches_eigh(spectrum, L):
    """Block Lanczos returns the top-L eigenpairs to the documented residual tolerance: eigenvalues to rounding,
    the spanned projection ``V diag(lam) V^T`` to ~1e-9 relative, orthonormal V; or None (then the caller uses
    LAPACK). Warm-started from coordinates that are not eigenvectors, so the iteration has work to do."""
    lam_true = np.sort(KRYLOV_SPECTRA[spectrum])[::-1]
    A = _spectrum_psd(lam_true, seed=L)
    calls = []

    def apply(X):
        calls.append(X.shape[1])
        return A @ X

    found = lowrank.top_eig_krylov(apply, A.shape[0], L, np.eye(A.shape[0])[:, :L])
    assert found is not None, "converged well within K / 2 on these spectra"
    lam, V = found
    np.testing.assert_allclose(lam, lam_true[:L], rtol=1e-12, atol=1e-13 * lam_true[0])
    np.testing.assert_allclose(V.T @ V, np.eye(L), rtol=0, atol=1e-12)
    w, Q = np.linalg.eigh(A)
    P_ref = (Q[:, ::-1][:, :L] * w[::-1][:L]) @ Q[:, ::-1][:, :L].T
    np.testing.assert_allclose((V * lam) @ V.T, P_ref, rtol=0, atol=1e-9 * lam_true[0])
    assert sum(calls) < A.shape[0], "the solver must not need a full sweep of the space"


def test_top_eig_krylov_gives_up_on_a_flat_spectrum():
    """With no gap at all (the identity plus tiny noise) and a small dimension budget the solver returns None,
    rather than an unconverged answer."""
    rng = np.random.default_rng(3)
    E = rng.standard_normal((300, 300))
    A = np.eye(300) + 1e-3 * (E + E.T)
    assert lowrank.top_eig_krylov(lambda X: A @ X, 300, 8, max_dim=40) is None


def test_top_eig_krylov_zero_operator():
    """The zero matrix: eigenvalues 0, any orthonormal vectors."""
    lam, V = lowrank.top_eig_krylov(lambda X: np.zeros_like(X), 250, 3)
    assert np.all(lam == 0.0) and V.shape == (250, 3)


def test_top_eig_krylov_is_deterministic():
    A = _spectrum_psd(KRYLOV_SPECTRA["geometric"], seed=9)
    a = lowrank.top_eig_krylov(lambda X: A @ X, 300, 4, np.eye(300)[:, :2])
    b = lowrank.top_eig_krylov(lambda X: A @ X, 300, 4, np.eye(300)[:, :2])
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_top_eig_gram_rank_zero():
    """L = 0 returns empty arrays of the right shapes."""
    lam, V = lowrank.top_eig_gram(_random_psd(6, 0), 0)
    assert lam.shape == (0,) and V.shape == (6, 0)


@pytest.mark.parametrize("L,n_zero", CASES, ids=CASE_IDS)
def test_kl_to_diagonal_prior_matches_dense(L, n_zero):
    """``KL(N(m, P^{-1}) || N(0, diag(lambda)^{-1}))`` equals the dense Gaussian formula
    ``0.5 (tr(Lambda Sigma) + m^T Lambda m - D + log|Sigma_p| - log|Sigma|)``."""
    rng, U, d, P = _problem(L, n_zero, seed=8)
    mean = rng.standard_normal(D)
    lam = rng.uniform(0.2, 5.0, D)
    Sigma = np.linalg.inv(P)
    expected = 0.5 * (
        np.trace(np.diag(lam) @ Sigma) + mean @ (lam * mean) - D
        + (-np.sum(np.log(lam))) - np.linalg.slogdet(Sigma)[1]
    )
    np.testing.assert_allclose(lowrank.kl_to_diagonal_prior(mean, U, d, lam), expected, rtol=1e-10, atol=1e-10)


def test_kl_is_zero_at_the_prior():
    """The KL of the prior to itself is zero (U = 0, d = lambda, mean 0)."""
    lam = np.linspace(0.5, 3.0, 9)
    assert lowrank.kl_to_diagonal_prior(np.zeros(9), np.zeros((9, 2)), lam, lam) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("L", [1, 8, 32])
def test_krylov_warm_start_converges_in_few_operator_products(L):
    """SLANG's situation: the operator ``(1 - beta) U U^T + beta G G^T`` with ``U`` the scaled top eigenvectors
    of the previous minibatch's ``G0 G0^T`` (both minibatches sharing one decaying spectrum), started from ``U``.
    Four products of the operator suffice at every rank (the check after a block that missed the tolerance by
    far is skipped, never more), and the eigenvalues are LAPACK's. A convergence test that ignored the wanted
    pairs and skipped checks on the residual of all Ritz pairs took 13 products at L = 1."""
    rng = np.random.default_rng(0)
    n, K, beta = 400, 300, 0.05
    basis = np.linalg.qr(rng.standard_normal((n, n)))[0]
    scales = 1.0 / (1.0 + np.arange(n))

    def grads():
        return basis @ (scales[:, None] * rng.standard_normal((n, K)))

    G0 = grads()
    lam0, V0 = np.linalg.eigh(G0 @ G0.T)
    U = V0[:, -L:] * np.sqrt(lam0[-L:])
    G1 = grads()
    count = [0]

    def apply(X):
        count[0] += 1
        return (1 - beta) * U @ (U.T @ X) + beta * G1 @ (G1.T @ X)

    lam, V = lowrank.top_eig_krylov(apply, n, L, U)
    expected = np.linalg.eigvalsh((1 - beta) * U @ U.T + beta * G1 @ G1.T)[::-1][:L]
    np.testing.assert_allclose(lam, expected, rtol=1e-9)
    assert count[0] <= 4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flush_underflow_zeroes_exactly_the_entries_whose_square_underflows(dtype):
    """Entries below ``sqrt(tiny)`` of the dtype become 0 in place; every other entry, however small its square
    would be relative to the rest, keeps its bits."""
    root = np.sqrt(np.finfo(dtype).tiny)
    U = np.asfortranarray(np.array([[1.0, 0.5 * root], [-2.0 * root, -0.3 * root], [0.0, 3.0]], dtype=dtype))
    before = U.copy()
    out = lowrank.flush_underflow(U)
    assert out is U
    np.testing.assert_array_equal(U, np.array([[1.0, 0.0], [before[1, 0], 0.0], [0.0, 3.0]], dtype=dtype))
    assert U[1, 0] != 0.0  # just above the threshold: kept
