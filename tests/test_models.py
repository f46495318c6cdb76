"""Per-example back-propagation of ``slangcli.models`` against finite differences and dense algebra.

What is checked:

- the per-example gradients ``G : (D, S N)`` (column ``s N + i`` is the gradient of example i's NLL at weight
  sample s) equal central finite differences of ``MLP.nll``, for every activation x likelihood pair;
- a random-direction check ``G^T v`` vs ``(f(theta + h v) - f(theta - h v)) / 2h`` on a larger network;
- every ``FactoredGrads`` operation equals the same product with the dense G;
- ``combine_samples`` keeps ``G G^T``;
- the parameter layout, and one example worked by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from slangcli.models import MLP, FactoredGrads, Layout

ACTIVATIONS = ["relu", "tanh", "sigmoid"]
LIKELIHOODS = ["bernoulli", "categorical", "gaussian"]
H = 1e-5  # central-difference step: truncation ~ h^2 ~ 1e-10, rounding ~ eps / h ~ 1e-11


# ---------------------------------------------------------------------------------------------------- helpers
def _model(sizes, activation, likelihood):
    """``sizes`` without the output width; the output width is 3 for categorical, else 1."""
    k = 3 if likelihood == "categorical" else 1
    return MLP(tuple(sizes) + (k,), activation, likelihood, noise_precision=2.5)


def _targets(rng, model: MLP, n: int) -> np.ndarray:
    if model.likelihood == "bernoulli":
        return rng.integers(0, 2, n).astype(float)
    if model.likelihood == "categorical":
        return rng.integers(0, model.sizes[-1], n)
    return rng.standard_normal(n)


def _preactivations(model: MLP, theta: np.ndarray, X: np.ndarray) -> list[np.ndarray]:
    """Hidden-layer pre-activations ``z_l : (N, n_l)`` of one weight vector, by a plain loop (independent of
    ``MLP.forward``), to keep ReLU checks away from the kink."""
    from slangcli.models import ACTIVATIONS as ACTS

    act = ACTS[model.activation][0]
    h, out = X, []
    params = model.layout.unflatten(theta)
    for W, b in params[:-1]:
        z = h @ W + b
        out.append(z)
        h = act(z)
    return out


def _fd_per_example(model: MLP, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Central differences of the per-example NLL, arranged like G: ``(D, S N)``, column ``s N + i``.

    All 2 S D perturbed weight vectors are passed to ``nll`` at once as "samples" (one forward pass).
    """
    S, D = theta.shape
    N = X.shape[0]
    E = H * np.eye(D)
    pert = np.concatenate([theta[:, None, :] + E[None], theta[:, None, :] - E[None]], axis=1)  # (S, 2D, D)
    f = model.nll(pert.reshape(S * 2 * D, D), X, y).reshape(S, 2, D, N)
    J = (f[:, 0] - f[:, 1]) / (2 * H)  # (S, D, N)
    return J.transpose(1, 0, 2).reshape(D, S * N)


def _explicit_G(fg: FactoredGrads) -> np.ndarray:
    """Assemble G column by column from its definition: ``dW_l = outer(a_l, delta_l)`` (row-major, as the
    layout stores ``W_l : (n_in, n_out)``), ``db_l = delta_l``."""
    S, N = fg.n_samples, fg.n_examples
    G = np.zeros((fg.layout.n_params, S * N))
    for s in range(S):
        for i in range(N):
            for sl, A, Dl in zip(fg.layout.layers, fg.inputs, fg.deltas):
                a = A[i] if A.ndim == 2 else A[s, i]
                G[sl.W, s * N + i] = np.outer(a, Dl[s, i]).ravel()
                G[sl.b, s * N + i] = Dl[s, i]
    return G


