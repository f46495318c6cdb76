"""The posterior kinds (``slangcli.gaussian.posteriors``) and the KL divergences between them (``slangcli.gaussian.divergence``)
against dense linear algebra.

For each kind the dense precision is built here from its fields (low-rank ``U U^T + diag d``, diagonal
``diag(exp(-2 log_sigma))``, full ``chol chol^T``, k-tied ``diag(sigma^-2)`` with sigma's weight blocks the outer
products ``u v^T`` of a 1-2-1 network), and every quantity the posterior computes through its structure
(marginal variances, quadratic forms, products with the covariance, log-determinant, KL to the prior, the map
from standard normals to samples) is compared with the dense one. The KL between every ordered pair of kinds is
compared with the textbook dense formula; a negative control checks that the comparison tells the two directions
apart, and a large-D case shows that low-rank and diagonal pairs never form a D x D matrix.
"""

from __future__ import annotations

import numpy as np
import pytest

from slangcli.gaussian.divergence import kl, symmetric_kl
from slangcli.gaussian.posteriors import POSTERIORS, DiagonalGaussian, FullGaussian, KTiedGaussian, LowRankGaussian

D = 7
KINDS = ["lowrank", "diagonal", "full", "ktied"]
KTIED_SIZES = (1, 2, 1)  # D = 2 + 2 + 2 + 1 = 7: W_1 (1 x 2), b_1, W_2 (2 x 1), b_2


def make(kind: str, seed: int, D: int = D):
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(D)
    if kind == "lowrank":
        return LowRankGaussian(mean=mean, U=0.8 * rng.standard_normal((D, 3)), d=rng.uniform(0.5, 2.0, D))
    if kind == "diagonal":
        return DiagonalGaussian(mean=mean, log_sigma=rng.uniform(-0.7, 0.5, D))
    if kind == "ktied":
        return KTiedGaussian(mean=mean, U=(rng.uniform(0.5, 1.2, (1, 1)), rng.uniform(0.5, 1.2, (2, 1))),
                             V=(rng.uniform(0.5, 1.2, (2, 1)), rng.uniform(0.5, 1.2, (1, 1))),
                             bias_log_sigma=rng.uniform(-0.7, 0.5, 3), floor=np.zeros(2), sizes=KTIED_SIZES)
    A = rng.standard_normal((D, D))
    return FullGaussian.from_precision(mean, A @ A.T / D + np.diag(rng.uniform(0.5, 1.5, D)))


def dense_precision(post) -> np.ndarray:
    if post.kind == "lowrank":
        return post.U @ post.U.T + np.diag(post.d)
    if post.kind == "diagonal":
        return np.diag(np.exp(-2.0 * post.log_sigma))
    if post.kind == "ktied":
        (u1, u2), (v1, v2), b = post.U, post.V, np.exp(post.bias_log_sigma)
        sigma = np.concatenate([np.outer(u1, v1).ravel(), b[:2], np.outer(u2, v2).ravel(), b[2:]])
        return np.diag(sigma**-2.0)
    return post.chol @ post.chol.T


def dense_kl(p, q) -> float:
    """``KL(p || q)`` of two Gaussians from their dense precisions (textbook formula, explicit inverses)."""
    Pp, Pq = dense_precision(p), dense_precision(q)
    Sp = np.linalg.inv(Pp)
    delta = q.mean - p.mean
    return 0.5 * (np.trace(Pq @ Sp) + delta @ Pq @ delta - p.mean.size
                  + np.linalg.slogdet(Pp)[1] - np.linalg.slogdet(Pq)[1])


def test_registry_names_each_kind():
    assert set(POSTERIORS) == set(KINDS)
    for kind in KINDS:
        assert POSTERIORS[kind].kind == kind


