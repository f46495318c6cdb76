"""Post-hoc compression of a posterior's standard deviations to a k-tied Normal (Swiatkowski et al., Section 2).

For each weight matrix ``W_l : (m, n)`` (``m = n_in``, ``n = n_out``, the model's flat layout) the matrix ``A`` of
posterior standard deviations of its entries is taken from the posterior: ``exp(log_sigma)`` for a mean-field
posterior; the marginal standard deviations ``sqrt(diag(Sigma))`` for a low-rank (SLANG) or full Gaussian, from
``marginal_variances()``, which never forms ``Sigma`` for the low-rank kind; ``max(U V^T, floor)`` for a k-tied
one. With the singular value decomposition ``A = sum_i gamma_i u_i v_i^T`` (``gamma_1 >= gamma_2 >= ...``):

- the explained variance of singular value i is ``gamma_i^2 / sum_j gamma_j^2`` (the paper's Figure 2);
- the rank-k truncation ``A_k = sum_{i<=k} gamma_i u_i v_i^T`` is the best rank-k approximation in the Frobenius
  norm (Eckart-Young), stored as ``U = [u_i sqrt(gamma_i)]``, ``V = [v_i sqrt(gamma_i)]``;
- ``A_k`` may have entries <= 0 (for k >= 2 the singular vectors have mixed signs), which are not standard
  deviations: the compressed posterior uses ``max(A_k, floor)`` (Appendix A.1: "we threshold the minimum values of
  the resulting approximation at very low positive constant"), with ``floor = FLOOR_RELATIVE * max(A)``.

The floor is relative to each layer's largest standard deviation so that it does not depend on the units of the
weights (a mean-field network's sigmas span from about 1e-3 to 1; an unstandardised logistic regression's can be
1e-5 or 100). ``FLOOR_RELATIVE = 1e-6`` is far below the spread of learned standard deviations (trained layers span
a few decades at most), so it changes only entries whose truncation is non-positive or practically zero, while
keeping ``log sigma`` finite (``log max(A) - 13.8``), so that the KL term and the density stay defined. A floored
weight is nearly deterministic, and its KL to the prior is large (about ``-log(lambda^(1/2) floor)`` nats):
the -ELBO reports that cost rather than hiding it.

Singular vectors are determined only up to a simultaneous sign flip of ``(u_i, v_i)``; the sign is fixed by making
the largest-magnitude entry of each ``u_i`` positive (the first such entry in a tie), so a compressed file is the
same whatever signs LAPACK returns. For a positive ``A`` the top pair ``(u_1, v_1)`` is then entrywise positive
(Perron-Frobenius), and so is the rank-1 reconstruction. Biases keep their own standard deviations and every
posterior mean is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slangcli.gaussian.posteriors import KTiedGaussian
from slangcli.models import MLP

FLOOR_RELATIVE = 1e-6


@dataclass(frozen=True)
class LayerCompression:
    """One weight matrix: its spectrum and its rank-k factors. ``singular_values : (min(m, n),)``,
    ``U : (m, k)``, ``V : (n, k)``."""

    shape: tuple[int, int]
    singular_values: np.ndarray
    U: np.ndarray
    V: np.ndarray
    floor: float
    relative_error: float  # ||A - max(U V^T, floor)||_F / ||A||_F
    n_floored: int  # entries of U V^T below the floor

    @property
    def rank(self) -> int:
        return int(self.U.shape[1])

    @property
    def explained_variance(self) -> np.ndarray:
        """``gamma_i^2 / sum_j gamma_j^2`` for every singular value."""
        sq = self.singular_values**2
        return sq / sq.sum()

    def summary(self) -> dict:
        return {"shape": list(self.shape), "rank": self.rank, "floor": self.floor,
                "relative_error": self.relative_error, "n_floored": self.n_floored,
                "explained_variance": float(self.explained_variance[: self.rank].sum())}


def standard_deviations(posterior) -> np.ndarray:
    """The marginal standard deviations ``(D,)`` of any posterior kind (its ``std``), never forming a D x D matrix
    for the low-rank, diagonal and k-tied kinds."""
    return posterior.std()


def std_matrices(posterior, model: MLP) -> tuple[list[np.ndarray], np.ndarray]:
    """The standard deviations of each weight matrix, ``(m, n)`` per layer, and of the biases ``(B,)`` (layer
    after layer)."""
    sigma = standard_deviations(posterior)
    layers = model.layout.layers
    return ([sigma[s.W].reshape(s.n_in, s.n_out) for s in layers],
            np.concatenate([sigma[s.b] for s in layers]))


def canonical_signs(U: np.ndarray, Vt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flip each singular pair ``(U[:, i], Vt[i])`` so that the largest-magnitude entry of ``U[:, i]`` is
    positive (``U : (m, r)``, ``Vt : (r, n)``)."""
    idx = np.argmax(np.abs(U), axis=0)
    signs = np.sign(U[idx, np.arange(U.shape[1])])
    signs[signs == 0] = 1.0
    return U * signs, Vt * signs[:, None]


def canonical_svd(A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD ``A = U diag(s) Vt`` with :func:`canonical_signs`."""
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    U, Vt = canonical_signs(U, Vt)
    return U, s, Vt


def compress_matrix(A: np.ndarray, rank: int, floor_relative: float = FLOOR_RELATIVE) -> LayerCompression:
    """The rank-``min(rank, m, n)`` truncation of a positive ``A : (m, n)``, floored at ``floor_relative *
    max(A)``."""
    Uf, s, Vt = canonical_svd(A)
    k = min(rank, *A.shape)
    root = np.sqrt(s[:k])
    U, V = Uf[:, :k] * root, Vt[:k].T * root
    floor = float(floor_relative * A.max())
    product = U @ V.T
    approx = np.maximum(product, floor)
    return LayerCompression(shape=(int(A.shape[0]), int(A.shape[1])), singular_values=s, U=U, V=V, floor=floor,
                            relative_error=float(np.linalg.norm(A - approx) / np.linalg.norm(A)),
                            n_floored=int(np.count_nonzero(product < floor)))


def compress(posterior, model: MLP, rank: int, floor_relative: float = FLOOR_RELATIVE):
    """The k-tied posterior of rank ``rank`` (``min(rank, m, n)`` per layer) compressed from ``posterior``, and
    the :class:`LayerCompression` of every weight matrix."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    matrices, bias_sigma = std_matrices(posterior, model)
    layers = [compress_matrix(A, rank, floor_relative) for A in matrices]
    ktied = KTiedGaussian(mean=posterior.mean.copy(), U=tuple(c.U for c in layers), V=tuple(c.V for c in layers),
                          bias_log_sigma=np.log(bias_sigma), floor=np.array([c.floor for c in layers]),
                          sizes=tuple(model.sizes))
    return ktied, layers


def n_variational_params(posterior) -> int:
    """Variational parameters of a posterior as its method holds them (its ``n_variational_params``)."""
    return posterior.n_variational_params()
