"""Exactness checks of the SLANG update (``slangcli.methods.slang``) against dense reference updates.

The reference updates are written here from the formulas (SLANG paper eq. 2, as the reference README states it),
with dense D x D matrices and the dense per-example gradient matrix ``G : (D, S M)``. With ``c = N / (M S)``,
``g = c G 1``, step ``t`` (from 1), ``alpha_t = alpha_0 / (1 + t^decay)``, ``beta_t`` likewise:

    P_new  = (1 - beta) P + beta (c G G^T + diag(lambda))
    m      = rho m + (1 - rho) g,    m_hat = m / (1 - rho^t)
    mu_new = mu - alpha P_new^{-1} (m_hat + lambda mu)

SLANG keeps ``P = U U^T + diag(d)`` with ``U : (D, L)``. With L = D it must reproduce the dense update; with
L = 0 the diagonal (mean-field) one; with small L it must not (negative control), yet its diagonal is always exact.
Both updates are fed the same weight samples ``theta``, drawn from the SLANG state.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.errors import ConfigError
from slangcli.gaussian import lowrank
from slangcli.gaussian import noise
from slangcli.methods import slang
from slangcli.methods.base import Problem, decayed
from slangcli.models import MLP

N_DATA, BATCH, SAMPLES = 200, 10, 3
RHO = 0.9


# ---------------------------------------------------------------------------------------------------- helpers
def _problem(sizes, activation="tanh", likelihood="bernoulli", seed=0):
    """A model, a data set of N_DATA examples and a prior with different weight / bias precisions."""
    rng = np.random.default_rng(seed)
    model = MLP(sizes, activation, likelihood)
    X = rng.standard_normal((N_DATA, sizes[0]))
    if likelihood == "categorical":
        y = rng.integers(0, sizes[-1], N_DATA)
    else:
        y = (X[:, 0] + 0.5 * rng.standard_normal(N_DATA) > 0).astype(float)
    return Problem(model, model.prior_precision(2.0, 0.5), N_DATA), X, y


def _start_state(D: int, L: int, seed: int, u_scale: float = 0.3) -> slang.State:
    """A non-trivial starting state: random mean, random U, random d (so the first step already mixes them)."""
    rng = np.random.default_rng(seed)
    return slang.State(
        mu=0.3 * rng.standard_normal(D),
        U=u_scale * rng.standard_normal((D, L)),
        d=rng.uniform(0.5, 2.0, D),
        m=np.zeros(D),
        t=0,
    )


def _precision(state: slang.State) -> np.ndarray:
    return state.U @ state.U.T + np.diag(state.d)


def _rates(hyper: slang.Hyper, t: int) -> tuple[float, float]:
    """alpha_t, beta_t written out (independently of ``decayed``)."""
    return hyper.lr / (1.0 + t**hyper.decay), hyper.beta / (1.0 + t**hyper.decay)


def _dense_terms(problem: Problem, theta: np.ndarray, X: np.ndarray, y: np.ndarray):
    """Scaled gradient ``g = c G 1`` and scaled empirical Fisher ``c G G^T`` from the dense G."""
    S, M = theta.shape[0], X.shape[0]
    c = problem.n_data / (M * S)
    _, fg = problem.model.per_example_grads(theta, X, y)
    G = fg.dense()
    return c * G.sum(axis=1), c * (G @ G.T)


def _dense_full_step(mu, P, m, t, theta, problem, X, y, hyper):
    """The full-Gaussian natural-gradient update (paper eq. 2), dense."""
    alpha, beta = _rates(hyper, t)
    lam = problem.prior_precision
    g, F = _dense_terms(problem, theta, X, y)
    P_new = (1.0 - beta) * P + beta * (F + np.diag(lam))
    m = RHO * m + (1.0 - RHO) * g
    m_hat = m / (1.0 - RHO**t)
    mu_new = mu - alpha * np.linalg.solve(P_new, m_hat + lam * mu)
    return mu_new, P_new, m


def _dense_diag_step(mu, dvec, m, t, theta, problem, X, y, hyper):
    """The mean-field (diagonal) natural-gradient update, dense."""
    alpha, beta = _rates(hyper, t)
    lam = problem.prior_precision
    g, F = _dense_terms(problem, theta, X, y)
    d_new = (1.0 - beta) * dvec + beta * (lam + np.diag(F))
    m = RHO * m + (1.0 - RHO) * g
    m_hat = m / (1.0 - RHO**t)
    mu_new = mu - alpha * (m_hat + lam * mu) / d_new
    return mu_new, d_new, m


def _shared_steps(problem, X, y, hyper, state, n_steps, seed):
    """Yield ``(t, theta, idx, state_before, state_after)``; theta is drawn from the SLANG state before the step
    exactly as ``slang.step`` would, so the dense reference can be fed the same samples."""
    rng = np.random.default_rng(seed)
    D = state.mu.size
    for t in range(1, n_steps + 1):
        idx = rng.choice(problem.n_data, BATCH, replace=False)
        Z = rng.standard_normal((D, hyper.samples))
        theta = (state.mu[:, None] + lowrank.sample_noise(state.U, state.d, Z)).T
        new, _ = slang.update(state, theta, problem, X[idx], y[idx], hyper)
        yield t, theta, idx, state, new
        state = new


# (sizes, activation, likelihood): a linear logistic model (samples combined into one column per example),
# a linear softmax model with S > K (combined by a per-example eigendecomposition), and a tanh MLP.
MODELS = [
    ((9, 1), "tanh", "bernoulli"),
    ((4, 3), "tanh", "categorical"),
    ((3, 4, 1), "tanh", "bernoulli"),
]
MODEL_IDS = ["linear-logistic-D10", "linear-softmax-D15", "mlp-tanh-D21"]


# ------------------------------------------------------------------------------------------ exactness checks
@pytest.mark.parametrize("sizes,activation,likelihood", MODELS, ids=MODEL_IDS)
def test_full_rank_slang_equals_dense_full_gaussian_update(sizes, activation, likelihood):
    """With L = D, six SLANG steps equal six dense full-Gaussian natural-gradient steps (mean and precision)."""
    problem, X, y = _problem(sizes, activation, likelihood, seed=1)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=D, samples=5 if likelihood == "categorical" else SAMPLES, lr=0.3, beta=0.2)
    state = _start_state(D, D, seed=2)
    mu, P, m = state.mu.copy(), _precision(state), np.zeros(D)
    for t, theta, idx, _, state in _shared_steps(problem, X, y, hyper, state, 6, seed=3):
        mu, P, m = _dense_full_step(mu, P, m, t, theta, problem, X[idx], y[idx], hyper)
        assert state.t == t
        np.testing.assert_allclose(state.m, m, rtol=1e-9, atol=1e-10 * np.abs(m).max(), err_msg=f"m, step {t}")
        np.testing.assert_allclose(
            _precision(state), P, rtol=0, atol=1e-9 * np.abs(P).max(), err_msg=f"precision, step {t}"
        )
        np.testing.assert_allclose(state.mu, mu, rtol=1e-8, atol=1e-10 * np.abs(mu).max(), err_msg=f"mean, step {t}")


@pytest.mark.parametrize("sizes,activation,likelihood", MODELS, ids=MODEL_IDS)
def test_full_rank_slang_from_init_equals_dense_update(sizes, activation, likelihood):
    """Also from ``slang.init`` (U = 0, d = init precision): the first steps, where G G^T is rank deficient and
    eigenvalues under the floor are dropped, still reproduce the dense update."""
    problem, X, y = _problem(sizes, activation, likelihood, seed=4)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=D, samples=2, lr=0.2, beta=0.1, decay=0.6, init_precision=1.5)
    state = slang.init(np.random.default_rng(5), problem, hyper)
    np.testing.assert_array_equal(_precision(state), 1.5 * np.eye(D))
    mu, P, m = state.mu.copy(), _precision(state), np.zeros(D)
    for t, theta, idx, _, state in _shared_steps(problem, X, y, hyper, state, 5, seed=6):
        mu, P, m = _dense_full_step(mu, P, m, t, theta, problem, X[idx], y[idx], hyper)
        np.testing.assert_allclose(
            _precision(state), P, rtol=0, atol=1e-9 * np.abs(P).max(), err_msg=f"precision, step {t}"
        )
        np.testing.assert_allclose(state.mu, mu, rtol=1e-8, atol=1e-10 * np.abs(mu).max(), err_msg=f"mean, step {t}")


@pytest.mark.parametrize("sizes,activation,likelihood", MODELS, ids=MODEL_IDS)
def test_rank_zero_slang_equals_dense_diagonal_update(sizes, activation, likelihood):
    """With L = 0, SLANG is the mean-field natural-gradient update:
    ``d_new = (1 - beta) d + beta (lambda + c diag(G G^T))``, ``mu_new = mu - alpha (m_hat + lambda mu) / d_new``."""
    problem, X, y = _problem(sizes, activation, likelihood, seed=7)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=0, samples=SAMPLES, lr=0.3, beta=0.2)
    state = _start_state(D, 0, seed=8)
    mu, dvec, m = state.mu.copy(), state.d.copy(), np.zeros(D)
    for t, theta, idx, _, state in _shared_steps(problem, X, y, hyper, state, 6, seed=9):
        mu, dvec, m = _dense_diag_step(mu, dvec, m, t, theta, problem, X[idx], y[idx], hyper)
        assert state.U.shape == (D, 0)
        np.testing.assert_allclose(state.d, dvec, rtol=1e-12, atol=0, err_msg=f"d, step {t}")
        np.testing.assert_allclose(state.mu, mu, rtol=1e-10, atol=1e-12 * np.abs(mu).max(), err_msg=f"mean, step {t}")


def test_small_rank_does_not_match_dense_update():
    """Negative control: with L = 1 on D = 31 the precision after five steps is far from the dense full update
    (relative Frobenius distance of the off-diagonal part > 0.3), so the L = D test can tell them apart."""
    problem, X, y = _problem((4, 5, 1), "tanh", "bernoulli", seed=10)
    D = problem.model.n_params
    assert D == 31
    hyper = slang.Hyper(rank=1, samples=SAMPLES, lr=0.3, beta=0.2)
    state = _start_state(D, 1, seed=11)
    P = _precision(state)
    mu, m = state.mu.copy(), np.zeros(D)
    for t, theta, idx, _, state in _shared_steps(problem, X, y, hyper, state, 5, seed=12):
        mu, P, m = _dense_full_step(mu, P, m, t, theta, problem, X[idx], y[idx], hyper)
    off = ~np.eye(D, dtype=bool)
    gap = np.linalg.norm((_precision(state) - P)[off]) / np.linalg.norm(P[off])
    assert gap > 0.3, f"rank-1 SLANG precision unexpectedly close to the dense one (relative gap {gap:.3g})"
    assert np.abs(state.mu - mu).max() > 1e-3 * np.abs(mu).max()


@pytest.mark.parametrize("L", [0, 1, 3, 31])
def test_diagonal_of_precision_is_exact_for_any_rank(L):
    """For any L, ``diag(U_new U_new^T + diag d_new)`` equals the diagonal of the dense update
    ``(1 - beta)(U U^T + diag d) + beta (c G G^T + diag lambda)``: the diagonal correction loses no diagonal
    information (its clamp at 0 never binds, since the discarded part of a PSD matrix is PSD)."""
    problem, X, y = _problem((4, 5, 1), "tanh", "bernoulli", seed=13)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=L, samples=SAMPLES, lr=0.3, beta=0.2)
    for t, theta, idx, before, after in _shared_steps(problem, X, y, hyper, _start_state(D, L, 14), 3, seed=15):
        _, beta = _rates(hyper, t)
        _, F = _dense_terms(problem, theta, X[idx], y[idx])
        expected = (1.0 - beta) * np.diag(_precision(before)) + beta * (np.diag(F) + problem.prior_precision)
        got = np.einsum("dl,dl->d", after.U, after.U) + after.d
        np.testing.assert_allclose(got, expected, rtol=1e-11, atol=0, err_msg=f"step {t}")


# --------------------------------------------------------------------------------- the low-rank update itself
def _top_L_projection(B: np.ndarray, L: int) -> np.ndarray:
    """``Q_L Lambda_L Q_L^T`` from a dense eigendecomposition of ``B B^T``."""
    lam, Q = np.linalg.eigh(B @ B.T)
    lam, Q = lam[::-1][:L], Q[:, ::-1][:, :L]
    return (Q * lam) @ Q.T


def test_low_rank_update_paths_agree():
    """``low_rank_update`` gives the same ``U_new U_new^T`` (the best rank-L part of
    ``(1 - beta) U U^T + beta c G G^T``) and the same diagonal on its D x D side (D <= K) and its Gram side
    (D > K), with ``FactoredGrads`` and with ``_DenseGrads``. The side is switched by appending zero columns to
    U or G, which leaves the matrix unchanged."""
    rng = np.random.default_rng(16)
    model = MLP((4, 5, 1), "tanh", "bernoulli")
    D = model.n_params  # 31
    theta = rng.standard_normal((2, D))
    X = rng.standard_normal((6, 4))
    _, fg = model.per_example_grads(theta, X, rng.integers(0, 2, 6).astype(float))
    G = fg.dense()  # (31, 12)
    U = rng.standard_normal((D, 3))
    U_pad = np.hstack([U, np.zeros((D, 20))])  # K = 23 + 12 >= D
    G_pad = np.hstack([G, np.zeros((D, 20))])
    beta, c, L = 0.3, 2.5, 4
    B = np.hstack([np.sqrt(1 - beta) * U, np.sqrt(beta * c) * G])
    lam = np.linalg.eigvalsh(B @ B.T)[::-1]
    assert (lam[L - 1] - lam[L]) > 0.05 * lam[0], "test precondition: no spectral gap at L"
    expected = _top_L_projection(B, L)
    expected_diag = np.diag(B @ B.T)
    variants = {
        "factored, Gram side": (U, fg),
        "factored, dense side": (U_pad, fg),
        "dense G, Gram side": (U, slang._DenseGrads(G)),
        "dense G, dense side (U padded)": (U_pad, slang._DenseGrads(G)),
        "dense G, dense side (G padded)": (U, slang._DenseGrads(G_pad)),
    }
    for name, (U_in, grads) in variants.items():
        U_new, diag = slang.low_rank_update(U_in, grads, beta, c, L)
        assert U_new.shape == (D, L), name
        np.testing.assert_allclose(U_new @ U_new.T, expected, rtol=0, atol=1e-10 * lam[0], err_msg=name)
        np.testing.assert_allclose(diag, expected_diag, rtol=1e-12, atol=0, err_msg=name)
        np.testing.assert_allclose(U_new.T @ U_new, np.diag(lam[:L]), rtol=0, atol=1e-10 * lam[0], err_msg=name)


@pytest.mark.parametrize("side", ["D", "K"])
@pytest.mark.parametrize("L", [1, 6])
def test_krylov_routes_equal_lapack_route(monkeypatch, L, side):
    """The Krylov solver applied through the gradient factors, the Krylov solver on the formed Gram and LAPACK on
    the formed Gram give the same ``U_new U_new^T`` and diagonal, on a net where K = L + S M = 200 + L < D.
    The route is forced by moving ``KRYLOV_MIN_K`` and by the operator-cost rule (checked to pick the factors);
    the factored solver runs on either side (``B B^T`` or ``B^T B``) as the side rule is forced."""
    rng = np.random.default_rng(21)
    model = MLP((3, 40, 2), "tanh", "categorical")
    D = model.n_params  # 242
    theta = 0.5 * rng.standard_normal((10, D))
    X = rng.standard_normal((20, 3))
    _, fg = model.per_example_grads(theta, X, rng.integers(0, 2, 20))
    U = np.asfortranarray(rng.standard_normal((D, L)))
    beta, c = 0.2, 3.0
    assert slang._factored_operator_pays(fg, D, L, L)
    B = np.hstack([np.sqrt(1 - beta) * U, np.sqrt(beta * c) * fg.dense()])
    lam = np.linalg.eigvalsh(B.T @ B)[::-1]
    assert lam[L - 1] - lam[L] > 1e-3 * lam[0], "test precondition: a spectral gap at L"
    expected = _top_L_projection(B, L)
    monkeypatch.setattr(slang, "_krylov_side", lambda D, K: side)
    solved = []
    krylov = lowrank.top_eig_krylov
    monkeypatch.setattr(lowrank, "top_eig_krylov", lambda apply, n, *a, **k: solved.append((n, krylov(apply, n, *a, **k)))
                        or solved[-1][1])
    results = {"factored Krylov": slang.low_rank_update(U, fg, beta, c, L)}
    assert [(n, found is not None) for n, found in solved] == [(D if side == "D" else L + 200, True)], \
        "the factored Krylov solver ran on the forced side and converged"
    monkeypatch.setattr(lowrank, "top_eig_krylov", krylov)
    monkeypatch.setattr(slang, "_factored_operator_pays", lambda *args: False)
    results["Gram Krylov"] = slang.low_rank_update(U, fg, beta, c, L)
    monkeypatch.setattr(lowrank, "KRYLOV_MIN_K", 10**9)
    results["Gram LAPACK"] = slang.low_rank_update(U, fg, beta, c, L)
    for name, (U_new, diag) in results.items():
        np.testing.assert_allclose(U_new @ U_new.T, expected, rtol=0, atol=1e-9 * lam[0], err_msg=name)
        np.testing.assert_allclose(diag, np.diag(B @ B.T), rtol=1e-12, atol=0, err_msg=name)


@pytest.mark.parametrize("pad", [0, 12], ids=["Gram side", "dense side"])
def test_eigenvalue_floor_zeros_columns(pad):
    """Eigenpairs with eigenvalue <= 1e-6 come back as all-zero columns; one just above the floor is kept.

    With U = 0 (L = 5 columns, as a fresh state has) and G with orthogonal columns, the eigenvalues of
    ``(1 - beta) U U^T + beta c G G^T`` are exactly 1, 2e-6, 5e-7, 0, 0. K = 5 + 3 < D = 10 takes the Gram side;
    12 zero columns appended to G take the D x D side."""
    D, L = 10, 5
    Q, _ = np.linalg.qr(np.random.default_rng(17).standard_normal((D, 3)))
    beta, c = 0.5, 2.0
    eig = np.array([1.0, 2e-6, 5e-7])
    G = np.hstack([Q * np.sqrt(eig / (beta * c)), np.zeros((D, pad))])
    U_new, _ = slang.low_rank_update(np.zeros((D, L)), slang._DenseGrads(G), beta, c, L)
    assert U_new.shape == (D, 5)
    np.testing.assert_allclose(np.sum(U_new**2, axis=0)[:2], eig[:2], rtol=1e-6, atol=0)
    assert np.all(U_new[:, 2:] == 0.0), "columns with eigenvalue <= 1e-6 must be exactly zero"


# ------------------------------------------------------------------------------------------- step and rates
def test_step_samples_around_mu_and_calls_update():
    """``step`` draws ``theta = mu + eps`` (not ``2 mu + eps``, the authors' PyTorch defect) with
    ``eps = sample_noise(U, d, Z)``, ``Z : (D, S)`` from the given generator (``noise.sample_columns``), then applies ``update``."""
    problem, X, y = _problem((3, 4, 1), seed=18)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=2, samples=4)
    state = _start_state(D, 2, seed=19)
    state = state._replace(mu=state.mu + 5.0)  # a mean far from 0, so mu + eps and 2 mu + eps differ clearly
    got, info = slang.step(np.random.default_rng(20), state, problem, X[:10], y[:10], hyper)
    Z = noise.sample_columns(np.random.default_rng(20), D, 4)
    theta = (state.mu[:, None] + lowrank.sample_noise(state.U, state.d, Z)).T
    expected, expected_info = slang.update(state, theta, problem, X[:10], y[:10], hyper)
    for name in ("mu", "U", "d", "m"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    assert got.t == 1 and info == expected_info


def test_update_reports_mean_nll_of_the_minibatch():
    """``info["nll"]`` is the mean per-example NLL over the minibatch and the samples."""
    problem, X, y = _problem((3, 4, 1), seed=21)
    D = problem.model.n_params
    theta = np.random.default_rng(22).standard_normal((3, D))
    _, info = slang.update(_start_state(D, 1, 23), theta, problem, X[:10], y[:10], slang.Hyper(rank=1))
    np.testing.assert_allclose(info["nll"], problem.model.nll(theta, X[:10], y[:10]).mean(), rtol=1e-14, atol=0)


@pytest.mark.parametrize("t,decay,expected", [(1, 0.51, 0.05), (4, 0.5, 0.1 / 3), (7, 0.0, 0.05), (10, 1.0, 0.1 / 11)])
def test_decayed_rate(t, decay, expected):
    """``r_t = r_0 / (1 + t^decay)`` with ``r_0 = 0.1``: r_0 / 2 at t = 1 or when decay = 0."""
    np.testing.assert_allclose(decayed(0.1, t, decay), expected, rtol=1e-15, atol=0)


# ------------------------------------------------------------------------------------------------- float32
@pytest.mark.parametrize("sizes,likelihood,L", [((5, 6, 3), "categorical", 3), ((4, 1), "bernoulli", 2),
                                               ((3, 40, 2), "categorical", 4)],
                         ids=["mlp", "logistic", "krylov-route"])
def test_float32_steps_track_float64_steps(sizes, likelihood, L):
    """With ``dtype="float32"`` U and the network passes are float32 while mu, d, m stay float64, and ten steps
    from the same state and generators stay within float32 rounding of the float64 run (relative 1e-4); the
    third case has K = L + S M >= 200, the Krylov route."""
    problem, X, y = _problem(sizes, likelihood=likelihood, seed=30)
    S = 10 if sizes == (3, 40, 2) else SAMPLES
    M = 20 if sizes == (3, 40, 2) else BATCH
    runs = {}
    for dtype in ("float64", "float32"):
        hyper = slang.Hyper(rank=L, samples=S, dtype=dtype)
        state = slang.init(np.random.default_rng(31), problem, hyper)
        for t in range(10):
            idx = np.random.default_rng([32, t]).integers(0, N_DATA, M)
            state, _ = slang.step(np.random.default_rng([33, t]), state, problem, X[idx], y[idx], hyper)
        runs[dtype] = state
    lo, hi = runs["float32"], runs["float64"]
    assert lo.U.dtype == np.float32 and lo.mu.dtype == lo.d.dtype == lo.m.dtype == np.float64
    for name in ("mu", "d"):
        got, ref = getattr(lo, name), getattr(hi, name)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(), err_msg=name)
        assert not np.array_equal(got, ref), f"{name}: float32 run identical to float64 (dtype not applied?)"
    P_lo, P_hi = lo.U.astype(float) @ lo.U.T, hi.U @ hi.U.T
    np.testing.assert_allclose(P_lo, P_hi, rtol=0, atol=1e-4 * np.abs(P_hi).max())


def test_dtype_is_validated():
    with pytest.raises(ConfigError, match="--dtype"):
        slang.Hyper(dtype="float16")


def test_update_flushes_underflowing_entries_of_u_every_flush_every_steps(monkeypatch):
    """On steps that are multiples of ``FLUSH_EVERY`` the new U has no entry below ``sqrt(tiny)``; on other steps
    ``update`` leaves U as the eigendecomposition gave it."""
    problem, X, y = _problem((3, 4, 1), seed=40)
    D = problem.model.n_params
    hyper = slang.Hyper(rank=2, samples=2, dtype="float32")
    seen = []

    def fake_low_rank_update(U, grads, beta, c, L):
        U_new = np.asfortranarray(np.full((D, L), 1e-25, dtype=np.float32))
        U_new[0] = 1.0
        return U_new, np.ones(D)

    monkeypatch.setattr(slang, "low_rank_update", fake_low_rank_update)
    state = slang.init(np.random.default_rng(41), problem, hyper)
    theta = np.tile(state.mu, (2, 1)).astype(np.float32)
    for t in (slang.FLUSH_EVERY - 1, slang.FLUSH_EVERY):
        new, _ = slang.update(state._replace(t=t - 1), theta, problem, X[:5], y[:5], hyper)
        seen.append(np.count_nonzero(new.U[1:]))
    assert seen == [2 * (D - 1), 0]