def _setup(sizes, activation, likelihood, S, N, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    model = _model(sizes, activation, likelihood)
    theta = scale * rng.standard_normal((S, model.n_params))
    X = rng.standard_normal((N, sizes[0]))
    y = _targets(rng, model, N)
    return rng, model, theta, X, y


def _assert_away_from_kink(model, theta, X, margin=1e-3):
    if model.activation != "relu":
        return
    for s in range(theta.shape[0]):
        for z in _preactivations(model, theta[s], X):
            assert np.abs(z).min() > margin, "test precondition: a ReLU pre-activation is at the kink; change seed"


# ------------------------------------------------------------------------------------ finite-difference checks
@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_per_example_grads_match_finite_differences(activation, likelihood):
    """Each column of ``G`` (sample-major, S = 2) is the gradient of one example's NLL at one weight sample."""
    _, model, theta, X, y = _setup((3, 4, 2), activation, likelihood, S=2, N=5, seed=11)
    _assert_away_from_kink(model, theta, X)
    nll, fg = model.per_example_grads(theta, X, y)
    np.testing.assert_allclose(nll, model.nll(theta, X, y), rtol=1e-14, atol=0)
    G = fg.dense()
    assert G.shape == (model.n_params, 2 * 5)
    J = _fd_per_example(model, theta, X, y)
    np.testing.assert_allclose(G, J, rtol=1e-6, atol=1e-8, err_msg="analytic G vs central differences")


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_linear_model_grads_match_finite_differences(likelihood):
    """No hidden layer (logistic / softmax / linear regression): G matches central differences."""
    _, model, theta, X, y = _setup((5,), "tanh", likelihood, S=3, N=6, seed=12)
    assert model.is_linear
    _, fg = model.per_example_grads(theta, X, y)
    np.testing.assert_allclose(fg.dense(), _fd_per_example(model, theta, X, y), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("likelihood", LIKELIHOODS)
def test_random_direction_check_on_larger_net(activation, likelihood):
    """``g_si . v == d/dh NLL_i(theta_s + h v)`` along one random direction, for every (s, i), on a
    (20, 30, 30, K) network: O(1) evaluations instead of O(D)."""
    rng, model, theta, X, y = _setup((20, 30, 30), activation, likelihood, S=2, N=8, seed=13, scale=0.2)
    _assert_away_from_kink(model, theta, X, margin=1e-4)
    D = model.n_params
    v = rng.standard_normal(D) / np.sqrt(D)
    _, fg = model.per_example_grads(theta, X, y)
    analytic = fg.dense().T @ v  # (S N,)
    pert = np.concatenate([theta + H * v, theta - H * v])  # (2 S, D)
    f = model.nll(pert, X, y)
    numeric = ((f[:2] - f[2:]) / (2 * H)).ravel()  # sample-major, like the columns of G
    np.testing.assert_allclose(
        analytic, numeric, rtol=1e-6, atol=1e-8,
        err_msg=f"analytic {analytic!r}\nnumeric  {numeric!r}",
    )
    np.testing.assert_allclose(fg.left(v[:, None])[0], analytic, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("sizes", [(4,), (4, 5), (4, 5, 3)], ids=["linear", "1-hidden", "2-hidden"])
def test_summed_per_example_grads_equal_batch_gradient(sizes):
    """``G 1 == FactoredGrads.sum()`` and both equal the finite-difference gradient of the total NLL
    ``sum_s sum_i NLL_i(theta_s)`` when every sample is moved by the same ``h e_j``."""
    _, model, theta, X, y = _setup(sizes, "tanh", "categorical", S=3, N=7, seed=14)
    _, fg = model.per_example_grads(theta, X, y)
    G = fg.dense()
    np.testing.assert_allclose(fg.sum(), G.sum(axis=1), rtol=1e-12, atol=1e-12)
    D = model.n_params
    fd = np.empty(D)
    for j in range(D):
        e = np.zeros(D)
        e[j] = H
        fd[j] = (model.nll(theta + e, X, y).sum() - model.nll(theta - e, X, y).sum()) / (2 * H)
    np.testing.assert_allclose(fg.sum(), fd, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------- FactoredGrads vs dense G
FG_NETS = [((4,), "categorical"), ((4, 5), "categorical"), ((4, 5, 6), "bernoulli"), ((4,), "gaussian")]
FG_IDS = ["linear-K3", "1-hidden-K3", "2-hidden-K1", "linear-K1"]


def _fg_case(sizes, likelihood, seed=15):
    rng, model, theta, X, y = _setup(sizes, "tanh", likelihood, S=3, N=7, seed=seed)
    _, fg = model.per_example_grads(theta, X, y)
    return rng, fg, _explicit_G(fg)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_dense_equals_explicit_outer_products(sizes, likelihood):
    """``dense()`` is G as defined by the outer products ``a delta^T`` in the row-major layout."""
    _, fg, G = _fg_case(sizes, likelihood)
    np.testing.assert_allclose(fg.dense(), G, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_sum(sizes, likelihood):
    """``sum() == G 1``."""
    _, fg, G = _fg_case(sizes, likelihood)
    np.testing.assert_allclose(fg.sum(), G.sum(axis=1), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_sq_sum(sizes, likelihood):
    """``sq_sum() == diag(G G^T)`` (row sums of G * G)."""
    _, fg, G = _fg_case(sizes, likelihood)
    np.testing.assert_allclose(fg.sq_sum(), (G * G).sum(axis=1), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_gram(sizes, likelihood):
    """``gram() == G^T G`` (S N x S N, sample-major)."""
    _, fg, G = _fg_case(sizes, likelihood)
    np.testing.assert_allclose(fg.gram(), G.T @ G, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_left(sizes, likelihood):
    """``left(U) == U^T G`` for ``U : (D, 4)``."""
    rng, fg, G = _fg_case(sizes, likelihood)
    U = rng.standard_normal((G.shape[0], 4))
    np.testing.assert_allclose(fg.left(U), U.T @ G, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_right(sizes, likelihood):
    """``right(W) == G W`` for ``W : (S N, 4)``."""
    rng, fg, G = _fg_case(sizes, likelihood)
    W = rng.standard_normal((G.shape[1], 4))
    np.testing.assert_allclose(fg.right(W), G @ W, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes,likelihood", FG_NETS, ids=FG_IDS)
def test_factored_matmat_and_rmatmat(sizes, likelihood):
    """``matmat(V) == G V`` and ``rmatmat(W) == G^T W`` (the Krylov solver's operator), for 1 and 5 columns."""
    rng, fg, G = _fg_case(sizes, likelihood)
    for k in (1, 5):
        V = rng.standard_normal((G.shape[1], k))
        W = rng.standard_normal((G.shape[0], k))
        np.testing.assert_allclose(fg.matmat(V), G @ V, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(fg.rmatmat(W), G.T @ W, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("S", [1, 2, 5])
@pytest.mark.parametrize("likelihood", ["bernoulli", "categorical"], ids=["K=1", "K=3"])
def test_combine_samples_keeps_empirical_fisher(likelihood, S):
    """For a linear model ``G~ G~^T == G G^T`` with ``min(S, K)`` columns per example (fewer when S > K)."""
    N = 6
    _, model, theta, X, y = _setup((4,), "tanh", likelihood, S=S, N=N, seed=16)
    K = model.sizes[-1]
    _, fg = model.per_example_grads(theta, X, y)
    G = fg.dense()
    combined = fg.combine_samples()
    Gt = combined.dense()
    assert combined.n_columns == Gt.shape[1] == N * min(S, K)
    if S > K:
        assert combined.n_columns < fg.n_columns
    np.testing.assert_allclose(Gt @ Gt.T, G @ G.T, rtol=1e-12, atol=1e-12 * np.abs(G @ G.T).max())


def test_combine_samples_rejects_hidden_layers():
    """With a hidden layer samples do not share their layer inputs; combining is refused."""
    _, model, theta, X, y = _setup((4, 3), "tanh", "bernoulli", S=2, N=3, seed=17)
    _, fg = model.per_example_grads(theta, X, y)
    with pytest.raises(ValueError, match="hidden"):
        fg.combine_samples()


# ------------------------------------------------------------------------------------------------- layout
def test_layout_slices_tile_the_parameter_vector():
    """W_1, b_1, W_2, b_2, ... are consecutive, of sizes n_in n_out and n_out, and cover [0, D) exactly."""
    layout = Layout((3, 4, 2, 5))
    pos = 0
    for sl in layout.layers:
        assert (sl.W.start, sl.W.stop) == (pos, pos + sl.n_in * sl.n_out)
        assert (sl.b.start, sl.b.stop) == (sl.W.stop, sl.W.stop + sl.n_out)
        pos = sl.b.stop
    assert pos == layout.n_params == 3 * 4 + 4 + 4 * 2 + 2 + 2 * 5 + 5


def test_bias_mask_marks_exactly_the_biases():
    """``bias_mask`` is True on the b slices and nowhere else."""
    layout = Layout((3, 4, 2, 5))
    expected = np.zeros(layout.n_params, dtype=bool)
    for sl in layout.layers:
        expected[sl.b] = True
    mask = layout.bias_mask()
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask, expected)
    assert mask.sum() == 4 + 2 + 5


def test_prior_precision_gives_the_hidden_biases_their_own():
    """Weights, the output layer's biases and the hidden layers' biases each get their value; without a hidden
    value the hidden biases take the output's."""
    model = MLP((3, 4, 2, 5), likelihood="categorical")
    layers = model.layout.layers
    lam = model.prior_precision(2.0, 1e-5, 0.1)
    for s in layers:
        np.testing.assert_array_equal(lam[s.W], 2.0)
    for s in layers[:-1]:
        np.testing.assert_array_equal(lam[s.b], 0.1)
    np.testing.assert_array_equal(lam[layers[-1].b], 1e-5)
    np.testing.assert_array_equal(model.prior_precision(2.0, 1e-5),
                                  np.where(model.layout.bias_mask(), 1e-5, 2.0))
    linear = MLP((3, 1))
    np.testing.assert_array_equal(linear.prior_precision(2.0, 1e-5, 0.1), [2.0, 2.0, 2.0, 1e-5])


def test_unflatten_is_row_major_and_round_trips():
    """``W_l[a, o] = theta[W_start + a n_out + o]``; flattening the unflattened pieces gives theta back, also
    with a leading sample axis."""
    layout = Layout((3, 4, 2))
    theta = np.arange(layout.n_params, dtype=float)
    (W1, b1), (W2, b2) = layout.unflatten(theta)
    assert W1.shape == (3, 4) and b1.shape == (4,) and W2.shape == (4, 2) and b2.shape == (2,)
    assert W1[2, 1] == 2 * 4 + 1 and b1[0] == 12 and W2[3, 1] == 16 + 3 * 2 + 1 and b2[1] == 25
    thetas = np.random.default_rng(18).standard_normal((3, layout.n_params))
    pieces = layout.unflatten(thetas)
    back = np.concatenate([np.concatenate([W.reshape(3, -1), b], axis=1) for W, b in pieces], axis=1)
    np.testing.assert_array_equal(back, thetas)


# ----------------------------------------------------------------------------------------- a worked example
def test_hand_worked_logistic_example():
    """A (2, 1) Bernoulli model worked by hand.

    theta = (w1, w2, b) = (ln 3, 0.5, -1).

    Example 1: x = (1, 2), y = 0.
        f = ln 3 * 1 + 0.5 * 2 - 1 = ln 3;  sigmoid(f) = 3 / (1 + 3) = 0.75
        NLL = log(1 + e^f) - y f = log 4 = 1.3862943611198906
        delta = sigmoid(f) - y = 0.75;  grad = delta * (x1, x2, 1) = (0.75, 1.5, 0.75)
    Example 2: x = (0, 2), y = 1.
        f = 0 + 1 - 1 = 0;  sigmoid(0) = 0.5
        NLL = log(1 + 1) - 1 * 0 = log 2 = 0.6931471805599453
        delta = 0.5 - 1 = -0.5;  grad = -0.5 * (0, 2, 1) = (0, -1, -0.5)
    """
    model = MLP((2, 1), "tanh", "bernoulli")
    theta = np.array([[math.log(3.0), 0.5, -1.0]])
    X = np.array([[1.0, 2.0], [0.0, 2.0]])
    y = np.array([0.0, 1.0])
    nll, fg = model.per_example_grads(theta, X, y)
    np.testing.assert_allclose(nll, [[1.3862943611198906, 0.6931471805599453]], rtol=1e-14, atol=0)
    expected_G = np.array([[0.75, 0.0], [1.5, -1.0], [0.75, -0.5]])
    np.testing.assert_allclose(fg.dense(), expected_G, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(fg.sum(), [0.75, 0.5, 0.25], rtol=1e-14, atol=1e-15)