# ------------------------------------------------------------------------------------------ each kind alone
@pytest.mark.parametrize("kind", KINDS)
def test_structured_quantities_match_dense(kind):
    post = make(kind, seed=1)
    P = dense_precision(post)
    Sigma = np.linalg.inv(P)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((5, D))
    V = rng.standard_normal((D, 4))
    lam = rng.uniform(0.1, 3.0, D)

    np.testing.assert_allclose(post.marginal_variances(), np.diag(Sigma), rtol=1e-12, atol=0)
    np.testing.assert_allclose(post.quadratic_forms(X), np.einsum("nd,de,ne->n", X, Sigma, X), rtol=1e-11, atol=0)
    np.testing.assert_allclose(post.cov_times(V), Sigma @ V, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(post.cov_times(V[:, 0]), Sigma @ V[:, 0], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(post.precision_logdet(), np.linalg.slogdet(P)[1], rtol=1e-12, atol=1e-12)
    d, U = post.precision_terms()
    np.testing.assert_allclose(np.diag(d) + U @ U.T, P, rtol=1e-14, atol=1e-14)
    expected_kl = 0.5 * (np.sum(lam * np.diag(Sigma)) + np.sum(lam * post.mean**2) - D
                         + np.linalg.slogdet(P)[1] - np.sum(np.log(lam)))
    np.testing.assert_allclose(post.kl_to_prior(lam), expected_kl, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_samples_are_an_exact_square_root_map(kind):
    """``sample`` maps standard normals z by ``theta = mean + B z`` with ``B B^T = Sigma`` exactly: B is read
    off the samples drawn from a replayed generator, whose n x D draw holds one sample's z per row. The samples
    are the rows of a C-contiguous array (the layout the network slices its weights from)."""
    post = make(kind, seed=3)
    n = 400
    theta = post.sample(np.random.default_rng(4), n)
    assert theta.shape == (n, D) and theta.flags.c_contiguous
    Z = np.random.default_rng(4).standard_normal((n, D))
    B = np.linalg.lstsq(Z, theta - post.mean, rcond=None)[0].T
    np.testing.assert_allclose(B @ B.T, np.linalg.inv(dense_precision(post)), rtol=0, atol=1e-11)


def test_full_sample_moments_statistically():
    """Seeded statistical check of the full kind: the sample covariance of 40 000 draws is within 3 % (a few
    standard errors at this size) of the dense covariance."""
    post = make("full", seed=5)
    theta = post.sample(np.random.default_rng(6), 40_000)
    Sigma = np.linalg.inv(dense_precision(post))
    scale = np.sqrt(np.outer(np.diag(Sigma), np.diag(Sigma)))
    np.testing.assert_allclose(np.cov(theta.T) / scale, Sigma / scale, rtol=0, atol=0.03)
    np.testing.assert_allclose(theta.mean(0), post.mean, rtol=0, atol=0.03 * np.sqrt(np.diag(Sigma)).max())


# ------------------------------------------------------------------------------------------------ divergences
@pytest.mark.parametrize("kind_q", KINDS)
@pytest.mark.parametrize("kind_p", KINDS)
def test_kl_matches_dense_for_every_pair(kind_p, kind_q):
    p, q = make(kind_p, seed=10), make(kind_q, seed=11)
    expected = dense_kl(p, q)
    assert expected > 0.1
    np.testing.assert_allclose(kl(p, q), expected, rtol=1e-11, atol=0)
    np.testing.assert_allclose(symmetric_kl(p, q), 0.5 * (expected + dense_kl(q, p)), rtol=1e-11, atol=0)
    np.testing.assert_allclose(symmetric_kl(q, p), symmetric_kl(p, q), rtol=1e-13, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_kl_of_a_posterior_with_itself_is_zero(kind):
    p = make(kind, seed=12)
    assert abs(kl(p, p)) < 1e-12


def test_same_gaussian_in_different_kinds_has_zero_kl():
    """A diagonal Gaussian written as low-rank (L = 0) and as full has zero KL to itself in every form."""
    diag = make("diagonal", seed=13)
    prec = np.exp(-2.0 * diag.log_sigma)
    forms = [diag, LowRankGaussian(diag.mean, np.zeros((D, 0)), prec), FullGaussian.from_precision(diag.mean,
                                                                                                  np.diag(prec))]
    for a in forms:
        for b in forms:
            assert abs(kl(a, b)) < 1e-12, (a.kind, b.kind)


def test_negative_control_directions_differ():
    """Negative control: the directed KLs of the test pair differ by far more than the tolerance above, so a swap
    of the arguments (or of the precision and covariance in the trace) would be caught."""
    p, q = make("lowrank", seed=10), make("full", seed=11)
    assert abs(kl(p, q) - dense_kl(q, p)) > 1e-2 * dense_kl(p, q)
    q_moved = FullGaussian(mean=q.mean + 0.1, chol=q.chol)
    assert abs(kl(p, q_moved) - dense_kl(p, q)) > 1e-3


def test_mismatched_sizes_are_refused():
    with pytest.raises(ValueError, match="7 and 8"):
        kl(make("diagonal", 1), make("diagonal", 1, D=8))


def test_low_rank_and_diagonal_never_form_a_dense_matrix():
    """At D = 200 000 a D x D matrix would need 320 GB: low-rank vs diagonal KLs complete, and agree with the closed
    form of two diagonal Gaussians when U = 0."""
    big = 200_000
    rng = np.random.default_rng(14)
    mean = rng.standard_normal(big)
    p = LowRankGaussian(mean=mean, U=rng.standard_normal((big, 2)) / 100, d=rng.uniform(0.5, 2.0, big))
    q = DiagonalGaussian(mean=mean + 0.01, log_sigma=np.zeros(big))
    skl = symmetric_kl(p, q)
    assert np.isfinite(skl) and skl > 0
    p0 = LowRankGaussian(mean=mean, U=np.zeros((big, 1)), d=p.d)
    var = 1.0 / p.d
    closed = 0.5 * np.sum(var + 0.01**2 - 1.0 - np.log(var))
    np.testing.assert_allclose(kl(p0, q), closed, rtol=1e-9, atol=0)
