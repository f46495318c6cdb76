"""Post-hoc SVD compression of posterior standard deviations (``slangcli.compress.ktied``).

- Exactness: full-rank truncation reconstructs the standard-deviation matrix (to rounding), and so the k-tied
  posterior equals the source; rank 1 of a rank-1 positive matrix is exact with positive factors.
- The floor: a rank-2 truncation with negative entries is raised to ``FLOOR_RELATIVE * max(A)`` exactly there,
  counted, and the reported error is that of the floored reconstruction.
- Canonical signs: the largest-magnitude entry of every left singular vector is positive, flipping the signs of
  any singular pairs gives identical factors, and compressing twice gives identical bytes.
- Source standard deviations: SLANG (low-rank) and full Gaussians use their marginal standard deviations,
  checked against the dense inverse of the precision on a small network.
- Explained variance, per-layer rank clamp, and the variational parameter counts (the paper's MNIST figures).
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.compress.ktied import (FLOOR_RELATIVE, canonical_signs, canonical_svd, compress, compress_matrix,
                               n_variational_params, std_matrices)
from slangcli.compress.runs import parse_ranks, rank_outputs
from slangcli.errors import ConfigError
from slangcli.gaussian.posteriors import DiagonalGaussian, FullGaussian, KTiedGaussian, LowRankGaussian
from slangcli.models import MLP

MODEL = MLP((5, 4, 3), likelihood="categorical")  # W_1 5 x 4, W_2 4 x 3; D = 20 + 4 + 12 + 3 = 39


def _diagonal(seed=0, model=MODEL):
    rng = np.random.default_rng(seed)
    return DiagonalGaussian(mean=rng.standard_normal(model.n_params), log_sigma=rng.uniform(-4, -1, model.n_params))


def test_full_rank_reconstructs_exactly():
    A = np.random.default_rng(1).uniform(0.01, 1.0, (6, 4))
    c = compress_matrix(A, 4)
    np.testing.assert_allclose(np.maximum(c.U @ c.V.T, c.floor), A, rtol=1e-12, atol=0)
    assert c.rank == 4 and c.relative_error < 1e-14 and c.n_floored == 0
    post = _diagonal()
    ktied, layers = compress(post, MODEL, 4)
    assert ktied.ranks == (4, 3) and [c.rank for c in layers] == [4, 3]
    np.testing.assert_allclose(ktied.sigma(), np.exp(post.log_sigma), rtol=1e-12, atol=0)
    assert ktied.mean.tobytes() == post.mean.tobytes()
    bias = MODEL.layout.bias_mask()
    np.testing.assert_allclose(ktied.bias_log_sigma, post.log_sigma[bias], rtol=1e-15, atol=1e-15)


def test_rank_one_of_a_rank_one_positive_matrix_is_exact_and_positive():
    rng = np.random.default_rng(2)
    A = np.outer(rng.uniform(0.1, 2.0, 7), rng.uniform(0.1, 2.0, 5))
    c = compress_matrix(A, 1)
    assert (c.U > 0).all() and (c.V > 0).all()
    np.testing.assert_allclose(c.U @ c.V.T, A, rtol=1e-12, atol=0)
    assert c.relative_error < 1e-14
    # Perron-Frobenius: the top pair of any positive matrix is positive after the sign convention
    B = rng.uniform(0.01, 1.0, (7, 5))
    b = compress_matrix(B, 1)
    assert (b.U > 0).all() and (b.V > 0).all() and b.n_floored == 0


def test_floor_is_applied_where_the_truncation_is_not_positive():
    A = np.random.default_rng(0).uniform(0.01, 1, (4, 3)) ** 3  # its rank-2 truncation has 2 negative entries
    U, s, Vt = np.linalg.svd(A)
    truncated = (U[:, :2] * s[:2]) @ Vt[:2]
    assert (truncated < 0).sum() == 2  # the precondition of this test
    c = compress_matrix(A, 2)
    assert c.floor == FLOOR_RELATIVE * A.max() and c.n_floored == 2
    sigma = KTiedGaussian(mean=np.zeros(16), U=(c.U,), V=(c.V,), bias_log_sigma=np.zeros(4),
                          floor=np.array([c.floor]), sizes=(4, 3)).sigma_matrices()[0]
    np.testing.assert_array_equal(sigma[truncated < 0], c.floor)
    np.testing.assert_allclose(sigma[truncated > 0], truncated[truncated > 0], rtol=1e-12, atol=1e-15)
    assert c.relative_error == pytest.approx(np.linalg.norm(A - sigma) / np.linalg.norm(A), rel=1e-12)
    # the optimal (unfloored) error is the tail of the spectrum; flooring only moves entries towards A (A > 0)
    assert c.relative_error <= s[2] / np.linalg.norm(s)


def test_signs_are_canonical_and_independent_of_the_svd_signs():
    rng = np.random.default_rng(3)
    A = rng.uniform(0.01, 1.0, (6, 5))
    U, s, Vt = canonical_svd(A)
    top = np.argmax(np.abs(U), axis=0)
    assert (U[top, np.arange(5)] > 0).all()
    U0, _, Vt0 = np.linalg.svd(A, full_matrices=False)
    for _ in range(5):
        flips = rng.choice([-1.0, 1.0], 5)
        Uc, Vtc = canonical_signs(U0 * flips, Vt0 * flips[:, None])
        assert Uc.tobytes() == U.tobytes() and Vtc.tobytes() == Vt.tobytes()
    np.testing.assert_allclose((U * s) @ Vt, A, rtol=1e-12, atol=0)
    a, _ = compress(_diagonal(), MODEL, 2)
    b, _ = compress(_diagonal(), MODEL, 2)
    for x, y in zip((*a.U, *a.V, a.floor), (*b.U, *b.V, b.floor)):
        assert x.tobytes() == y.tobytes()


def _dense_std(precision):
    return np.sqrt(np.diag(np.linalg.inv(precision)))


@pytest.mark.parametrize("kind", ["lowrank", "full"])
def test_slang_and_full_posteriors_use_their_marginal_standard_deviations(kind):
    rng = np.random.default_rng(4)
    D = MODEL.n_params
    mean = rng.standard_normal(D)
    if kind == "lowrank":
        U, d = rng.standard_normal((D, 3)), rng.uniform(1.0, 4.0, D)
        post, precision = LowRankGaussian(mean=mean, U=U, d=d), U @ U.T + np.diag(d)
    else:
        B = rng.standard_normal((D, D))
        precision = B @ B.T / D + np.diag(rng.uniform(1.0, 4.0, D))
        post = FullGaussian.from_precision(mean, precision)
    std = _dense_std(precision)
    matrices, bias = std_matrices(post, MODEL)
    for s, A in zip(MODEL.layout.layers, matrices):
        np.testing.assert_allclose(A, std[s.W].reshape(s.n_in, s.n_out), rtol=1e-12, atol=0)
    np.testing.assert_allclose(bias, std[MODEL.layout.bias_mask()], rtol=1e-12, atol=0)
    ktied, _ = compress(post, MODEL, 4)  # full rank: the marginal standard deviations exactly
    np.testing.assert_allclose(ktied.sigma(), std, rtol=1e-11, atol=0)
    assert ktied.mean.tobytes() == mean.tobytes()
    # negative control: the precision's own diagonal is not what is compressed
    assert not np.allclose(std, 1 / np.sqrt(np.diag(precision)), rtol=1e-3)


def test_a_trained_ktied_posterior_recompresses_to_itself_at_its_rank():
    """Positive rank-2 factors without a floor: sigma is exactly rank 2, so rank-2 compression is exact (a floored
    posterior would not be: its floor makes the matrix full rank)."""
    rng = np.random.default_rng(5)
    post = KTiedGaussian(mean=rng.standard_normal(MODEL.n_params), U=(rng.uniform(0.1, 1, (5, 2)),
                         rng.uniform(0.1, 1, (4, 2))), V=(rng.uniform(0.1, 1, (4, 2)), rng.uniform(0.1, 1, (3, 2))),
                         bias_log_sigma=rng.uniform(-2, 0, 7), floor=np.zeros(2), sizes=MODEL.sizes)
    again, layers = compress(post, MODEL, 2)
    np.testing.assert_allclose(again.sigma(), post.sigma(), rtol=1e-12, atol=0)
    assert all(c.relative_error < 1e-14 for c in layers)


def test_explained_variance_and_summary():
    rng = np.random.default_rng(6)
    c = compress_matrix(rng.uniform(0.01, 1.0, (5, 4)), 2)
    ev = c.explained_variance
    np.testing.assert_allclose(ev, c.singular_values**2 / np.sum(c.singular_values**2), rtol=1e-14, atol=0)
    assert ev.sum() == pytest.approx(1.0, rel=1e-14) and (np.diff(ev) <= 0).all()
    summary = c.summary()
    assert summary["shape"] == [5, 4] and summary["rank"] == 2
    assert summary["explained_variance"] == pytest.approx(ev[:2].sum(), rel=1e-14)


def test_rank_is_clamped_per_layer():
    ktied, layers = compress(_diagonal(), MODEL, 10)
    assert ktied.ranks == (4, 3) and all(c.relative_error < 1e-14 for c in layers)
    with pytest.raises(ValueError, match="rank must be >= 1"):
        compress(_diagonal(), MODEL, 0)


def test_parameter_counts_match_the_papers_mnist_figures():
    """784-400-400-10: mean field 957 k; k-tied 482 k, 484 k, 486 k for k = 1, 2, 3 (Figure 4's table)."""
    model = MLP((784, 400, 400, 10), likelihood="categorical")
    D = model.n_params
    assert n_variational_params(DiagonalGaussian(np.zeros(D), np.zeros(D))) == 956_820
    counts = []
    for k in (1, 2, 3):
        shapes = list(zip(model.sizes[:-1], model.sizes[1:]))
        post = KTiedGaussian(mean=np.zeros(D), U=tuple(np.ones((m, min(k, n))) for m, n in shapes),
                             V=tuple(np.ones((n, min(k, n))) for m, n in shapes), bias_log_sigma=np.zeros(810),
                             floor=np.zeros(3), sizes=model.sizes)
        counts.append(n_variational_params(post))
    assert [round(c / 1000) for c in counts] == [482, 484, 486]
    assert n_variational_params(LowRankGaussian(np.zeros(10), np.zeros((10, 3)), np.ones(10))) == 50
    assert n_variational_params(FullGaussian(np.zeros(4), np.eye(4))) == 4 + 10


def test_rank_list_parsing_and_output_names():
    assert parse_ranks("1,2, 3") == [1, 2, 3] and parse_ranks("5") == [5]
    for bad in ("0", "-1", "a", "", "1,,2", "1.5"):
        with pytest.raises(ConfigError, match="positive whole numbers"):
            parse_ranks(bad)
    with pytest.raises(ConfigError, match="--rank 2 is given twice"):
        parse_ranks("2,1,2")
    assert rank_outputs("dir/out.h5", [3]) == ["dir/out.h5"]
    assert rank_outputs("dir/out.h5", [1, 3]) == ["dir/out-k1.h5", "dir/out-k3.h5"]
    assert rank_outputs("out", [1, 2]) == ["out-k1", "out-k2"]
