"""KL divergences between Gaussian posteriors of any two kinds, using each one's structure.

For ``p = N(mu_p, Sigma_p)`` and ``q = N(mu_q, Sigma_q)`` over D parameters, with ``P_q = Sigma_q^{-1}``,

    KL(p || q) = 1/2 [ tr(P_q Sigma_p) + (mu_q - mu_p)^T P_q (mu_q - mu_p) - D + log |P_p| - log |P_q| ].

Every posterior kind writes its precision as ``P_q = diag(d_q) + U_q U_q^T`` (``posteriors.*.precision_terms``:
low-rank ``(d, U)``; diagonal ``(1 / sigma^2, none)``; full ``(0, chol)``), which splits the trace into

    tr(P_q Sigma_p) = sum_j d_qj (Sigma_p)_jj + sum(U_q * (Sigma_p U_q)),

a marginal-variance computation and one product of ``Sigma_p`` with the k columns of ``U_q``. Costs: low-rank or
diagonal pairs O(D L^2) (Woodbury products, never a D x D matrix); with a full Gaussian on either side O(D^2 L)
to O(D^3), which the D x D factor makes inherent.

The symmetric KL of the SLANG paper's Table 1 is ``(KL(p || q) + KL(q || p)) / 2``.
"""

from __future__ import annotations

import numpy as np


def kl(p, q) -> float:
    """``KL(p || q)`` for posteriors ``p`` and ``q`` of any kinds in ``slangcli.gaussian.posteriors``."""
    if p.mean.shape != q.mean.shape:
        raise ValueError(f"KL between posteriors of {p.mean.size} and {q.mean.size} parameters")
    d_q, U_q = q.precision_terms()
    delta = q.mean - p.mean
    trace = float(np.sum(d_q * p.marginal_variances())) if np.any(d_q) else 0.0
    quad = float(np.sum(d_q * delta**2))
    if U_q.shape[1]:
        trace += float(np.sum(U_q * p.cov_times(U_q)))
        quad += float(np.sum((U_q.T @ delta) ** 2))
    return 0.5 * (trace + quad - p.mean.size + p.precision_logdet() - q.precision_logdet())


def symmetric_kl(p, q) -> float:
    """``(KL(p || q) + KL(q || p)) / 2``."""
    return 0.5 * (kl(p, q) + kl(q, p))
